"""One market through both state-machine strategies, and the tables built from all four."""

from gpufill.models.request import Request

from bench import analysis, engine_runs
from bench.costs import COLD_START_SECONDS
from bench.runner import run_all
from bench.tables import CASE_COLUMNS, SUMMARY_COLUMNS, case_table, summary_table
from bench.outcome import STRATEGIES

from bench_markets import OREGON_FIRST, case


def test_classic_is_exact_probe_and_fill_and_gpufill_keeps_its_defaults():
    c = case(OREGON_FIRST, count=4)
    c.request["launch_mode"] = "exact"  # the case's own choice never reaches gpufill
    classic, gpufill = engine_runs.request_for(c, "classic"), engine_runs.request_for(c, "gpufill")
    assert (classic["launch_mode"], classic["batch_max"]) == ("exact", 4)
    assert ("scoring" in classic) == ("scoring" in Request.model_fields)
    assert not {"launch_mode", "batch_max", "scoring"} & set(gpufill)


def test_one_market_through_every_strategy_fills_every_column():
    c = case(OREGON_FIRST, count=3)
    outcomes = run_all([c], workers=1)
    for strategy in engine_runs.ENGINE_STRATEGIES:
        outcome = outcomes[(c.name, strategy)]
        assert outcome.status == "FULFILLED", outcome
        assert outcome.launched == 3
        assert outcome.transitions > 0 and outcome.lambda_invocations > 0 and outcome.orchestration_usd > 0
        # The run is the first after idle: each function on the way to the fill starts cold once
        # (the scoring Map's branches side by side), and the time to fill includes it.
        before_fill = {"validate_request", "score_region", "rank_pools", "prepare_region", "launch_batch"}
        assert before_fill <= set(outcome.lambda_by_function)
        assert outcome.cold_start_seconds == len(before_fill) * COLD_START_SECONDS
        assert outcome.modelled_seconds > outcome.cold_start_seconds
    # exact mode halves its way down on every empty or short zone; partial asks each zone once.
    assert outcomes[(c.name, "gpufill")].run_instances < outcomes[(c.name, "classic")].run_instances

    rows = analysis.rows([c], outcomes)
    header, body = case_table(rows)
    assert header == [h for h, _ in CASE_COLUMNS] and len(body) == len(STRATEGIES)
    assert all(len(row) == len(header) for row in body)
    for needed in ("fill", "launch calls", "×oracle", "×classic", "EC2 calls", "transitions", "Lambda",
                   "orch. $", "fleet $/h", "×cheapest", "time s"):
        assert needed in header
    header, body = summary_table(analysis.aggregate(rows))
    assert header == [h for h, _ in SUMMARY_COLUMNS] and [r[0] for r in body] == list(STRATEGIES)
