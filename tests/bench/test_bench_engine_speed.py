"""The arithmetic of `python -m bench.engine_speed`'s report (the measurement itself is bench-only)."""

import pytest

from bench.engine_speed import render, summarise


def sample(demo, cold, warm, run, transitions=40):
    return {"demo_s": demo, "cold_start_s": cold, "warm_start_s": warm, "warm_run_s": run, "transitions": transitions}


def test_medians_per_side_and_base_over_head():
    base = [sample(9.0, 4.0, 1.0, 4.0), sample(7.0, 5.0, 0.8, 2.0), sample(8.0, 3.0, 1.2, 3.0)]
    head = [sample(2.0, 1.0, 0.25, 1.0), sample(3.0, 2.0, 0.2, 0.4), sample(1.0, 1.5, 0.3, 0.6)]
    rows = {r["metric"]: r for r in summarise(base, head)}
    assert rows["demo simulate"]["base"] == 8.0 and rows["demo simulate"]["head"] == 2.0
    assert rows["demo simulate"]["ratio"] == pytest.approx(4.0)
    assert rows["cold start"]["ratio"] == pytest.approx(4.0 / 1.5)
    assert rows["warm start"]["ratio"] == pytest.approx(1.0 / 0.25)
    # per transition: the run's seconds over its transitions, in ms, median of the quotients
    assert rows["per transition"]["base"] == pytest.approx(75.0) and rows["per transition"]["head"] == pytest.approx(15.0)
    assert rows["per transition"]["ratio"] == pytest.approx(5.0)


def test_report_shows_each_metric_with_its_unit_and_ratio():
    rows = summarise([sample(6.0, 3.0, 1.0, 2.0)], [sample(2.0, 1.0, 0.5, 0.8)])
    text = render(rows, "abc1234", "def5678", 1)
    assert "median of 1: base abc1234 vs head def5678" in text
    assert "demo simulate (s)" in text and "3.00x" in text
    assert "per transition (ms)" in text and "50" in text and "20" in text and "2.50x" in text
