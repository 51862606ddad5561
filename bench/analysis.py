"""Per-case rows and per-strategy aggregates: the figures the table, the report and the plot share."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean, median

from bench import oracle
from bench.cases import Case
from bench.outcome import STRATEGIES, Outcome


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base; undefined when the base is 0 (e.g. the oracle makes no call on a sold-out market)."""
    if value is None or base is None or base == 0:
        return None
    return value / base


@dataclass
class Row:
    case: Case
    outcome: Outcome
    cheapest: float | None  # $/h of the cheapest fleet with as many instances as this strategy launched
    oracle: Outcome
    classic: Outcome
    floor: int = 0  # launch calls any strategy without hidden knowledge must make (oracle.realistic_floor)

    @property
    def calls_vs_oracle(self) -> float | None:
        return ratio(self.outcome.launch_calls, self.oracle.launch_calls)

    @property
    def calls_vs_classic(self) -> float | None:
        return ratio(self.outcome.launch_calls, self.classic.launch_calls)

    @property
    def calls_vs_floor(self) -> float | None:
        return ratio(self.outcome.launch_calls, self.floor)

    @property
    def time_vs_oracle(self) -> float | None:
        return ratio(self.outcome.modelled_seconds, self.oracle.modelled_seconds)

    @property
    def time_vs_classic(self) -> float | None:
        return ratio(self.outcome.modelled_seconds, self.classic.modelled_seconds)

    @property
    def cost_vs_cheapest(self) -> float | None:
        return ratio(self.outcome.hourly_cost, self.cheapest) if self.outcome.launched else None


def rows(cases: list[Case], outcomes: dict[tuple[str, str], Outcome]) -> list[Row]:
    found = []
    for case in cases:
        bound = outcomes[(case.name, "oracle")]
        floor = oracle.realistic_floor(case, bound)
        for strategy in STRATEGIES:
            outcome = outcomes[(case.name, strategy)]
            cheapest = oracle.cheapest_cost(case, outcome.launched) if outcome.launched else None
            found.append(Row(case, outcome, cheapest, bound, outcomes[(case.name, "classic")], floor))
    return found


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return median(values) if values else None


def _total(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def aggregate(all_rows: list[Row]) -> dict[str, dict]:
    """strategy -> the aggregate figures of its rows."""
    summary = {}
    for strategy in STRATEGIES:
        mine = [r for r in all_rows if r.outcome.strategy == strategy]
        outs = [r.outcome for r in mine]
        summary[strategy] = {
            "cases": len(mine),
            "mean_fill": mean(o.fill for o in outs) if outs else None,
            "min_fill": min((o.fill for o in outs), default=None),
            "launch_calls": _total(o.launch_calls for o in outs),
            "hourly_cost": _total(o.hourly_cost for o in outs),
            "cheapest": _total(r.cheapest for r in mine),
            "calls_vs_oracle": _median(r.calls_vs_oracle for r in mine),
            "calls_vs_classic": _median(r.calls_vs_classic for r in mine),
            "ec2_calls": _total(o.ec2_calls for o in outs),
            "transitions": _total(o.transitions for o in outs),
            "lambda_invocations": _total(o.lambda_invocations for o in outs),
            "orchestration_usd": _total(o.orchestration_usd for o in outs),
            "cost_vs_cheapest": _median(r.cost_vs_cheapest for r in mine),
            "modelled_seconds": _median(o.modelled_seconds for o in outs),
            "time_vs_oracle": _median(r.time_vs_oracle for r in mine),
            "time_vs_classic": _median(r.time_vs_classic for r in mine),
        }
    return summary
