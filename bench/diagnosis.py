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
from bench.outcome import LAUNCH_APIS, launch_label
from bench.targets import Verdict

WASTED = ("capacity", "quota", "throttled", "error")


def _gpufill(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.outcome.strategy == "gpufill"]


def calls_spent(rows: list[Row]) -> str:
    mine = _gpufill(rows)
    total = sum(r.outcome.launch_calls for r in mine)
    wasted = {k: sum(r.outcome.answers.get(k, 0) for r in mine) for k in WASTED}
    launched = sum(r.outcome.answers.get("launched", 0) for r in mine)
    full = sum(r.outcome.full_batches for r in mine)
    by_tier = {t: sum(r.outcome.answers.get("capacity", 0) for r in mine if r.case.tier == t) for t in TIERS}
    fleets = sum(r.outcome.launch_calls_by_api.get("CreateFleet", 0) for r in mine)
    # A fleet answers for every pool it tried, so its answers outnumber its calls.
    per = "pool answers (a fleet answers once per pool it tried)" if fleets else "calls"
    batches = f" ({full} of them a full batch of batch_max)" if full else ""
    return (
        f"gpufill's {total} launch calls ({launch_label(r.outcome for r in mine)}) on the generated set, in {per}: "
        f"{launched} launched something{batches}, {wasted['capacity']} met an empty pool, "
        f"{wasted['quota']} hit a quota. The empty-pool answers by tier: "
        + ", ".join(f"{t} {n}" for t, n in by_tier.items())
        + "."
    )


def other_ec2_calls(rows: list[Row]) -> str:
    """EC2 calls besides the launch calls: what scoring, networking and waiting cost."""
    mine = _gpufill(rows)
    apis: Counter[str] = Counter()
    for r in mine:
        apis.update(r.outcome.ec2_by_api)
    for api in LAUNCH_APIS:
        apis.pop(api, None)
    listed = ", ".join(f"{api} {n}" for api, n in apis.most_common())
    return f"gpufill's other EC2 calls on the generated set ({sum(apis.values())}): {listed or 'none'}."


def runinstances_bound(rows: list[Row]) -> str | None:
    """What the fleet bound asks of a strategy that launches with RunInstances only (gpufill's
    `partial` and `exact` modes); None when gpufill's runs launched by fleet."""
    if not any(r.outcome.launch_calls_by_api.get("RunInstances") for r in _gpufill(rows)):
        return None
    mine = [r for r in _gpufill(rows) if r.oracle.launch_calls and oracle.fewest_calls(r.case)]
    if not mine:
        return "No case where the oracle makes a call."
    pools = [oracle.fewest_calls(r.case) / r.oracle.launch_calls for r in mine]
    versus = [r.outcome.launch_calls / oracle.fewest_calls(r.case) for r in mine]
    capped = [r.outcome.launch_calls / max(1, oracle.batched_calls(r.case, min(DEFAULT_BATCH_MAX, r.case.count))) for r in mine]
    return (
        f"The oracle's bound lets one fleet call take a whole region; a RunInstances call lands in one AZ, so a "
        f"RunInstances-only strategy needs at least one call per pool it uses: the fewest pools that hold the fill "
        f"(deepest first, quotas relaxed) are {median(pools):.2f}× the oracle's bound at the median, and gpufill makes "
        f"{median(versus):.2f}× that pool bound at the median ({median(capped):.2f}× the cheapest fill asked in "
        f"batches of at most batch_max)."
    )


def _answers(row: Row) -> str:
    return "(" + ", ".join(f"{n} {outcome}" for outcome, n in sorted(row.outcome.answers.items())) + ")"


def not_fewer_calls(rows: list[Row]) -> list[str]:
    classic = {r.case.name: r for r in rows if r.outcome.strategy == "classic"}
    notes = []
    for r in _gpufill(rows):
        c = classic[r.case.name]
        if r.case.count < 4 or r.outcome.launch_calls < c.outcome.launch_calls:
            continue
        note = (
            f"{r.case.name}: gpufill {r.outcome.launch_calls} {r.outcome.launch_label} {_answers(r)}, "
            f"classic {c.outcome.launch_calls} {c.outcome.launch_label} {_answers(c)}."
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
        f"(regions are tried one after another, each drained before the next: a cheaper region ranked lower, "
        f"for a lower placement score, is left unused)."
    )


def like_for_like_time(rows: list[Row]) -> str:
    """gpufill's time on the simulators' terms: scoring plus its launch calls one after another, no
    orchestration, cold starts, networking set-up or placement scores; so the time target is not
    missed on overheads."""
    from bench.costs import api_seconds, fleet_seconds, scoring_seconds
    from bench.generate import COUNTS

    def launching(r: Row) -> float:
        calls = r.outcome.launch_calls_by_api
        return calls.get("RunInstances", 0) * api_seconds("ec2:RunInstances") + calls.get("CreateFleet", 0) * fleet_seconds()

    parts = []
    for n in COUNTS:
        mine = [r for r in _gpufill(rows) if r.case.count == n]
        if not mine:
            continue
        bare = median(scoring_seconds() + launching(r) for r in mine)
        karp = [r.outcome.modelled_seconds for r in rows if r.outcome.strategy == "karpenter" and r.case.count == n]
        parts.append(f"n={n} {bare:.1f} s (karpenter {median(karp):.1f} s)" if karp else f"n={n} {bare:.1f} s")
    return (
        "The simulators pay only scoring and launch latency; counted the same way (scoring plus its launch calls "
        "one after another, no cold start), gpufill's median time would be " + ", ".join(parts)
        + " (karpenter's includes its 1 s batch window per fleet call)."
    )


def notes(verdicts: list[Verdict], rows: list[Row]) -> list[str]:
    by_target = {v.target: v for v in verdicts}
    found = [n for n in (calls_spent(rows), other_ec2_calls(rows), runinstances_bound(rows), like_for_like_time(rows)) if n]
    missed = [target for target, verdict in by_target.items() if verdict.judged and not verdict.met]
    if any("count ≥ 4" in t for t in missed):
        found.extend(not_fewer_calls(rows))
    if any(t.startswith("fleet $/h") for t in missed):
        found.append(pricier_regions(rows))
    return found
