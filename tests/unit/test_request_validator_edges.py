"""The request's field validators at their edges and in their exact words: the limit itself is
accepted and one past it refused, and the refusal names the field and says what to give."""

import pytest
from pydantic import ValidationError

from gpufill.bootstrap.user_data import MAX_IMAGE_NAME_LENGTH
from gpufill.models.request import Request, describe_problems

ID = "i-0123456789abcdef0"
CR = "cr-0123456789abcdef0"


def problems(request: dict) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        Request.model_validate(request)
    return {p["field"]: p["problem"] for p in describe_problems(caught.value)}


def block(start_within: str) -> dict:
    return {"capacity_block": {"max_upfront_usd": 100, "duration_hours": 24, "start_within": start_within}}


@pytest.mark.parametrize("fields", [
    {"max_lifetime": "PT15M"}, {"max_lifetime": "P30D"},
    block("PT1H"), block("P56D"),
    {"wait_for_capacity": {"deadline": "PT6H", "first_delay": "PT10S", "max_delay": "PT6H"}},
    {"wait_for_capacity": {"deadline": "PT1S"}}, {"wait_for_capacity": {"deadline": "P7D"}},
    {"wait_for_capacity": {"deadline": "PT6H", "first_delay": "PT1M", "max_delay": "PT1M"}},
    {"model_id": "a" * 96 + "/" + "b" * 96},
    {"image": "a" * MAX_IMAGE_NAME_LENGTH + ":" + "t" * 128 + "@sha256:" + "0" * 64},
])
def test_each_limit_itself_is_accepted(fields):
    Request.model_validate(fields)


@pytest.mark.parametrize(("fields", "field", "problem"), [
    ({"max_lifetime": "PT15M0.5S"}, "max_lifetime", "give whole seconds, such as 'PT8H'"),
    ({"max_lifetime": "PT14M59S"}, "max_lifetime", "must be from PT15M to P30D, got 14.9833 minutes"),
    (block("PT59M"), "capacity_block.start_within",
     "must be at least an hour ('PT1H'): a block starts at a whole hour at the earliest"),
    ({"wait_for_capacity": {"deadline": "PT6H", "max_delay": "PT6H1S"}}, "wait_for_capacity.max_delay",
     "must be from 10 seconds to 6 hours ('PT10S' to 'PT6H'), got 21601 seconds"),
    ({"wait_for_capacity": {"deadline": "PT0S"}}, "wait_for_capacity.deadline", "must be at least one second, such as 'PT6H'"),
    ({"wait_for_capacity": {"deadline": "P7DT1H"}}, "wait_for_capacity.deadline", "may be at most 7 days ('P7D'), got 7.04167 days"),
    ({"wait_for_capacity": {"deadline": "PT6H", "first_delay": "PT2M", "max_delay": "PT1M"}}, "wait_for_capacity",
     "first_delay (120 s) is longer than max_delay (60 s): the waits grow from the first up to the cap"),
    ({"wait_for_capacity": {"deadline": "PT6H", "first_delay": "PT9S"}}, "wait_for_capacity.first_delay",
     "must be from 10 seconds to 6 hours ('PT10S' to 'PT6H'), got 9 seconds"),
    ({"capacity_block": {"max_upfront_usd": "60000", "duration_hours": 24, "start_within": "P7D"}},
     "capacity_block.max_upfront_usd", "must be a number of US dollars such as 60000, got a string"),
    ({"action": "teardown", "request_id": "bad id"}, "request_id",
     "'bad id' is not a request id: give the execution name of a provisioning run "
     "(1-80 characters, no spaces and none of <>{}[]?*\"#%\\^|~`$&,;:/)"),
    ({"action": "teardown", "instance_ids": [ID, "nope", "i-x"]}, "instance_ids",
     "not EC2 instance ids (i-0123456789abcdef0): 'nope', 'i-x'"),
    ({"action": "teardown", "instance_ids": [ID, ID]}, "instance_ids", "lists an instance more than once"),
    ({"capacity_reservation_ids": ["cr-1", "x"]}, "capacity_reservation_ids",
     "not Capacity Reservation ids ('cr-' and 17 hexadecimal digits, such as cr-0123456789abcdef0): 'cr-1', 'x'"),
    ({"count": 251}, "count",
     "at most 250 instances per run (a run's state must fit Step Functions' 256 KB); start several runs for a larger fleet"),
    ({"regions": ["xx-1", "yy-2"]}, "regions", "unknown region(s): 'xx-1', 'yy-2'"),
    ({"capacity_reservation_ids": [CR, CR]}, "capacity_reservation_ids", "lists a reservation more than once"),
    ({"refill": {"request_id": "run-1", "replaces": ["nope", "i-x"]}}, "refill.replaces",
     "not EC2 instance ids (i-0123456789abcdef0): 'nope', 'i-x'"),
])
def test_one_past_each_limit_is_refused_in_these_words(fields, field, problem):
    assert problems(fields) == {field: problem}


def test_a_ready_timeout_beside_an_unknown_action_is_not_judged_by_it():
    # The action is refused on its own; the ready timeout is not called wrong for an action nobody gave.
    assert problems({"action": "bogus", "ready_timeout": "PT5M"}) == {
        "action": "must be 'provision', 'plan', 'teardown' or 'status'"}
