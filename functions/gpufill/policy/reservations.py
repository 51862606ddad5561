"""Which On-Demand Capacity Reservations a run launches into, and how many instances each takes.

A run may use a reservation when it is active, holds one of the requested types in a candidate
region, and belongs to this deployment (tagged `gpufill:deployment=<env>`) or is named in the
request. Named reservations come first (in the request's order), then the request's type
preference, then its region order, then the roomiest. Each takes what it has room for until the
count is met: never more than its available count, never more than the request asks for.
Reservations are tried before any Spot or On-Demand pool; they cost the On-Demand price, which
the account pays for the reservation whether or not it runs anything in it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufill.constants import CAPACITY_BLOCK_TYPE
from gpufill.models.request import ResolvedRequest
from gpufill.models.run import Pool, ReservationSeen

# What the cause of a run that found no room lists at most.
MAX_LISTED = 20


@dataclass(frozen=True)
class Reservation:
    """One reservation as DescribeCapacityReservations tells it."""

    capacity_reservation_id: str
    region: str
    availability_zone: str
    instance_type: str
    available: int
    match: str  # "open" or "targeted"
    state: str = "active"
    for_deployment: bool = False  # tagged for this deployment
    reservation_type: str = "default"  # EC2's ReservationType: "default" (an ODCR) or "capacity-block"


def plan(reservations: list[Reservation], request: ResolvedRequest) -> list[ReservationSeen]:
    """Every reservation the run may consider, each with how many instances it gets (`planned`)
    or why it gets none."""
    named = list(request.capacity_reservation_ids or [])
    seen: list[ReservationSeen] = []
    usable: list[Reservation] = []
    for r in _unique(reservations):
        why = _why_unusable(r, request, named)
        if why:
            seen.append(_seen(r, 0, why))
        else:
            usable.append(r)
    remaining = request.count
    for r in sorted(usable, key=lambda r: _order(r, request, named)):
        if r.available <= 0:
            seen.append(_seen(r, 0, "no room: every reserved instance is in use"))
            continue
        if remaining == 0:
            seen.append(_seen(r, 0, "not needed: the count is met by the reservations before it"))
            continue
        take = min(r.available, remaining)
        remaining -= take
        seen.append(_seen(r, take, None))
    return sorted(seen, key=lambda s: (s.planned == 0, _position(s, request, named)))


def first_market(request: ResolvedRequest) -> str:
    """The market of a try's first plan, the one that reads the reservations."""
    return "on-demand" if request.market == "on-demand" else "spot"


def read_again(request: ResolvedRequest, known_market: str, known_seen: int) -> bool:
    """Whether a try that reuses its facts reads the account's reservations again: yes when the
    last read found some (their room changes as instances launch into them and end) or when the
    plan the run holds is not its first market's (that plan read none), and always with "only";
    a run that found none looks again when its facts are due (WAIT_FACTS_TTL_SECONDS)."""
    if request.capacity_reservations == "none":
        return False
    if request.capacity_reservations == "only":
        return True  # the reservations are all such a run may launch into: each try looks
    return known_seen > 0 or known_market != first_market(request)


def pools(planned: list[ReservationSeen], prices: dict[tuple[str, str], float | None]) -> list[Pool]:
    """A pool per reservation that gets instances, in the plan's order. `prices` holds the
    On-Demand price per (region, type): what an instance in a reservation costs."""
    return [
        Pool(
            region=s.region,
            availability_zone=s.availability_zone,
            instance_type=s.instance_type,
            market="on-demand",
            price=prices.get((s.region, s.instance_type)),
            capacity_reservation_id=s.capacity_reservation_id,
            reserved=s.planned,
            note=f"capacity reservation {s.capacity_reservation_id} ({s.match})",
        )
        for s in planned
        if s.planned > 0
    ]


def room_left(pool: Pool, taken: dict[str, int]) -> int | None:
    """What a reservation pool may still take: its planned count less what this plan's launches
    put in it (`taken`, per reservation id). None for a pool that is not a reservation."""
    if pool.capacity_reservation_id is None:
        return None
    return max(0, (pool.reserved or 0) - taken.get(pool.capacity_reservation_id, 0))


def _unique(reservations: list[Reservation]) -> list[Reservation]:
    found: dict[str, Reservation] = {}
    for r in reservations:
        found.setdefault(r.capacity_reservation_id, r)
    return list(found.values())


def _why_unusable(r: Reservation, request: ResolvedRequest, named: list[str]) -> str | None:
    if r.reservation_type == CAPACITY_BLOCK_TYPE:
        # Bought (and paid) by one request, launched into only with MarketType capacity-block: EC2
        # refuses an On-Demand launch into it, and another request's fleet would spend its block.
        return "a Capacity Block: only the request that bought it launches into it"
    if r.state != "active":
        return f"not active ({r.state})"
    if r.instance_type not in request.instance_types:
        return f"holds {r.instance_type}, not a requested type"
    if r.region not in request.regions:
        return f"in {r.region}, not a candidate region"
    if not r.for_deployment and r.capacity_reservation_id not in named:
        return "neither tagged for this deployment nor named in the request"
    return None


def _order(r: Reservation, request: ResolvedRequest, named: list[str]) -> tuple:
    return (*_rank(r.capacity_reservation_id, r.instance_type, r.region, request, named), -r.available, r.capacity_reservation_id)


def _position(s: ReservationSeen, request: ResolvedRequest, named: list[str]) -> tuple:
    return (*_rank(s.capacity_reservation_id, s.instance_type, s.region, request, named), -s.available, s.capacity_reservation_id)


def _rank(cr: str, instance_type: str, region: str, request: ResolvedRequest, named: list[str]) -> tuple[int, int, int]:
    def index(items: list[str], item: str) -> int:
        return items.index(item) if item in items else len(items)

    return (index(named, cr), index(request.instance_types, instance_type), index(request.regions, region))


def _seen(r: Reservation, planned: int, why: str | None) -> ReservationSeen:
    return ReservationSeen(
        capacity_reservation_id=r.capacity_reservation_id,
        region=r.region,
        availability_zone=r.availability_zone,
        instance_type=r.instance_type,
        available=r.available,
        match=r.match,
        planned=planned,
        why_not=why,
    )
