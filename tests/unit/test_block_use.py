"""A bought Capacity Block is used for what it is and accounted for at every end
(policy/reservations.py, policy/block_use.py; docs/capacity-blocks.md)."""

from gpufill.models.request import Request, normalise
from gpufill.policy.reservations import Reservation, plan

OHIO = "us-east-2"


def request(**fields):
    return normalise(
        Request(**{"count": 2, "instance_type": "p5.48xlarge", "regions": [OHIO], "market": "on-demand", **fields}),
        request_id="r", default_regions=[OHIO], home_region=OHIO,
    )


def test_a_capacity_block_is_never_planned_as_an_on_demand_capacity_reservation_even_when_named():
    block = Reservation(capacity_reservation_id="cr-0000000000000000b", region=OHIO, availability_zone=f"{OHIO}a",
                        instance_type="p5.48xlarge", available=2, match="targeted", for_deployment=True,
                        reservation_type="capacity-block")
    odcr = Reservation(capacity_reservation_id="cr-0000000000000000d", region=OHIO, availability_zone=f"{OHIO}a",
                       instance_type="p5.48xlarge", available=2, match="targeted", for_deployment=True)
    for named in ([], ["cr-0000000000000000b"]):
        seen = {s.capacity_reservation_id: s for s in plan([block, odcr], request(capacity_reservation_ids=named or None))}
        assert seen["cr-0000000000000000b"].planned == 0
        assert seen["cr-0000000000000000b"].why_not == "a Capacity Block: only the request that bought it launches into it"
        assert seen["cr-0000000000000000d"].planned == 2
