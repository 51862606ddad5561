"""Figures over many seeds: per strategy and request-size bucket, the median and the spread.

A seed is one set of generated markets; a row belongs to one seed. Pooled figures put
every case of every seed together; per-seed figures show how much a headline moves
from one set of markets to the next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from statistics import median, quantiles

from bench import stats
from bench.analysis import Row
from bench.generate import COUNTS
from bench.outcome import STRATEGIES, launch_label


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
              "gpufill fleet ×cheapest (median)", "gpufill Σ$/h ÷ Σcheapest", "gpufill time s"]
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
        mine = [r for r in rows if r.outcome.strategy == "gpufill" and r.cheapest]
        summed = sum(r.outcome.hourly_cost for r in mine) / sum(r.cheapest for r in mine) if mine else None
        body.append([str(seed), *calls, *ratios, "—" if cost is None else f"{cost.median:.3f}",
                     "—" if summed is None else f"{summed:.3f}", "—" if time is None else f"{time.median:.1f}"])
    return header, body


# --- sums, bounds and paired comparisons --------------------------------------------------------

BASELINES = ("karpenter", "broker", "classic")


def _bucket(rows: list[Row], count: int | None) -> list[Row]:
    return [r for r in rows if count is None or r.case.count == count]


def by_case(rows: list[Row]) -> dict[str, dict[str, Row]]:
    found: dict[str, dict[str, Row]] = {}
    for r in rows:
        found.setdefault(r.case.name, {})[r.outcome.strategy] = r
    return found


# (name, what a row gives, format of the sums)
PAIRED_FIGURES: list[tuple[str, Callable[[Row], float | None], str]] = [
    ("launch calls", lambda r: r.outcome.launch_calls, "{:.0f}"),
    ("fleet $/h", lambda r: r.outcome.hourly_cost, "{:.2f}"),
    ("time s", lambda r: r.outcome.modelled_seconds, "{:.1f}"),
]


def paired_against(rows: list[Row], baseline: str, figure: Callable[[Row], float | None],
                   count: int | None = None) -> stats.Paired | None:
    """gpufill against `baseline`, case by case; $/h compares only cases where both launched as many."""
    pairs = []
    for runs in by_case(_bucket(rows, count)).values():
        mine, theirs = runs.get("gpufill"), runs.get(baseline)
        if mine is None or theirs is None or mine.outcome.launched != theirs.outcome.launched:
            continue
        a, b = figure(mine), figure(theirs)
        if a is not None and b is not None:
            pairs.append((a, b))
    return stats.paired(pairs)


def totals_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Per count bucket and strategy: the sums beside the medians; gpufill's time to fill is its warm
    run's when the set has them, with the first run after deploy beside it."""
    header = ["count", "strategy", "cases", "launch calls Σ", "per case: mean / median", "fleet $/h Σ",
              "Σ$/h ÷ Σcheapest", "×cheapest median", "time s: mean / median"]
    body = []
    for count in (*COUNTS, None):
        for strategy in STRATEGIES:
            mine = [r for r in _bucket(rows, count) if r.outcome.strategy == strategy]
            if not mine:
                continue
            calls = [r.outcome.launch_calls for r in mine]
            cost = sum(r.outcome.hourly_cost for r in mine)
            cheapest = sum(r.cheapest or 0.0 for r in mine)
            ratio = of(mine, strategy, lambda r: r.cost_vs_cheapest)
            times = [r.outcome.modelled_seconds for r in mine]
            warm = [r.outcome.warm.modelled_seconds for r in mine if r.outcome.warm is not None]
            label = "bound" if strategy == "oracle" else launch_label(r.outcome for r in mine)
            time_cell = f"{sum(times) / len(times):.1f} / {median(times):.1f}"
            if warm:
                # The default deployment keeps its facts warm: the warm run is the headline, the
                # first run after deploy beside it.
                time_cell = f"{sum(warm) / len(warm):.1f} / {median(warm):.1f} warm (first run {time_cell})"
            body.append([
                "all" if count is None else str(count), strategy, str(len(mine)), f"{sum(calls)} ({label})",
                f"{sum(calls) / len(calls):.2f} / {median(calls):.1f}", f"{cost:.2f}",
                f"{cost / cheapest:.3f}" if cheapest else "—", "—" if ratio is None else f"{ratio.median:.3f}",
                time_cell,
            ])
    return header, body


def floor_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Per count bucket: the lower bound and the realistic floor on launch calls, and each strategy against both."""
    others = [s for s in STRATEGIES if s != "oracle"]
    header = ["count", "markets", "cannot fill", "lower bound Σ", "realistic floor Σ",
              *(f"{s} Σ (÷ floor)" for s in others)]
    body = []
    for count in (*COUNTS, None):
        cases = by_case(_bucket(rows, count))
        if not cases:
            continue
        oracle_rows = [runs["oracle"] for runs in cases.values()]
        bound = sum(r.outcome.launch_calls for r in oracle_rows)
        floor = sum(r.floor for r in oracle_rows)
        short = sum(1 for r in oracle_rows if r.outcome.launched < r.case.count)
        cells = []
        for s in others:
            total = sum(runs[s].outcome.launch_calls for runs in cases.values() if s in runs)
            cells.append(f"{total} ({total / floor:.2f}×)" if floor else str(total))
        body.append(["all" if count is None else str(count), str(len(cases)), str(short), str(bound), str(floor), *cells])
    return header, body


def paired_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Per count bucket, baseline and figure: gpufill's sum against the baseline's, the mean paired
    difference, the cases each way, and the two-sided sign test."""
    header = ["count", "against", "figure", "gpufill Σ", "baseline Σ", "gpufill ÷ baseline",
              "mean difference per case", "gpufill lower / higher / equal", "sign test p"]
    body = []
    for count in (*COUNTS, None):
        for baseline in BASELINES:
            for name, figure, fmt in PAIRED_FIGURES:
                p = paired_against(rows, baseline, figure, count)
                if p is None:
                    continue
                body.append([
                    "all" if count is None else str(count), baseline, name, fmt.format(p.mine_total),
                    fmt.format(p.theirs_total), "—" if p.ratio is None else f"{p.ratio:.3f}",
                    f"{p.mean_difference:+.3f}", f"{p.lower} / {p.higher} / {p.equal}", f"{p.p_value:.2g}",
                ])
    return header, body


def warm_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """gpufill's first run after deploy (cold facts, the headline's) beside the same request again in
    that deployment (warm facts), with karpenter's time; per count bucket and pooled: time to fill
    mean / median, how many warm runs skipped scoring and PrepareRegion, and whether the warm runs
    launched as many, with as many launch calls, for as much an hour."""
    header = ["count", "markets", "gpufill cold s: mean / median", "gpufill warm s: mean / median",
              "karpenter s: mean / median", "warm ÷ karpenter (means)", "warm runs: unscored / unprepared",
              "launch calls Σ cold / warm", "fleet $/h Σ cold / warm"]
    body = []
    karpenter = {r.case.name: r.outcome.modelled_seconds for r in rows if r.outcome.strategy == "karpenter"}
    for count in (*COUNTS, None):
        mine = [r for r in _bucket(rows, count) if r.outcome.strategy == "gpufill" and r.outcome.warm is not None]
        if not mine:
            continue
        cold = [r.outcome.modelled_seconds for r in mine]
        warm = [r.outcome.warm.modelled_seconds for r in mine]
        karp = [karpenter[r.case.name] for r in mine if r.case.name in karpenter]
        def both(values: list[float]) -> str:
            return f"{sum(values) / len(values):.1f} / {median(values):.1f}" if values else "—"
        ratio = f"{(sum(warm) / len(warm)) / (sum(karp) / len(karp)):.2f}×" if karp and sum(karp) else "—"
        body.append([
            "all" if count is None else str(count), str(len(mine)), both(cold), both(warm), both(karp), ratio,
            f"{sum(not r.outcome.warm.scored for r in mine)} / {sum(not r.outcome.warm.prepared for r in mine)}",
            f"{sum(r.outcome.launch_calls for r in mine)} / {sum(r.outcome.warm.launch_calls for r in mine)}",
            f"{sum(r.outcome.hourly_cost for r in mine):.2f} / {sum(r.outcome.warm.hourly_cost for r in mine):.2f}",
        ])
    return header, body
