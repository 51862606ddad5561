"""The EC2 answers each class of policy/errors.py holds, beyond the common ones
test_boot_and_causes.py lists: what the fill loop makes of each."""

import pytest

from gpufill.policy.errors import classify, is_rejection, not_visible_yet, region_unusable


def test_a_reservation_with_no_room_left_is_a_pool_without_capacity():
    # Another launch took the reservation's room: the next pool may still have some.
    assert classify("ReservationCapacityExceeded") == "capacity" and not is_rejection("ReservationCapacityExceeded")


@pytest.mark.parametrize("code", ["InvalidLaunchTemplateId.NotFound", "InvalidLaunchTemplateId.VersionNotFound",
                                  "InvalidGroup.NotFound"])
def test_a_resource_gpufill_just_created_and_ec2_does_not_show_yet_is_asked_again(code):
    assert not_visible_yet(code) and classify(code) == "throttled" and not is_rejection(code)


@pytest.mark.parametrize("code", ["VersionLimitExceeded", "AuthFailure.ServiceLinkedRoleCreationNotPermitted"])
def test_a_refusal_every_pool_would_give_stops_the_run(code):
    assert is_rejection(code) and classify(code) == "error"


@pytest.mark.parametrize("code", ["OptInRequired", "NetworkSetupError", "EndpointConnectionError"])
def test_a_region_the_run_cannot_use_is_skipped_not_refused(code):
    assert region_unusable(code) and not is_rejection(code)
