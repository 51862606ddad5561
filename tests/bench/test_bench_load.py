"""Several requests at once in one deployment, competing for one scarce market while EC2 throttles
(bench/load.py runs 25 of them at AWS's bucket sizes; here 5, with the buckets shrunk so that
throttling really happens)."""

from bench.load import run_load


def test_requests_at_once_through_throttling_end_documented_with_no_duplicate_or_orphan():
    result = run_load(5, scale=0.2, alone=False, timeout=120)
    assert sum(result.throttles.values()) > 0, "the shrunk buckets must throttle: this test is about that"
    assert result.raw_endings == 0, [(r.name, r.ending) for r in result.runs]
    assert not result.duplicates and not result.orphans and not result.unreported
    # The market holds 20 instances for 10 wanted: throttling delays launches, it never loses one.
    assert [r.launched for r in result.runs] == [2] * 5
