"""The bench's tables, as rows of strings: one builder, printed as text or as markdown."""

from __future__ import annotations

from collections.abc import Callable
from statistics import median

from bench.analysis import Row
from bench.cases import TIERS
from bench.outcome import SIMULATED, STRATEGIES

DASH = "—"


def _ratio(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f}×"


def _int(value: float | None) -> str:
    return DASH if value is None else f"{value:.0f}"


def _usd(value: float | None, places: int = 4) -> str:
    return DASH if value is None else f"{value:.{places}f}"


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{value:.0%}"


def _seconds(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f}"


# (header, cell) for the per-case table: every metric of the first benchmark, with ratios to oracle and classic.
CASE_COLUMNS: list[tuple[str, Callable[[Row], str]]] = [
    ("scenario", lambda r: r.case.name),
    ("count", lambda r: str(r.case.count)),
    ("tier", lambda r: r.case.tier),
    ("strategy", lambda r: r.outcome.strategy + (" (sim)" if r.outcome.simulated else "")),
    ("fill", lambda r: _pct(r.outcome.fill)),
    ("launch calls", lambda r: str(r.outcome.launch_calls)),
    ("×oracle", lambda r: _ratio(r.calls_vs_oracle)),
    ("×classic", lambda r: _ratio(r.calls_vs_classic)),
    ("EC2 calls", lambda r: str(r.outcome.ec2_calls)),
    ("transitions", lambda r: _int(r.outcome.transitions)),
    ("Lambda", lambda r: _int(r.outcome.lambda_invocations)),
    ("orch. $", lambda r: _usd(r.outcome.orchestration_usd, 5)),
    ("fleet $/h", lambda r: _usd(r.outcome.hourly_cost)),
    ("×cheapest", lambda r: _ratio(r.cost_vs_cheapest)),
    ("time s", lambda r: _seconds(r.outcome.modelled_seconds)),
    ("time ×oracle", lambda r: _ratio(r.time_vs_oracle)),
    ("time ×classic", lambda r: _ratio(r.time_vs_classic)),
]

SUMMARY_COLUMNS: list[tuple[str, Callable[[str, dict], str]]] = [
    ("strategy", lambda s, a: s),
    ("runs on", lambda s, a: "simulator" if s in SIMULATED else "state machine"),
    ("mean fill", lambda s, a: _pct(a["mean_fill"])),
    ("min fill", lambda s, a: _pct(a["min_fill"])),
    ("launch calls", lambda s, a: _int(a["launch_calls"])),
    ("×oracle (median)", lambda s, a: _ratio(a["calls_vs_oracle"])),
    ("×classic (median)", lambda s, a: _ratio(a["calls_vs_classic"])),
    ("EC2 calls", lambda s, a: _int(a["ec2_calls"])),
    ("transitions", lambda s, a: _int(a["transitions"])),
    ("Lambda", lambda s, a: _int(a["lambda_invocations"])),
    ("orch. $", lambda s, a: _usd(a["orchestration_usd"])),
    ("fleet $/h (sum)", lambda s, a: _usd(a["hourly_cost"], 2)),
    ("Σ$/h ÷ Σcheapest", lambda s, a: DASH if not a["cheapest"] else f"{a['hourly_cost'] / a['cheapest']:.3f}×"),
    ("fleet ×cheapest (median)", lambda s, a: _ratio(a["cost_vs_cheapest"])),
    ("time s (median)", lambda s, a: _seconds(a["modelled_seconds"])),
    ("time ×oracle (median)", lambda s, a: _ratio(a["time_vs_oracle"])),
    ("time ×classic (median)", lambda s, a: _ratio(a["time_vs_classic"])),
]


def case_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    return [h for h, _ in CASE_COLUMNS], [[cell(r) for _, cell in CASE_COLUMNS] for r in rows]


def summary_table(summary: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    return [h for h, _ in SUMMARY_COLUMNS], [[cell(s, summary[s]) for _, cell in SUMMARY_COLUMNS] for s in STRATEGIES]


def calls_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """One line per case: each strategy's launch calls (and fill when short), gpufill's ratios."""
    header = ["scenario", "count", "tier", *STRATEGIES, "gpufill ×oracle", "gpufill ×classic"]
    body = []
    for name in dict.fromkeys(r.case.name for r in rows):
        mine = {r.outcome.strategy: r for r in rows if r.case.name == name}
        any_row = mine["gpufill"]

        def cell(r: Row) -> str:
            return str(r.outcome.launch_calls) + ("" if r.outcome.fill == 1 else f" ({r.outcome.fill:.0%})")

        body.append(
            [name, str(any_row.case.count), any_row.case.tier, *(cell(mine[s]) for s in STRATEGIES),
             _ratio(any_row.calls_vs_oracle), _ratio(any_row.calls_vs_classic)]
        )
    return header, body


def tier_series(rows: list[Row], field: Callable[[Row], float]) -> dict[str, list[float | None]]:
    """strategy -> the mean of `field` per scarcity tier (None where a tier has no case)."""
    series = {}
    for strategy in STRATEGIES:
        values = []
        for tier in TIERS:
            mine = [field(r) for r in rows if r.outcome.strategy == strategy and r.case.tier == tier]
            values.append(sum(mine) / len(mine) if mine else None)
        series[strategy] = values
    return series


def tier_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    calls = tier_series(rows, lambda r: r.outcome.launch_calls)
    seconds = tier_series(rows, lambda r: r.outcome.modelled_seconds)
    header = ["tier", "cases", "sold-out share", *(f"{s} calls" for s in STRATEGIES), *(f"{s} time s" for s in STRATEGIES)]
    body = []
    for i, tier in enumerate(TIERS):
        mine = [r for r in rows if r.case.tier == tier and r.outcome.strategy == "oracle"]
        if not mine:
            continue
        share = median(r.case.sold_out_share for r in mine)
        body.append(
            [tier, str(len(mine)), _pct(share), *(f"{calls[s][i]:.1f}" for s in STRATEGIES),
             *(f"{seconds[s][i]:.1f}" for s in STRATEGIES)]
        )
    return header, body


def as_text(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in body]
    return "\n".join(lines)


def as_markdown(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)
