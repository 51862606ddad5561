"""The dynamic bench's goals and where the calls go (bench/dynamic/goals.py), and the table of the
wait's settings (bench/dynamic/levers.py), on synthetic outcomes: no market is run."""

from __future__ import annotations

from bench.dynamic import gpufill, goals, levers
from bench.dynamic.measure import Outcome
from bench.dynamic.report import STRATEGIES


def outcome(case: str, strategy: str, *, hours: float | None = 1.0, dollars: float = 10.0, calls: int = 100,
            by_api: dict | None = None) -> Outcome:
    return Outcome(
        case=case, strategy=strategy, tier="scarce", requested=4, time_to_n=None if hours is None else hours * 3600,
        dollars=dollars, idle_dollars=0.0, wasted_hours=0.0, launch_calls=calls, ec2_calls=calls, launched=4,
        interrupted=0, by_api=by_api if by_api is not None else {"CreateFleet": calls},
    )


def market(case: str, **mine) -> list[Outcome]:
    """Every strategy at the defaults, gpufill with `mine`."""
    return [outcome(case, s, **(mine if s == "gpufill" else {})) for s in STRATEGIES]


def test_each_goal_is_judged_on_totals_with_the_markets_that_went_each_way():
    outcomes = market("a", hours=0.5, dollars=9.0, calls=140) + market("b", hours=2.0, dollars=12.0, calls=160)
    filled, time, money, calls = goals.judge(outcomes)
    assert (filled.met, filled.figure) == (True, "2/2")
    # 2.5 h against 2 h: missed, one market each way.
    assert not time.met and time.figure == "2.5 h against 2.0 h (1.250×)"
    assert time.test == "faster on 1, slower on 1, equal on 0 (sign test p = 1)"
    assert not money.met and "on 2 markets" in money.figure
    # 300 calls against 200: 1.5× exactly is met; each market is compared with 1.5× Karpenter-style's there.
    assert calls.met and calls.figure == "300 against 200 (1.50×)"
    assert calls.test.startswith("under 1.5× theirs on 1, over on 1")


def test_an_unfilled_market_misses_the_fill_counts_twelve_hours_and_leaves_the_dollars_of_the_others():
    outcomes = market("a", hours=None) + market("b")
    filled, time, money, _ = goals.judge(outcomes)
    assert not filled.met and filled.figure == "1/2"
    assert time.figure.startswith("13.0 h against 2.0 h")
    assert money.figure.endswith("on 1 markets")  # only "b" was filled by every strategy


def test_the_goals_table_has_a_row_per_goal_and_a_column_per_set_of_markets():
    header, rows = goals.table([("committed", market("a")), ("held-out 7", market("z", calls=1000))])
    assert header == ["goal", "committed", "held-out 7"]
    assert [r[0] for r in rows] == [g.goal for g in goals.judge(market("a"))]
    assert rows[3][1].startswith("**MET**") and rows[3][2].startswith("**MISSED**: 1,000 against 100 (10.00×)")


def test_all_or_nothing_is_judged_on_its_own_rows_for_dollars_and_time_on_the_same_markets():
    outcomes = market("a", dollars=14.0) + market("b", dollars=14.0) + market("c", hours=None)
    aon = [outcome("a", "gpufill", dollars=9.0, hours=1.5), outcome("b", "gpufill", dollars=10.0, hours=0.5),
           outcome("c", "gpufill", hours=None)]
    default = goals.judge(outcomes)
    both = goals.judge(outcomes, aon)
    assert both[:4] == default and not default[2].met  # the default's rows unchanged: it holds while it waits
    money, time = both[4:]
    assert money.goal.startswith(goals.AON) and time.goal.startswith(goals.AON)
    # On "a" and "b", the markets every strategy (and all_or_nothing) fills: $19 against $20.
    assert money.met and money.figure == "$19.00 against $20.00 (0.950×) on 2 markets (2/3 filled)"
    assert money.test.startswith("cheaper on 1, dearer on 0, equal on 1")
    assert time.figure.startswith("14.0 h against 3.0 h") and not time.met  # "c" unfilled counts 12 h
    header, rows = goals.table([("committed", outcomes, aon), ("held-out", outcomes)])
    assert len(rows) == 6 and rows[4][2] == rows[5][2] == ""


def test_calls_by_action_puts_gpufill_s_largest_first_with_each_share_and_the_totals():
    outcomes = [outcome("a", s, calls=10, by_api={"CreateFleet": 4, "DescribeImages": 6} if s == "gpufill" else {"RunInstances": 10})
                for s in STRATEGIES]
    header, rows = goals.calls_by_action(outcomes)
    assert header == ["EC2 action", *STRATEGIES]
    assert [r[0] for r in rows] == ["DescribeImages", "CreateFleet", "RunInstances", "**Σ**", "Σ per market"]
    assert rows[0][-1] == "6 (60%)" and rows[2][1] == "10 (100%)" and rows[2][-1] == "—"


def test_a_setting_is_taken_only_with_fewer_calls_no_slower_than_karpenter_style_and_no_dearer():
    step, beside = levers.Lever("x", gpufill.Asked(), True), levers.Lever("y", gpufill.Asked(), False)
    before = (10.0, 100.0, 1000)
    assert levers.verdict_of(step, (10.0, 100.0, 900), None, 11.0) == "the old wait"
    assert levers.verdict_of(step, (10.0, 100.0, 900), before, 11.0) == "yes"
    assert levers.verdict_of(step, (10.0, 100.0, 1000), before, 11.0) == "no: no fewer calls"
    assert levers.verdict_of(step, (11.5, 100.0, 900), before, 11.0) == "no: slower than karpenter-style (+30 min)"
    assert levers.verdict_of(step, (10.0, 101.5, 900), before, 11.0) == "no: dearer (+$1.50)"
    assert levers.verdict_of(beside, (10.5, 100.0, 900), before, 11.0) == "could be: 100 fewer calls, +30 min"


def test_the_levers_table_measures_each_setting_against_the_step_before():
    found = {lever.name: [outcome("a", "gpufill", calls=1000 - 100 * n, by_api={"CreateFleet": 10, "DescribeSpotPriceHistory": 5})]
             for n, lever in enumerate(levers.LEVERS)}
    header, rows = levers.table(found, [outcome("a", "karpenter", calls=100, hours=2.0)])
    assert header[0] == "setting of the wait" and len(rows) == len(levers.LEVERS)
    assert [r[-1] for r in rows[:3]] == ["the old wait", "yes", "yes"]
    assert rows[0][4] == "1,000 (10.00×)" and rows[0][5] == "5" and rows[0][6] == "10"
