"""The dynamic bench's goals, each judged on one set of markets with a paired exact sign test
beside it, and where each strategy's EC2 calls go, by action.

The goals, gpufill against the baseline each names:

- **filled**: every market filled within its 12 hours;
- **time to N**: the total over the markets at most Karpenter-style's (an unfilled market counts
  12 hours);
- **dollars**: on the markets every strategy fills, the total at most SkyPilot-style's;
- **EC2 calls**: the total at most CALLS_FACTOR times Karpenter-style's.

The default request keeps what it launches while it waits. The same dollars and time goals are
judged again for gpufill run with `all_or_nothing` beside `wait_for_capacity` (it holds nothing
while it waits), when those outcomes are given: each row names the request setting it judges.

The sign test counts the markets that went each way (for the calls, against CALLS_FACTOR times
Karpenter-style's calls on that market); ties are dropped (bench.stats.paired).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from bench.dynamic.generate import HORIZON_SECONDS
from bench.dynamic.measure import Outcome
from bench.dynamic.report import STRATEGIES, all_filled, by_strategy
from bench.stats import Paired, paired

CALLS_FACTOR = 1.5
TIME_PEER, DOLLARS_PEER, CALLS_PEER = "karpenter", "skypilot", "karpenter"


@dataclass(frozen=True)
class Goal:
    goal: str
    met: bool
    figure: str  # the totals and their ratio
    test: str  # how many markets went each way, and the sign test's p

    @property
    def word(self) -> str:
        return "MET" if self.met else "MISSED"

    def cell(self) -> str:
        return f"**{self.word}**: {self.figure}; {self.test}"


def _hours(o: Outcome) -> float:
    return (HORIZON_SECONDS if o.time_to_n is None else o.time_to_n) / 3600


def _pairs(outcomes: list[Outcome], peer: str, value, cases: set[str] | None = None, factor: float = 1.0) -> Paired | None:
    index = {(o.case, o.strategy): o for o in outcomes}
    chosen = sorted({o.case for o in outcomes} if cases is None else cases)
    return paired(
        [(value(index[(c, "gpufill")]), factor * value(index[(c, peer)])) for c in chosen
         if (c, "gpufill") in index and (c, peer) in index],
        tolerance=1e-6,
    )


def _test(p: Paired | None, lower: str, higher: str) -> str:
    if p is None:
        return "no market to compare"
    return f"{lower} on {p.lower}, {higher} on {p.higher}, equal on {p.equal} (sign test p = {p.p_value:.2g})"


AON = "`all_or_nothing` + `wait_for_capacity`"


def judge(outcomes: list[Outcome], aon: list[Outcome] | None = None) -> list[Goal]:
    """The goals of the default request, then (with `aon`, gpufill's outcomes with all_or_nothing
    on the same markets) its dollars and time to N."""
    goals = _judge(outcomes)
    if aon is not None:
        goals += _judge_all_or_nothing(outcomes, aon)
    return goals


def _judge_all_or_nothing(outcomes: list[Outcome], aon: list[Outcome]) -> list[Goal]:
    swapped = [o for o in outcomes if o.strategy != "gpufill"] + [replace(o, strategy="gpufill") for o in aon]
    filled = {o.case for o in aon if o.filled}
    common = all_filled(outcomes) & filled
    money = _pairs(swapped, DOLLARS_PEER, lambda o: o.dollars, common)
    time = _pairs(swapped, TIME_PEER, _hours)
    return [
        Goal(
            f"{AON}: $ on the markets every strategy fills ≤ {DOLLARS_PEER}-style's",
            money is not None and money.mine_total <= money.theirs_total + 1e-6,
            f"{_ratio(money, '${:,.2f}')} on {len(common)} markets ({len(filled)}/{len(aon)} filled)",
            _test(money, "cheaper", "dearer"),
        ),
        Goal(
            f"{AON}: total time to N ≤ {TIME_PEER}-style's",
            time is not None and time.mine_total <= time.theirs_total,
            _ratio(time, "{:.1f} h"), _test(time, "faster", "slower"),
        ),
    ]


def _judge(outcomes: list[Outcome]) -> list[Goal]:
    mine = by_strategy(outcomes)["gpufill"]
    filled = sum(o.filled for o in mine)
    goals = [Goal(
        "filled: every market", filled == len(mine) and bool(mine), f"{filled}/{len(mine)}",
        f"{sum(o.filled for o in by_strategy(outcomes)[TIME_PEER])}/{len(mine)} for {TIME_PEER}-style",
    )]
    time = _pairs(outcomes, TIME_PEER, _hours)
    goals.append(Goal(
        f"total time to N ≤ {TIME_PEER}-style's",
        time is not None and time.mine_total <= time.theirs_total,
        _ratio(time, "{:.1f} h"), _test(time, "faster", "slower"),
    ))
    common = all_filled(outcomes)
    money = _pairs(outcomes, DOLLARS_PEER, lambda o: o.dollars, common)
    goals.append(Goal(
        f"$ on the markets every strategy fills ≤ {DOLLARS_PEER}-style's",
        money is not None and money.mine_total <= money.theirs_total + 1e-6,
        f"{_ratio(money, '${:,.2f}')} on {len(common)} markets", _test(money, "cheaper", "dearer"),
    ))
    calls = _pairs(outcomes, CALLS_PEER, lambda o: o.ec2_calls, factor=CALLS_FACTOR)
    goals.append(Goal(
        f"total EC2 calls ≤ {CALLS_FACTOR:g}× {CALLS_PEER}-style's",
        calls is not None and calls.mine_total <= calls.theirs_total,
        _calls(calls), _test(calls, f"under {CALLS_FACTOR:g}× theirs", "over"),
    ))
    return goals


def _ratio(p: Paired | None, fmt: str) -> str:
    if p is None or not p.theirs_total:
        return "—"
    return f"{fmt.format(p.mine_total)} against {fmt.format(p.theirs_total)} ({p.mine_total / p.theirs_total:.3f}×)"


def _calls(p: Paired | None) -> str:
    if p is None or not p.theirs_total:
        return "—"
    theirs = p.theirs_total / CALLS_FACTOR
    return f"{p.mine_total:,.0f} against {theirs:,.0f} ({p.mine_total / theirs:.2f}×)"


def table(sets: list[tuple]) -> tuple[list[str], list[list[str]]]:
    """A row per goal, a column per set of markets: (name, outcomes) or (name, outcomes,
    gpufill's outcomes with all_or_nothing)."""
    judged = [(name, judge(outcomes, *rest)) for name, outcomes, *rest in sets]
    header = ["goal", *(name for name, _ in judged)]
    longest = max((goals for _, goals in judged), key=len)
    rows = [[longest[n].goal, *(goals[n].cell() if n < len(goals) else "" for _, goals in judged)] for n in range(len(longest))]
    return header, rows


def calls_by_action(outcomes: list[Outcome]) -> tuple[list[str], list[list[str]]]:
    """Every EC2 action any strategy called: its total per strategy, most called first (gpufill's
    order), with each strategy's share of its own total; and the total per market."""
    grouped = by_strategy(outcomes)
    totals = {s: Counter() for s in STRATEGIES}
    for s, mine in grouped.items():
        for o in mine:
            totals[s].update(o.by_api)
    actions = sorted({a for c in totals.values() for a in c}, key=lambda a: (-totals["gpufill"][a], -sum(c[a] for c in totals.values()), a))
    header = ["EC2 action", *STRATEGIES]
    rows = []
    for action in actions:
        cells = []
        for s in STRATEGIES:
            n, whole = totals[s][action], sum(totals[s].values())
            cells.append(f"{n:,} ({n / whole:.0%})" if n else "—")
        rows.append([action, *cells])
    rows.append(["**Σ**", *(f"{sum(totals[s].values()):,}" for s in STRATEGIES)])
    rows.append(["Σ per market", *(f"{sum(totals[s].values()) / max(1, len(grouped[s])):,.0f}" for s in STRATEGIES)])
    return header, rows
