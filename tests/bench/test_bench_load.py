"""Several requests at once in one deployment, competing for one scarce market while EC2 throttles
(bench/load.py runs 25 of them at AWS's bucket sizes; here 5, with the buckets shrunk so that
throttling really happens)."""

import pytest

from bench import load
from bench.load import run_load, wall_limit


def test_requests_at_once_through_throttling_end_documented_with_no_duplicate_or_orphan():
    result = run_load(5, scale=0.2, alone=False, timeout=wall_limit(120))
    assert sum(result.throttles.values()) > 0, "the shrunk buckets must throttle: this test is about that"
    assert result.raw_endings == 0, [(r.name, r.ending) for r in result.runs]
    assert not result.duplicates and not result.orphans and not result.unreported
    # The market holds 20 instances for 10 wanted: throttling delays launches, it never loses one.
    assert [r.launched for r in result.runs] == [2] * 5


@pytest.mark.parametrize("load_average, cores, limit", [(0.3, 2, 600), (2.0, 2, 600), (9.0, 2, 2700), (8.0, None, 4800)])
def test_the_wall_limit_grows_with_the_machines_load_per_core_never_below_the_base(monkeypatch, load_average, cores, limit):
    monkeypatch.setattr(load.os, "getloadavg", lambda: (load_average, 0.0, 0.0))
    monkeypatch.setattr(load.os, "cpu_count", lambda: cores)
    assert wall_limit(600) == limit


def test_the_wall_limit_is_an_option_and_its_default_follows_the_load(monkeypatch, tmp_path):
    asked = []

    def run(runs, *, scale, timeout):
        asked.append(timeout)
        return load.LoadResult([], set(), set(), set(), {}, 0, 0.0, 0.0, 0.0)

    monkeypatch.setattr(load, "run_load", run)
    monkeypatch.setattr(load, "wall_limit", lambda base=load.WALL_LIMIT_SECONDS: base * 3)
    monkeypatch.setattr(load, "as_markdown", lambda result, scale: "")
    assert load.main(["--timeout", "45", "--out", str(tmp_path / "load.md")]) == 0
    assert load.main(["--out", str(tmp_path / "load.md")]) == 0
    assert asked == [45.0, load.WALL_LIMIT_SECONDS * 3]
    with pytest.raises(SystemExit):
        load.main(["--timeout", "0"])
