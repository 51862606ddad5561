"""Why a target is missed, from the figures: where gpufill's calls went and what bounds them.

Facts only (counts and the cases they come from), so the policy owner can act on them.
"""

from __future__ import annotations

from collections import Counter
from statistics import median

from gpufill.constants import DEFAULT_BATCH_MAX

from bench import oracle
from bench.analysis import Row
from bench.cases import TIERS
from bench.targets import CALLS_VS_ORACLE, Verdict

WASTED = ("capacity", "quota", "throttled", "error")


def _gpufill(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.outcome.strategy == "gpufill"]


def calls_spent(rows: list[Row]) -> str:
    mine = _gpufill(rows)
    total = sum(r.outcome.run_instances for r in mine)
    wasted = {k: sum(r.outcome.answers.get(k, 0) for r in mine) for k in WASTED}
    launched = sum(r.outcome.answers.get("launched", 0) for r in mine)
    full = sum(r.outcome.full_batches for r in mine)
    by_tier = {t: sum(r.outcome.answers.get("capacity", 0) for r in mine if r.case.tier == t) for t in TIERS}
    return (
        f"gpufill's {total} RunInstances on the generated set: {launched} launched something "
        f"({full} of them a full batch of batch_max), {wasted['capacity']} met an empty pool, "
        f"{wasted['quota']} hit a quota. The empty-pool calls by tier: "
        + ", ".join(f"{t} {n}" for t, n in by_tier.items())
        + "."
    )


def other_ec2_calls(rows: list[Row]) -> str:
    """EC2 calls besides RunInstances: what scoring, networking and waiting cost."""
    mine = _gpufill(rows)
    apis: Counter[str] = Counter()
    for r in mine:
        apis.update(r.outcome.ec2_by_api)
    apis.pop("RunInstances", None)
    listed = ", ".join(f"{api} {n}" for api, n in apis.most_common())
    return f"gpufill's other EC2 calls on the generated set ({sum(apis.values())}): {listed or 'none'}."


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
            f"the rest is calls on pools that turned out empty (the ranking's capacity signal is an estimate at best)"
        )
    # What-if: the same run with every empty-pool call taken away (a perfect capacity signal).
    informed = [(r.outcome.run_instances - r.outcome.answers.get("capacity", 0)) / r.oracle.run_instances for r in mine]
    if informed:
        text += (
            f". Without its empty-pool calls gpufill would sit at {median(informed):.2f}× the oracle at the median, "
            f"so a capacity signal alone does not reach {CALLS_VS_ORACLE}× while batch_max stays {DEFAULT_BATCH_MAX}"
            if median(informed) > CALLS_VS_ORACLE
            else f". Without its empty-pool calls gpufill would sit at {median(informed):.2f}× the oracle at the median"
        )
    return text + "."


def _answers(row: Row) -> str:
    return "(" + ", ".join(f"{n} {outcome}" for outcome, n in sorted(row.outcome.answers.items())) + ")"


def not_fewer_calls(rows: list[Row]) -> list[str]:
    classic = {r.case.name: r for r in rows if r.outcome.strategy == "classic"}
    notes = []
    for r in _gpufill(rows):
        c = classic[r.case.name]
        if r.case.count < 4 or r.outcome.run_instances < c.outcome.run_instances:
            continue
        note = (
            f"{r.case.name}: gpufill {r.outcome.run_instances} RunInstances {_answers(r)}, "
            f"classic {c.outcome.run_instances} {_answers(c)}."
        )
        if not c.outcome.answers.get("capacity"):
            note += (
                " Classic met no empty or short pool, so partial mode had nothing to save"
                + ("; a quota error halves the batch in both modes." if c.outcome.answers.get("quota") else ".")
            )
        notes.append(note)
    return notes


def pricier_regions(rows: list[Row]) -> str:
    over = [r for r in _gpufill(rows) if r.cost_vs_cheapest is not None and r.cost_vs_cheapest > 1.05]
    elsewhere = 0
    for r in over:
        cheapest_regions = {pool.region for pool in oracle.cheapest_fill(r.case, r.outcome.launched)}
        elsewhere += bool(set(r.outcome.regions_used) - cheapest_regions)
    return (
        f"On {len(over)} of {len(_gpufill(rows))} cases gpufill's fleet costs more than 5 % over the cheapest; "
        f"on {elsewhere} of them part of the fleet sits in a region the cheapest fleet does not use "
        f"(price is 40 of the score's 100 points, and a region is drained before the next is tried)."
    )


def below_oracle(rows: list[Row]) -> str:
    """The oracle chases the cheapest fill; fewer calls than it means a pricier fleet."""
    mine = [r for r in _gpufill(rows) if r.oracle.run_instances]
    below = [r for r in mine if r.outcome.run_instances < r.oracle.run_instances]
    strict = [r.outcome.run_instances / oracle.fewest_calls(r.case) for r in mine if oracle.fewest_calls(r.case)]
    text = ""
    if below:
        premium = median(r.cost_vs_cheapest for r in below if r.cost_vs_cheapest is not None)
        text = (
            f"On {len(below)} of {len(mine)} cases gpufill made fewer RunInstances than the oracle "
            f"({', '.join(r.case.name for r in below)}): it took deeper, pricier pools than the cheapest fill uses "
            f"(+{premium - 1:.1%} $/h at the median on those). "
        )
    if strict:
        text += (
            f"Against the fewest calls that reach the same fill at any price (deepest pools first, quotas "
            f"relaxed: a strict lower bound), gpufill's median is {median(strict):.2f}×."
        )
    return text


def notes(verdicts: list[Verdict], rows: list[Row]) -> list[str]:
    by_target = {v.target: v for v in verdicts}
    found = [calls_spent(rows), other_ec2_calls(rows), below_oracle(rows), batch_bound(rows)]
    for target, verdict in by_target.items():
        if verdict.met:
            continue
        if "count ≥ 4" in target:
            found.extend(not_fewer_calls(rows))
        elif "$/h" in target:
            found.append(pricier_regions(rows))
    return found
