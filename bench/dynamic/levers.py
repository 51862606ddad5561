"""What the wait's EC2 calls were cut with, and what was tried and not taken: gpufill's replay
on the same markets once per setting of the wait (bench.dynamic.gpufill.Asked), beside
Karpenter-style's totals. A setting is taken when it makes fewer calls than the one before it
while the total time to N stays at most Karpenter-style's and the dollars at most the default's
before it plus 1 %."""

from __future__ import annotations

from dataclasses import dataclass

from bench.dynamic import gpufill
from bench.dynamic.generate import HORIZON_SECONDS
from bench.dynamic.measure import Outcome, outcome

SCORING = ("DescribeInstanceTypeOfferings", "DescribeSpotPriceHistory", "DescribeCapacityReservations")
DOLLARS_SLACK = 0.01


@dataclass(frozen=True)
class Lever:
    name: str
    asked: gpufill.Asked
    step: bool  # one of the steps from the old wait to the default (else a setting tried beside them)


# Every setting runs with one launch template version per run and region (the replay's, as the
# state machine's): the steps below are the wait's settings from the old wait to the default.
OLD_CAP = 120
LEVERS = (
    Lever("every try scores every region and asks every pool (before)",
          gpufill.Asked(facts_ttl=0, skip_full=0, max_delay=OLD_CAP), True),
    Lever("a try reuses its facts and launch parameters for 15 min",
          gpufill.Asked(facts_ttl=900, skip_full=0, max_delay=OLD_CAP), True),
    Lever("and leaves out pools found full < 100 s ago (the wait before this run)",
          gpufill.Asked(facts_ttl=900, skip_full=100, max_delay=OLD_CAP), True),
    Lever("facts reused for 2 h", gpufill.Asked(skip_full=100, max_delay=OLD_CAP), True),
    Lever("and the wait capped at 150 s", gpufill.Asked(skip_full=100), True),
    Lever(f"and pools found full < {gpufill.WAIT_SKIP_FULL_SECONDS} s ago left out (the default)", gpufill.Asked(), True),
    Lever("facts reused for 1 h", gpufill.Asked(facts_ttl=3600), False),
    Lever("pools found full < 180 s ago left out (Karpenter's ICE window)", gpufill.Asked(skip_full=180), False),
    Lever("the wait capped at 5 min", gpufill.Asked(max_delay=300), False),
)


def measure(cases, levers=LEVERS) -> dict[str, list[Outcome]]:
    return {lever.name: [outcome(case, "gpufill", gpufill.run(case, asked=lever.asked)) for case in cases] for lever in levers}


def _hours(outcomes: list[Outcome]) -> float:
    return sum(HORIZON_SECONDS if o.time_to_n is None else o.time_to_n for o in outcomes) / 3600


def table(found: dict[str, list[Outcome]], karpenter: list[Outcome], levers=LEVERS) -> tuple[list[str], list[list[str]]]:
    k_hours, k_calls = _hours(karpenter), sum(o.ec2_calls for o in karpenter)
    header = ["setting of the wait", "filled", "Σ time to N (karpenter-style)", "Σ $", "EC2 calls Σ (× karpenter-style's)",
              "of them scoring", "CreateFleet", "taken?"]
    rows, before = [], None
    for lever in levers:
        mine = found[lever.name]
        hours, dollars, calls = _hours(mine), sum(o.dollars for o in mine), sum(o.ec2_calls for o in mine)
        verdict = verdict_of(lever, (hours, dollars, calls), before, k_hours)
        if lever.step:
            before = (hours, dollars, calls)
        rows.append([
            lever.name, f"{sum(o.filled for o in mine)}/{len(mine)}", f"{hours:.1f} h ({k_hours:.1f} h)", f"{dollars:,.2f}",
            f"{calls:,} ({calls / k_calls:.2f}×)", f"{sum(o.by_api.get(a, 0) for o in mine for a in SCORING):,}",
            f"{sum(o.by_api.get('CreateFleet', 0) for o in mine):,}", verdict,
        ])
    return header, rows


def verdict_of(lever: Lever, figures: tuple[float, float, int], before: tuple[float, float, int] | None, k_hours: float) -> str:
    """Whether a setting was taken, and if not what it cost, against the last step taken."""
    if before is None:
        return "the old wait"
    hours, dollars, calls = figures
    b_hours, b_dollars, b_calls = before
    if calls >= b_calls:
        return "no: no fewer calls"
    if hours > k_hours:
        return f"no: slower than karpenter-style (+{(hours - k_hours) * 60:.0f} min)"
    if dollars > b_dollars * (1 + DOLLARS_SLACK):
        return f"no: dearer (+${dollars - b_dollars:,.2f})"
    return "yes" if lever.step else f"could be: {b_calls - calls:,} fewer calls, {(hours - b_hours) * 60:+.0f} min"
