"""The runner: every seed's markets on one pool, each seed's outcomes kept apart, in case order."""

import dataclasses

from bench_markets import OREGON_FIRST, case

from bench import engine_runs, runner
from bench.outcome import STRATEGIES, Outcome


def test_sets_share_one_pool_and_keep_their_outcomes_apart(monkeypatch):
    asked = []

    def fake_run(c, strategy, launch_mode=None, scoring=None, *, judge_iam=False):
        asked.append((c.name, c.count, strategy, judge_iam))
        return Outcome(case=c.name, strategy=strategy, requested=c.count, launched=c.count, run_instances=1,
                       ec2_calls=1, hourly_cost=0.1 * c.count, modelled_seconds=1.0)

    monkeypatch.setattr(engine_runs, "run", fake_run)
    small, big = case(OREGON_FIRST, count=1), case(OREGON_FIRST, count=3)  # the same name in both seeds
    other = dataclasses.replace(small, name="other")
    found = runner.run_sets({1: [small, other], 2: [big]}, workers=1)
    # The biggest request of any seed first; then seed by seed, case by case.
    assert [a[:3] for a in asked] == [("hand", 3, "classic"), ("hand", 3, "gpufill"), ("hand", 1, "classic"),
                                       ("hand", 1, "gpufill"), ("other", 1, "classic"), ("other", 1, "gpufill")]
    assert not any(a[3] for a in asked)  # IAM judging is asked for, not the default
    assert list(found[1]) == [(n, s) for n in ("hand", "other") for s in STRATEGIES]
    assert found[1][("hand", "gpufill")].requested == 1 and found[2][("hand", "gpufill")].requested == 3
    assert found[2][("hand", "oracle")].launched == 3  # the simulators ran on each seed's own market
    assert runner.run_all([big], workers=1, judge_iam=True)[("hand", "classic")].requested == 3
    assert asked[-1][3] is True
