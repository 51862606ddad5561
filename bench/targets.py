"""The targets for gpufill, judged on the generated set (pooled over seeds): MET or MISSED, and by how much.

The launch-efficiency targets: fewer launch calls than karpenter and than broker in every count bucket, at
fleet $/h within 5 % of the cheapest feasible; at most 1.5× the lower bound on launch
calls; modelled time to fill no more than any baseline's. The first benchmark's: fill ≥ classic's,
fewer calls than classic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import mean, median

from bench.analysis import Row
from bench.generate import COUNTS

CALLS_VS_ORACLE = 1.5  # against the lower bound on launch calls
COST_VS_CHEAPEST = 1.05
BASELINES = ("broker", "karpenter", "classic")
EPSILON = 1e-9


@dataclass
class Verdict:
    target: str
    met: bool
    measured: str
    margin: str
    misses: list[str] = field(default_factory=list)  # the cases that miss it, with their figures
    judged: bool = True  # False when no case in the set can judge this target

    @property
    def word(self) -> str:
        if not self.judged:
            return "N/A"
        return "MET" if self.met else "MISSED"


def _unjudged(target: str) -> Verdict:
    return Verdict(target, True, "—", "no case in this set can judge it", judged=False)


def _pairs(rows: list[Row]) -> list[tuple[Row, Row]]:
    """(gpufill row, classic row) per case."""
    by_case: dict[str, dict[str, Row]] = {}
    for r in rows:
        by_case.setdefault(r.case.name, {})[r.outcome.strategy] = r
    return [(s["gpufill"], s["classic"]) for s in by_case.values()]


def fill_not_below_classic(rows: list[Row]) -> Verdict:
    pairs = _pairs(rows)
    short = [(g, c) for g, c in pairs if g.outcome.fill + EPSILON < c.outcome.fill]
    more = sum(1 for g, c in pairs if g.outcome.fill > c.outcome.fill + EPSILON)
    misses = [
        f"{g.case.name}: gpufill {g.outcome.launched}/{g.outcome.requested}, classic {c.outcome.launched}/{c.outcome.requested}"
        for g, c in short
    ]
    if short:
        worst = max((c.outcome.fill - g.outcome.fill) * 100 for g, c in short)
        margin = f"below classic on {len(short)} of {len(pairs)} cases, by up to {worst:.1f} points of fill"
    else:
        margin = f"at or above classic on all {len(pairs)} cases (above on {more})"
    return Verdict("gpufill's fill ratio ≥ classic's on every scenario", not short, f"{len(pairs) - len(short)}/{len(pairs)}", margin, misses)


def fewer_calls_than_classic(rows: list[Row]) -> Verdict:
    pairs = [(g, c) for g, c in _pairs(rows) if g.case.count >= 4]
    if not pairs:
        return _unjudged("fewer RunInstances than classic on every scenario with count ≥ 4")
    not_fewer = [(g, c) for g, c in pairs if g.outcome.launch_calls >= c.outcome.launch_calls]
    equal = sum(1 for g, c in not_fewer if g.outcome.launch_calls == c.outcome.launch_calls)
    misses = [
        f"{g.case.name}: gpufill {g.outcome.launch_calls}, classic {c.outcome.launch_calls} RunInstances"
        for g, c in not_fewer
    ]
    fewer = len(pairs) - len(not_fewer)
    if not_fewer:
        worst = max(g.outcome.launch_calls - c.outcome.launch_calls for g, c in not_fewer)
        margin = (
            f"fewer on {fewer} of {len(pairs)} cases; equal on {equal}, more on {len(not_fewer) - equal}"
            + (f" (by up to {worst} calls)" if worst > 0 else "")
        )
    else:
        margin = f"fewer on all {len(pairs)} cases with count ≥ 4"
    return Verdict("fewer RunInstances than classic on every scenario with count ≥ 4", not not_fewer, f"{fewer}/{len(pairs)}", margin, misses)


def near_oracle_calls(rows: list[Row]) -> Verdict:
    mine = [r for r in rows if r.outcome.strategy == "gpufill" and r.calls_vs_oracle is not None]
    if not mine:
        return _unjudged(f"launch calls ≤ {CALLS_VS_ORACLE}× the lower bound at the median")
    value = median(r.calls_vs_oracle for r in mine)
    over = value / CALLS_VS_ORACLE - 1
    margin = f"{value:.2f}× against {CALLS_VS_ORACLE}×: " + (
        f"over by {over:.0%}" if over > EPSILON else f"under by {-over:.0%}"
    ) + " (per count bucket: " + ", ".join(near_lower_bound_by_bucket(rows)) + ")"
    misses = [
        f"{r.case.name}: {r.outcome.launch_calls} vs bound {r.oracle.launch_calls} ({r.calls_vs_oracle:.2f}×)"
        for r in sorted(mine, key=lambda r: -r.calls_vs_oracle)
        if r.calls_vs_oracle > CALLS_VS_ORACLE
    ]
    return Verdict(f"launch calls ≤ {CALLS_VS_ORACLE}× the lower bound at the median", value <= CALLS_VS_ORACLE + EPSILON, f"{value:.2f}×", margin, misses)


def near_cheapest_fleet(rows: list[Row]) -> Verdict:
    mine = [r for r in rows if r.outcome.strategy == "gpufill" and r.cost_vs_cheapest is not None]
    if not mine:
        return _unjudged(f"fleet $/h within {COST_VS_CHEAPEST - 1:.0%} of the cheapest feasible fleet at the median")
    value = median(r.cost_vs_cheapest for r in mine)
    limit = COST_VS_CHEAPEST - 1
    margin = f"+{value - 1:.1%} against +{limit:.0%}: " + (
        f"over by {value - COST_VS_CHEAPEST:.1%} points" if value > COST_VS_CHEAPEST + EPSILON else f"within, {COST_VS_CHEAPEST - value:.1%} points to spare"
    )
    misses = [
        f"{r.case.name}: ${r.outcome.hourly_cost:.4f}/h vs cheapest ${r.cheapest:.4f}/h (+{r.cost_vs_cheapest - 1:.1%})"
        for r in sorted(mine, key=lambda r: -r.cost_vs_cheapest)
        if r.cost_vs_cheapest > COST_VS_CHEAPEST + EPSILON
    ]
    return Verdict(
        f"fleet $/h within {limit:.0%} of the cheapest feasible fleet at the median",
        value <= COST_VS_CHEAPEST + EPSILON,
        f"+{value - 1:.1%}",
        margin,
        misses,
    )


def _by_bucket(rows: list[Row], strategy: str) -> dict[int, list[Row]]:
    return {n: [r for r in rows if r.outcome.strategy == strategy and r.case.count == n] for n in COUNTS}


def fewer_calls_than_baselines(rows: list[Row]) -> Verdict:
    """In every count bucket: gpufill's mean launch calls per case below karpenter's and broker's,
    and its median fleet $/h within 5 % of the cheapest feasible."""
    target = f"fewer launch calls than karpenter and than broker in every count bucket, fleet $/h ≤ {COST_VS_CHEAPEST:.2f}× cheapest"
    mine = _by_bucket(rows, "gpufill")
    if not any(mine.values()):
        return _unjudged(target)
    parts, misses, ok = [], [], 0
    for n, gpu in mine.items():
        if not gpu:
            continue
        calls = {s: mean(r.outcome.launch_calls for r in rs) for s, rs in
                 (("gpufill", gpu), ("karpenter", _by_bucket(rows, "karpenter")[n]), ("broker", _by_bucket(rows, "broker")[n])) if rs}
        costs = [r.cost_vs_cheapest for r in gpu if r.cost_vs_cheapest is not None]
        cost = median(costs) if costs else None
        good = all(calls["gpufill"] < calls[s] for s in calls if s != "gpufill") and (cost is None or cost <= COST_VS_CHEAPEST + EPSILON)
        ok += good
        text = (f"n={n}: gpufill {calls['gpufill']:.1f}, karpenter {calls.get('karpenter', float('nan')):.1f}, "
                f"broker {calls.get('broker', float('nan')):.1f} calls per case, fleet ×{cost:.3f}" if cost else f"n={n}: no fleet")
        parts.append(text)
        if not good:
            misses.append(text)
    judged = sum(1 for v in mine.values() if v)
    return Verdict(target, ok == judged, f"{ok}/{judged} buckets", "; ".join(parts), misses)


def near_lower_bound_by_bucket(rows: list[Row]) -> list[str]:
    out = []
    for n, gpu in _by_bucket(rows, "gpufill").items():
        ratios = [r.calls_vs_oracle for r in gpu if r.calls_vs_oracle is not None]
        if ratios:
            out.append(f"n={n}: {median(ratios):.2f}×")
    return out


def fastest(rows: list[Row]) -> Verdict:
    """In every count bucket: gpufill's median modelled time to fill ≤ each baseline's."""
    target = "modelled time to fill ≤ every baseline's (median, every count bucket)"
    mine = _by_bucket(rows, "gpufill")
    if not any(mine.values()):
        return _unjudged(target)
    parts, misses, ok, judged = [], [], 0, 0
    for n, gpu in mine.items():
        if not gpu:
            continue
        judged += 1
        times = {"gpufill": median(r.outcome.modelled_seconds for r in gpu)}
        for s in BASELINES:
            theirs = _by_bucket(rows, s)[n]
            if theirs:
                times[s] = median(r.outcome.modelled_seconds for r in theirs)
        slower = [s for s in times if s != "gpufill" and times["gpufill"] > times[s] + EPSILON]
        ok += not slower
        text = f"n={n}: " + ", ".join(f"{s} {t:.1f} s" for s, t in times.items())
        parts.append(text)
        if slower:
            misses.append(text + f" (slower than {', '.join(slower)})")
    return Verdict(target, ok == judged, f"{ok}/{judged} buckets", "; ".join(parts), misses)


def judge(rows: list[Row]) -> list[Verdict]:
    return [
        f(rows)
        for f in (fewer_calls_than_baselines, near_oracle_calls, fastest, near_cheapest_fleet, fill_not_below_classic,
                  fewer_calls_than_classic)
    ]
