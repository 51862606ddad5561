"""A continued execution keeps the request's capacity_block and the block its run bought
(handlers/validate_request.py): the same checks pass again, and the successor is handed the block."""

from gpufill.handlers.validate_request import held_block, user_fields
from gpufill.models.request import Request, normalise

BLOCK = {"max_upfront_usd": 2000.5, "duration_hours": 48, "start_within": "P7D"}


def test_the_request_a_successor_checks_again_keeps_its_capacity_block():
    asked = Request(instance_type="p5.48xlarge", count=2, regions=["us-east-2"], market="capacity-block",
                    capacity_block=BLOCK, wait_for_capacity={"deadline": "PT6H"})
    resolved = normalise(asked, request_id="r", default_regions=[], home_region="us-east-1")
    again = normalise(Request(**user_fields(resolved)), request_id="r", default_regions=[], home_region="us-east-1")
    assert again.capacity_block == resolved.capacity_block
    assert (again.market, again.wait_for_capacity_seconds) == ("capacity-block", 6 * 3600)


def test_the_request_a_successor_checks_again_keeps_its_own_backoff():
    asked = Request(count=2, regions=["us-east-2"], all_or_nothing=True,
                    wait_for_capacity={"deadline": "PT6H", "first_delay": "PT30S", "max_delay": "PT10M"})
    resolved = normalise(asked, request_id="r", default_regions=[], home_region="us-east-1")
    again = normalise(Request(**user_fields(resolved)), request_id="r", default_regions=[], home_region="us-east-1")
    assert (again.wait_first_delay_seconds, again.wait_max_delay_seconds) == (30, 600)


def test_the_successor_is_handed_the_block_with_its_length():
    held = {"capacity_reservation_id": "cr-0123456789abcdef0", "start": "2026-12-05T04:55:00Z",
            "end": "2026-12-06T11:30:00Z", "upfront_fee": 1390.0}
    block = held_block(held)
    assert block["reservation"] == held and block["offering"] == {"duration_hours": 30, "duration_minutes": 35}
