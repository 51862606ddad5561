"""Why a target is missed, from the figures: where gpufill's calls went and what bounds them.

Facts only (counts and the cases they come from), so the policy owner can act on them.
"""

from __future__ import annotations

from statistics import median

from gpufill.constants import DEFAULT_BATCH_MAX

from bench import oracle
from bench.analysis import Row
from bench.market import SpotMarket
from bench.targets import Verdict

WASTED = ("capacity", "quota", "throttled", "error")


def _gpufill(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.outcome.strategy == "gpufill"]


def calls_spent(rows: list[Row]) -> str:
    mine = _gpufill(rows)
    total = sum(r.outcome.run_instances for r in mine)
    wasted = {k: sum(r.outcome.answers.get(k, 0) for r in mine) for k in WASTED}
    launched = sum(r.outcome.answers.get("launched", 0) for r in mine)
    full = sum(r.outcome.full_batches for r in mine)
    return (
        f"gpufill's {total} RunInstances on the generated set: {launched} launched something "
        f"({full} of them a full batch of batch_max), {wasted['capacity']} met an empty pool, "
        f"{wasted['quota']} hit a quota."
    )


def batch_bound(rows: list[Row]) -> str:
    """How much of the gap to the oracle the batch cap alone explains."""
    mine = [r for r in _gpufill(rows) if r.oracle.run_instances]
    bounded = []
    for r in mine:
        calls = oracle.batched_calls(r.case, min(DEFAULT_BATCH_MAX, r.case.count))
        if calls:
            bounded.append(r.outcome.run_instances / calls)
    big = [r for r in mine if r.case.count > DEFAULT_BATCH_MAX]
    floor = [oracle.batched_calls(r.case, DEFAULT_BATCH_MAX) / r.oracle.run_instances for r in big]
    text = (
        f"The oracle asks each pool once for all it gives; gpufill asks for at most batch_max "
        f"(default {DEFAULT_BATCH_MAX}) per call"
    )
    if floor:
        text += (
            f", so on the {len(big)} cases with count > {DEFAULT_BATCH_MAX} even a perfect pool order "
            f"needs {median(floor):.2f}× the oracle's calls at the median"
        )
    if bounded:
        text += (
            f". Against an oracle held to the same batch cap, gpufill's median is {median(bounded):.2f}×; "
            f"the rest is calls on pools that turned out empty (the ranking knows prices and zone counts, not capacity)"
        )
    return text + "."


def equal_calls(verdict: Verdict, rows: list[Row]) -> list[str]:
    pairs = {r.case.name: r for r in rows if r.outcome.strategy == "classic"}
    notes = []
    for r in _gpufill(rows):
        c = pairs[r.case.name]
        if r.case.count < 4 or r.outcome.run_instances < c.outcome.run_instances:
            continue
        notes.append(
            f"{r.case.name}: both {r.outcome.run_instances} calls; classic met {c.outcome.answers.get('capacity', 0)} "
            f"capacity errors, gpufill {r.outcome.answers.get('capacity', 0)}. With no short or empty pool on the way, "
            f"partial mode has nothing to save: both launch full batches of {min(DEFAULT_BATCH_MAX, r.case.count)}."
        )
    return notes


def pricier_first_region(rows: list[Row]) -> str:
    over = [r for r in _gpufill(rows) if r.cost_vs_cheapest is not None and r.cost_vs_cheapest > 1.05]
    elsewhere = 0
    for r in over:
        top_region = SpotMarket(r.case).classic_order()[0][0]
        cheapest_regions = {pool.region for pool in oracle.cheapest_fill(r.case, r.outcome.launched)}
        elsewhere += top_region not in cheapest_regions
    return (
        f"On {len(over)} of {len(_gpufill(rows))} cases gpufill's fleet costs more than 5 % over the cheapest; "
        f"on {elsewhere} of them the cheapest feasible fleet lies outside the region the classic score ranks first "
        f"(price is 40 of its 100 points; zone count and interruption tier can outrank a cheaper region, "
        f"and a region is drained before the next is tried)."
    )


def notes(verdicts: list[Verdict], rows: list[Row]) -> list[str]:
    by_target = {v.target: v for v in verdicts}
    found = [calls_spent(rows)]
    for target, verdict in by_target.items():
        if verdict.met:
            continue
        if "count ≥ 4" in target:
            found.extend(equal_calls(verdict, rows))
        elif "oracle" in target:
            found.append(batch_bound(rows))
        elif "$/h" in target:
            found.append(pricier_first_region(rows))
    return found
