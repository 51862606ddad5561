"""The dynamic bench's tables and targets, from the outcomes of every strategy on every market."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median

from bench.dynamic.generate import COUNTS, HORIZON_SECONDS
from bench.dynamic.measure import Outcome
from bench.stats import paired

STRATEGIES = ("skypilot", "karpenter", "broker", "classic", "gpufill")
PEER = "skypilot"
TIME_TARGET = 0.8  # gpufill's median time to N at most this share of the peer's


def _time(o: Outcome) -> float:
    """Time to N for ordering: a request never filled ranks after every filled one."""
    return math.inf if o.time_to_n is None else o.time_to_n


def quantile(values: list[float], q: float) -> float:
    """The q-quantile by the nearest rank, so an unfilled request (inf) can be a quantile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def median_time(outcomes: list[Outcome]) -> float:
    return median(_time(o) for o in outcomes)


def duration(seconds: float) -> str:
    if math.isinf(seconds):
        return "> 12 h (not filled)"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def by_strategy(outcomes: list[Outcome]) -> dict[str, list[Outcome]]:
    grouped = {s: [] for s in STRATEGIES}
    for o in outcomes:
        grouped[o.strategy].append(o)
    return grouped


def all_filled(outcomes: list[Outcome]) -> set[str]:
    """The cases every strategy filled: dollars compare there, fleet for fleet."""
    cases = {o.case for o in outcomes}
    return {c for c in cases if all(o.filled for o in outcomes if o.case == c)}


def headline(outcomes: list[Outcome]) -> tuple[list[str], list[list[str]]]:
    grouped, common = by_strategy(outcomes), all_filled(outcomes)
    header = ["strategy", "filled", "median time to N", "p75", "p90", "Σ $ (all)", f"Σ $ ({len(common)} all filled)",
              "of it idle", "+ $ lost to reclaims", "+ $ a month of reclaims", "wasted inst-h", "EC2 calls Σ", "launch calls Σ", "reclaimed"]
    rows = []
    for s, mine in grouped.items():
        times = [_time(o) for o in mine]
        both = [o for o in mine if o.case in common]
        rows.append([
            s,
            f"{sum(o.filled for o in mine)}/{len(mine)}",
            duration(median(times)),
            duration(quantile(times, 0.75)),
            duration(quantile(times, 0.9)),
            f"{sum(o.dollars for o in mine):.2f}",
            f"{sum(o.dollars for o in both):.2f}",
            f"{sum(o.idle_dollars for o in both):.2f}",
            f"{sum(o.reclaim_dollars for o in both):.2f}",
            f"{sum(o.month_reclaim_dollars for o in both):.2f}",
            f"{sum(o.wasted_hours for o in mine):.1f}",
            str(sum(o.ec2_calls for o in mine)),
            str(sum(o.launch_calls for o in mine)),
            str(sum(o.interrupted for o in mine)),
        ])
    return header, rows


def bucket_table(outcomes: list[Outcome]) -> tuple[list[str], list[list[str]]]:
    """Median time to N per request size: the sizes are where strategies part."""
    grouped = by_strategy(outcomes)
    header = ["strategy"] + [f"n={c}: median time to N (filled)" for c in COUNTS]
    rows = []
    for s, mine in grouped.items():
        cells = []
        for c in COUNTS:
            here = [o for o in mine if o.requested == c]
            cells.append(f"{duration(median_time(here))} ({sum(o.filled for o in here)}/{len(here)})" if here else "—")
        rows.append([s, *cells])
    return header, rows


def paired_table(outcomes: list[Outcome]) -> tuple[list[str], list[list[str]]]:
    """gpufill against each baseline, case by case: time to N (unfilled at 12 h), $, EC2 calls."""
    index = {(o.case, o.strategy): o for o in outcomes}
    cases = sorted({o.case for o in outcomes})
    header = ["gpufill against", "time to N, h: Σ mine vs theirs (faster / slower / equal, p)",
              "$: Σ mine vs theirs (cheaper / dearer / equal, p)",
              "$ with reclaims priced (cheaper / dearer / equal, p)", "EC2 calls (fewer / more / equal, p)"]
    rows = []
    for s in STRATEGIES[:-1]:
        pairs = [(index[(c, "gpufill")], index[(c, s)]) for c in cases if (c, s) in index and (c, "gpufill") in index]
        cells = []
        for value in (
            lambda o: min(_time(o), HORIZON_SECONDS) / 3600,
            lambda o: o.dollars,
            lambda o: o.priced_dollars,
            lambda o: o.ec2_calls,
        ):
            p = paired([(value(a), value(b)) for a, b in pairs], tolerance=1e-6)
            cells.append(
                f"{p.mine_total:.1f} vs {p.theirs_total:.1f} ({p.lower} / {p.higher} / {p.equal}, p = {p.p_value:.2g})"
                if p else "—"
            )
        rows.append([s, *cells])
    return header, rows


@dataclass(frozen=True)
class Verdict:
    word: str  # MET or MISSED
    target: str
    margin: str


def judge(outcomes: list[Outcome]) -> list[Verdict]:
    grouped = by_strategy(outcomes)
    mine, peer = grouped["gpufill"], grouped[PEER]
    verdicts = []
    t_mine, t_peer = median_time(mine), median_time(peer)
    finite = not math.isinf(t_mine) and not math.isinf(t_peer) and t_peer > 0
    ratio = f"{t_mine / t_peer:.2f}×" if finite else "no ratio: a median is unfilled"
    verdicts.append(Verdict(
        "MET" if t_mine <= TIME_TARGET * t_peer else "MISSED",
        f"median time to N ≤ {TIME_TARGET}× {PEER}'s",
        f"{duration(t_mine)} against {duration(t_peer)} ({ratio}); filled {sum(o.filled for o in mine)} "
        f"against {sum(o.filled for o in peer)} of {len(mine)}",
    ))
    common = all_filled(outcomes)
    d_mine = sum(o.dollars for o in mine if o.case in common)
    d_peer = sum(o.dollars for o in peer if o.case in common)
    idle_mine = sum(o.idle_dollars for o in mine if o.case in common)
    idle_peer = sum(o.idle_dollars for o in peer if o.case in common)
    reason = (
        f"on the {len(common)} markets every strategy filled, ${d_mine:.2f} against ${d_peer:.2f}"
        f" ({d_mine / d_peer:.3f}×); of it, instances held before the fleet was complete: ${idle_mine:.2f} against "
        f"${idle_peer:.2f}"
    )
    if d_mine > d_peer:
        reason += (
            f". gpufill keeps what it launches while it waits for the rest, {PEER} holds nothing until one zone "
            f"takes all N at once; without the idle wait gpufill's fleets cost ${d_mine - idle_mine:.2f} against "
            f"${d_peer - idle_peer:.2f}"
        )
    verdicts.append(Verdict("MET" if d_mine <= d_peer else "MISSED", f"no more dollars than {PEER}", reason))
    c_mine, c_peer = sum(o.ec2_calls for o in mine), sum(o.ec2_calls for o in peer)
    l_mine, l_peer = sum(o.launch_calls for o in mine), sum(o.launch_calls for o in peer)
    verdicts.append(Verdict(
        "MET" if c_mine < c_peer else "MISSED",
        f"fewer calls than {PEER}",
        f"{c_mine} EC2 calls against {c_peer} ({c_mine / c_peer:.3f}×); launch calls {l_mine} against {l_peer}",
    ))
    return verdicts
