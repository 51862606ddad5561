"""Figures over many seeds: per strategy and request-size bucket, the median and the spread.

A seed is one set of generated markets; a row belongs to one seed. Pooled figures put
every case of every seed together; per-seed figures show how much a headline moves
from one set of markets to the next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from statistics import median, quantiles

from bench.analysis import Row
from bench.generate import COUNTS
from bench.outcome import STRATEGIES


@dataclass(frozen=True)
class Spread:
    n: int
    median: float
    q1: float
    q3: float
    low: float
    high: float

    def text(self, fmt: str = "{:.2f}") -> str:
        f = fmt.format
        return f"{f(self.median)} (IQR {f(self.q1)}–{f(self.q3)}, range {f(self.low)}–{f(self.high)})"

    def short(self, fmt: str = "{:.2f}") -> str:
        f = fmt.format
        return f"{f(self.median)} [{f(self.q1)}–{f(self.q3)}]"


def spread(values) -> Spread | None:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    if len(values) == 1:
        q1 = q3 = values[0]
    else:
        q1, _, q3 = quantiles(values, n=4, method="inclusive")
    return Spread(len(values), median(values), q1, q3, values[0], values[-1])


# (name, what a row gives, format)
METRICS: list[tuple[str, Callable[[Row], float | None], str]] = [
    ("launch calls", lambda r: r.outcome.launch_calls, "{:.1f}"),
    ("calls ×lower bound", lambda r: r.calls_vs_oracle, "{:.2f}"),
    ("fill", lambda r: r.outcome.fill, "{:.0%}"),
    ("fleet ×cheapest", lambda r: r.cost_vs_cheapest, "{:.3f}"),
    ("time s", lambda r: r.outcome.modelled_seconds, "{:.1f}"),
]


def of(rows: list[Row], strategy: str, metric: Callable[[Row], float | None], count: int | None = None) -> Spread | None:
    return spread(metric(r) for r in rows if r.outcome.strategy == strategy and (count is None or r.case.count == count))


def mean_of(rows: list[Row], strategy: str, metric: Callable[[Row], float | None], count: int | None = None) -> float | None:
    values = [metric(r) for r in rows if r.outcome.strategy == strategy and (count is None or r.case.count == count)]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def bucket_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Per count bucket and strategy: median [IQR] of each metric, and the mean launch calls."""
    header = ["count", "strategy", "cases", "mean launch calls", *(f"{name}: median [IQR]" for name, _, _ in METRICS)]
    body = []
    for count in (*COUNTS, None):
        for strategy in STRATEGIES:
            cells = []
            for _, metric, fmt in METRICS:
                s = of(rows, strategy, metric, count)
                cells.append("—" if s is None else s.short(fmt))
            mean_calls = mean_of(rows, strategy, lambda r: r.outcome.launch_calls, count)
            n = sum(1 for r in rows if r.outcome.strategy == strategy and (count is None or r.case.count == count))
            body.append(["all" if count is None else str(count), strategy, str(n), f"{mean_calls:.1f}", *cells])
    return header, body


def headline_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Pooled over every case and seed: per strategy, median (IQR, range) of the headline metrics."""
    header = ["strategy", "total launch calls", *(name for name, _, _ in METRICS)]
    body = []
    for strategy in STRATEGIES:
        total = sum(r.outcome.launch_calls for r in rows if r.outcome.strategy == strategy)
        cells = []
        for _, metric, fmt in METRICS:
            s = of(rows, strategy, metric)
            cells.append("—" if s is None else s.text(fmt))
        body.append([strategy, str(total), *cells])
    return header, body


def seed_table(per_seed: dict[int, list[Row]]) -> tuple[list[str], list[list[str]]]:
    """One line per seed: each strategy's launch calls (total) and median calls ×lower bound."""
    header = ["seed", *(f"{s} calls" for s in STRATEGIES), *(f"{s} ×bound" for s in STRATEGIES if s != "oracle"),
              "gpufill fleet ×cheapest", "gpufill time s"]
    body = []
    for seed, rows in per_seed.items():
        calls = [str(sum(r.outcome.launch_calls for r in rows if r.outcome.strategy == s)) for s in STRATEGIES]
        ratios = []
        for s in STRATEGIES:
            if s == "oracle":
                continue
            m = of(rows, s, lambda r: r.calls_vs_oracle)
            ratios.append("—" if m is None else f"{m.median:.2f}×")
        cost = of(rows, "gpufill", lambda r: r.cost_vs_cheapest)
        time = of(rows, "gpufill", lambda r: r.outcome.modelled_seconds)
        body.append([str(seed), *calls, *ratios, "—" if cost is None else f"{cost.median:.3f}",
                     "—" if time is None else f"{time.median:.1f}"])
    return header, body
