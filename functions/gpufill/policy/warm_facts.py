"""Warm facts: when what an earlier run of the deployment scored or prepared may stand in for
asking AWS again.

A fact is used only inside its TTL (constants.WARM_*_TTL_SECONDS) and only when every fact the
run needs is there: a run ranks either wholly from warm facts or wholly from a fresh scoring pass,
never from a mix it could not explain. Pure: the adapter reads the items, this decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpufill.constants import WARM_CLOCK_SKEW_SECONDS, WARM_LAUNCH_TTL_SECONDS, WARM_SCORING_TTL_SECONDS
from gpufill.models.request import ResolvedRequest
from gpufill.models.run import RegionFacts, RegionLaunch, TypeFacts

FactKind = Literal["scoring", "launch"]
TTL_SECONDS: dict[str, int] = {"scoring": WARM_SCORING_TTL_SECONDS, "launch": WARM_LAUNCH_TTL_SECONDS}


@dataclass(frozen=True)
class ScoredType:
    """ScoreRegion's answer for one (region, type), as a later run finds it."""

    region: str
    facts: TypeFacts
    written_at: float
    # Whether the zone ids were looked up (only blended scoring asks for them).
    zone_ids: bool = False


@dataclass(frozen=True)
class PreparedRegion:
    """PrepareRegion's answer for one region, as a later run finds it."""

    region: str
    image_id: str
    snapshot_gib: int | None
    security_group_id: str | None
    subnets: dict[str, str]
    # Every AZ whose subnet was looked up, found or not: an AZ outside it was never asked about.
    zones: tuple[str, ...]
    written_at: float


def expires_at(kind: FactKind, written_at: float) -> int:
    """The TTL attribute's value: the first whole second the fact is no longer used."""
    return int(written_at + TTL_SECONDS[kind]) + 1


def is_fresh(kind: FactKind, written_at: float, now: float) -> bool:
    """Inside its TTL: written no earlier than TTL seconds ago, and not from the future."""
    return written_at <= now + WARM_CLOCK_SKEW_SECONDS and now - written_at < TTL_SECONDS[kind]


def wants_fresh(request: ResolvedRequest) -> bool:
    return request.facts == "fresh"


def warm_region_facts(
    request: ResolvedRequest, found: dict[tuple[str, str], ScoredType], now: float
) -> list[RegionFacts] | None:
    """The request's region facts from warm facts, in the request's order; None unless every
    (region, type) it names is there and fresh (then the run scores as if nothing were kept)."""
    if wants_fresh(request):
        return None
    blended = request.scoring == "blended"
    regions = []
    for region in request.regions:
        types = []
        for instance_type in request.instance_types:
            fact = found.get((region, instance_type))
            if fact is None or not is_fresh("scoring", fact.written_at, now) or (blended and not fact.zone_ids):
                return None
            types.append(fact.facts)
        regions.append(RegionFacts(region=region, types=types))
    return regions


def warm_launch(
    request: ResolvedRequest, prepared: PreparedRegion | None, zones: set[str], now: float
) -> RegionLaunch | None:
    """The region's launch settings from a warm fact, if it is fresh and looked up every AZ the run
    may launch in; None sends the run to PrepareRegion, which looks them up and keeps them."""
    if prepared is None or wants_fresh(request) or not is_fresh("launch", prepared.written_at, now):
        return None
    if not zones <= set(prepared.zones):
        return None
    subnets = {z: s for z, s in prepared.subnets.items() if z in zones}
    if not subnets:
        return None  # PrepareRegion says why: no subnet to launch into
    return RegionLaunch(
        region=prepared.region,
        image_id=prepared.image_id,
        # The launch uses max(the request's, the AMI's root snapshot size), as PrepareRegion fixes it.
        root_volume_gib=request.root_volume_gib if prepared.snapshot_gib is None
        else max(request.root_volume_gib, prepared.snapshot_gib),
        security_group_id=prepared.security_group_id,
        subnets=subnets,
    )
