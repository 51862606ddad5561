"""The same call sent again while EC2 does not show what gpufill just created: bounded, within
the step's time left, and only for a resource EC2 says it does not know."""

import pytest
from botocore.exceptions import ClientError

from gpufill.adapters import clock, visibility


def refusal(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "The Placement Group 'pg' is unknown."}}, "RunInstances")


@pytest.fixture
def pauses(monkeypatch):
    waited: list[float] = []
    monkeypatch.setattr(clock, "_sleep", waited.append)
    return waited


def answers(*codes):
    """A call refused with each code in turn, then answering "ok"."""
    left = list(codes)

    def call():
        if left:
            raise refusal(left.pop(0))
        return "ok"

    return call


def test_a_resource_seen_on_the_third_try_is_answered_after_two_short_pauses(pauses):
    assert visibility.until_visible(answers("InvalidPlacementGroup.Unknown", "InvalidGroup.NotFound"), "RunInstances") == "ok"
    assert pauses == [0.5, 1.0]


def test_past_the_bound_the_refusal_says_how_long_ec2_was_waited_for(pauses):
    with pytest.raises(ClientError) as caught:
        visibility.until_visible(answers(*["InvalidLaunchTemplateId.VersionNotFound"] * 9), "CreateFleet in us-west-2")
    assert pauses == [0.5, 1.0, 2.0, 4.0]
    assert caught.value.response["Error"]["Message"].endswith(
        "(CreateFleet in us-west-2: still unknown after 5 tries over 7.5 s; EC2 shows a resource created a "
        "moment ago within seconds, so it may have been deleted)")


def test_no_pause_outlasts_the_steps_time_left(pauses):
    with visibility.time_left(lambda: 1.2 - sum(pauses)):
        with pytest.raises(ClientError):
            visibility.until_visible(answers(*["InvalidPlacementGroup.Unknown"] * 9), "RunInstances")
    assert pauses == [0.5]  # 0.7 s left: the next pause (1 s) would not fit


def test_any_other_refusal_is_answered_at_once(pauses):
    with pytest.raises(ClientError) as caught:
        visibility.until_visible(answers("InsufficientInstanceCapacity"), "RunInstances")
    assert caught.value.response["Error"]["Code"] == "InsufficientInstanceCapacity" and pauses == []
