"""What a person reads when nobody answered a teardown's approval (approval.expired_notice): nothing
was terminated, what keeps running and costing, and the command that asks again; and the spend
guard's reason at the head of the first message."""

from datetime import UTC, datetime

import pytest

from gpufill.constants import TRIGGER_MAX_LIFETIME
from gpufill.models.teardown import Teardown, TeardownInstance, TeardownTarget
from gpufill.policy import approval

HEAD = "gpufill: approval expired, instances still running ("
DEADLINE = "2026-12-05T12:00:00+00:00"


def machine(n: int) -> TeardownInstance:
    return TeardownInstance(instance_id=f"i-{n:017x}", region="us-west-2", availability_zone="us-west-2a",
                            instance_type="g6.xlarge", market="spot", state="running", hourly_price=0.5)


def teardown(target=None, count=0, listed=2, **fields) -> Teardown:
    return Teardown(request_id="td-1", status="AWAITING_APPROVAL", target=target or TeardownTarget(request_id="req-1"),
                    instance_count=count, instances=[machine(n) for n in range(listed)], hourly_cost=1.25, **fields)


def test_the_notice_says_nothing_was_terminated_what_still_costs_and_how_to_ask_again():
    subject, body = approval.expired_notice(teardown(), execution_name="td-1", deadline=DEADLINE)
    assert subject == HEAD + "td-1)"
    assert body.split("\n") == [
        f"Nobody answered the approval of teardown td-1 before its deadline ({DEADLINE}).",
        "Nothing was terminated: 2 instance(s) keep running, $1.2500/h.",
        "",
        "To ask again:",
        "  gpufill teardown req-1",
    ]


def test_without_a_recorded_deadline_the_notice_says_so_plainly_and_counts_every_instance():
    _, body = approval.expired_notice(teardown(count=75, listed=2), execution_name="td-1", deadline=None)
    assert body.split("\n")[:2] == ["Nobody answered the approval of teardown td-1 before its deadline.",
                                    "Nothing was terminated: 75 instance(s) keep running, $1.2500/h."]


@pytest.mark.parametrize(("target", "again"), [
    (TeardownTarget(all=True), "gpufill teardown --all"),
    (TeardownTarget(instance_ids=["i-0123456789abcdef0", "i-0123456789abcdef1"]),
     "gpufill teardown --instances i-0123456789abcdef0 i-0123456789abcdef1"),
])
def test_the_command_to_ask_again_names_what_the_teardown_named(target, again):
    _, body = approval.expired_notice(teardown(target=target), execution_name="td-1", deadline=DEADLINE)
    assert body.split("\n")[-1] == "  " + again


def test_a_spend_guard_teardown_says_the_lifetime_had_passed():
    asked = teardown(trigger=TRIGGER_MAX_LIFETIME, expired_at="2026-12-05T10:00:00+00:00")
    _, body = approval.expired_notice(asked, execution_name="td-1", deadline=DEADLINE)
    assert body.split("\n")[2] == "It was asked by the spend guard: the max_lifetime of request req-1 had passed."


def test_a_name_that_just_fits_is_kept_whole_and_one_character_more_is_cut_to_99():
    name = "n" * (99 - len(HEAD) - 1)
    subject, body = approval.expired_notice(teardown(), execution_name=name, deadline=None)
    assert subject == HEAD + name + ")" and len(subject) == 99
    subject, body = approval.expired_notice(teardown(), execution_name=name + "m", deadline=None)
    assert subject == HEAD + name[:-3] + "...)" and len(subject) == 99
    assert body.startswith(f"Nobody answered the approval of teardown {name}m before")  # the body names it whole


def test_the_first_message_of_a_spend_guard_teardown_begins_with_why_with_or_without_the_time():
    expires = datetime(2026, 12, 5, 13, 0, tzinfo=UTC)
    arn = "arn:aws:states:eu-central-1:123456789012:execution:gpufill-provisioner-prod:td-1"
    timed = teardown(trigger=TRIGGER_MAX_LIFETIME, expired_at="2026-12-05T10:00:00+00:00")
    lines = approval.message(timed, execution_arn=arn, task_token="t", expires=expires)[1].split("\n")
    assert lines[:4] == [
        "The max_lifetime of request req-1 passed at 2026-12-05T10:00:00+00:00: gpufill's spend guard asks to end it.",
        "Nothing is terminated unless you approve; until the deadline below this is sent again every hour.",
        "",
        "gpufill teardown td-1 asks to terminate 2 instance(s): every instance of request req-1.",
    ]
    untimed = teardown(trigger=TRIGGER_MAX_LIFETIME)
    first = approval.message(untimed, execution_arn=arn, task_token="t", expires=expires)[1].split("\n")[0]
    assert first == "The max_lifetime of request req-1 passed: gpufill's spend guard asks to end it."
