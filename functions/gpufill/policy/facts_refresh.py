"""The facts refresh: which warm facts a scheduled pass scores or prepares again.

Only facts a run of the deployment used within the window (constants.FACTS_REFRESH_WINDOW_SECONDS)
are refreshed, so a deployment nobody uses stops asking AWS. A used fact is refreshed when it is
missing, lacks what a run needs of it (zone ids for blended scoring, an AZ a run launched in), or
would otherwise reach its TTL before the next pass has surely written it again: refreshed that
way, a fact a run needs is always fresh. Pure: the adapter reads the items, this decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufill.constants import FACTS_REFRESH_MARGIN_SECONDS, FACTS_REFRESH_WINDOW_SECONDS, WARM_CLOCK_SKEW_SECONDS
from gpufill.policy.warm_facts import TTL_SECONDS, FactKind, PreparedRegion, ScoredType


@dataclass(frozen=True)
class Usage:
    """What runs used, each with the last time one did (epoch seconds)."""

    scored: dict[tuple[str, str], float] = field(default_factory=dict)  # (region, type)
    # (region, type) last scored for blended ranking, which needs the AZs' zone ids.
    zone_ids: dict[tuple[str, str], float] = field(default_factory=dict)
    launched: dict[str, float] = field(default_factory=dict)  # region
    zones: dict[str, tuple[str, ...]] = field(default_factory=dict)  # region -> every AZ a run launched in


@dataclass(frozen=True)
class Refresh:
    """Per region: the types to score again and whether to look up zone ids; the AZs to prepare."""

    scoring: dict[str, tuple[tuple[str, ...], bool]] = field(default_factory=dict)
    launch: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.scoring or self.launch)


def recent(used_at: float | None, now: float, window: float = FACTS_REFRESH_WINDOW_SECONDS) -> bool:
    """Used within the window (a stamp from the future is trusted only within the clock skew)."""
    return used_at is not None and now - window <= used_at <= now + WARM_CLOCK_SKEW_SECONDS


def due(kind: FactKind, written_at: float | None, now: float, every_seconds: float) -> bool:
    """Whether a fact written at `written_at` must be written again now: missing, stamped from the
    future, or reaching its TTL before the next pass (every `every_seconds`, plus the margin) is done."""
    if written_at is None or written_at > now + WARM_CLOCK_SKEW_SECONDS:
        return True
    return now - written_at + every_seconds + FACTS_REFRESH_MARGIN_SECONDS >= TTL_SECONDS[kind]


def to_refresh(
    usage: Usage,
    scored: dict[tuple[str, str], ScoredType],
    prepared: dict[str, PreparedRegion],
    *,
    now: float,
    every_seconds: float,
    window: float = FACTS_REFRESH_WINDOW_SECONDS,
) -> Refresh:
    """What this pass refreshes, given what runs used and the facts as kept now."""
    by_region: dict[str, list[str]] = {}
    zone_ids: dict[str, bool] = {}
    for key, used_at in sorted(usage.scored.items()):
        if not recent(used_at, now, window):
            continue
        region, instance_type = key
        fact = scored.get(key)
        wants_ids = recent(usage.zone_ids.get(key), now, window)
        if due("scoring", fact.written_at if fact else None, now, every_seconds) or (wants_ids and not fact.zone_ids):
            by_region.setdefault(region, []).append(instance_type)
        zone_ids[region] = zone_ids.get(region, False) or wants_ids
    launch: dict[str, tuple[str, ...]] = {}
    for region, used_at in sorted(usage.launched.items()):
        zones = tuple(sorted(set(usage.zones.get(region, ()))))
        if not recent(used_at, now, window) or not zones:
            continue
        kept = prepared.get(region)
        if due("launch", kept.written_at if kept else None, now, every_seconds) or not set(zones) <= set(kept.zones):
            launch[region] = zones
    return Refresh(
        scoring={region: (tuple(types), zone_ids[region]) for region, types in by_region.items()},
        launch=launch,
    )
