"""The calls behind a Capacity Block and the spend guard's schedules, against scripted AWS answers:
which offerings are read (adapters/capacity_blocks.py), that a block is bought exactly once however
the purchase's answer goes, and what Scheduler is asked (adapters/schedules.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from aws_fakes import FakeEC2, client_error
from botocore.exceptions import ReadTimeoutError

from gpufill.adapters import capacity_blocks, schedules
from gpufill.constants import ENV_APPROVAL_TOPIC_ARN, ENV_REMINDER_FUNCTION_ARN, ENV_SCHEDULE_GROUP, ENV_SCHEDULER_ROLE_ARN
from gpufill.policy.capacity_blocks import Offering

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
START = datetime(2026, 12, 5, 11, 30, tzinfo=UTC)
TAGS = {"gpufill:managed": "true", "gpufill:deployment": "prod", "gpufill:request-id": "r1",
        "gpufill:capacity-block-offering": "cb-1"}


@pytest.fixture
def account(monkeypatch):
    """Each region's fake EC2 (or Scheduler), made on first use; clock pauses are noted, not slept."""
    regions: dict[str, FakeEC2] = {}
    paused: list[float] = []

    def client(service, region=None):
        return regions.setdefault(f"{service}/{region}", FakeEC2())

    monkeypatch.setattr(capacity_blocks, "client", client)
    monkeypatch.setattr(schedules, "client", client)
    from gpufill.adapters import visibility

    monkeypatch.setattr(visibility.clock, "pause", paused.append)
    account = lambda service="ec2", region="us-east-2": regions.setdefault(f"{service}/{region}", FakeEC2())  # noqa: E731
    account.paused = paused
    return account


def offered(n: int, itype: str = "p5.48xlarge", **fields) -> dict:
    return {"CapacityBlockOfferingId": f"cb-{n}", "AvailabilityZone": "us-east-2a", "InstanceType": itype,
            "InstanceCount": 2, "StartDate": START, "EndDate": START + timedelta(hours=24),
            "CapacityBlockDurationHours": 24, "UpfrontFee": "1390.50", **fields}


# --- DescribeCapacityBlockOfferings -------------------------------------------------------------


def test_offerings_are_asked_per_type_for_the_count_the_hours_and_a_start_in_the_window(account):
    ec2 = account()
    ec2.answers["describe_capacity_block_offerings"] = [
        [{"CapacityBlockOfferings": [offered(1)]},
         {"CapacityBlockOfferings": [offered(2, EndDate=START + timedelta(hours=23, minutes=35), CapacityBlockDurationHours=23,
                                             CapacityBlockDurationMinutes=35)]}],
        [{"CapacityBlockOfferings": [offered(3, "p4d.24xlarge", CurrencyCode="EUR", InstanceCount="2")]}, {}],
    ]
    found = capacity_blocks.offerings("us-east-2", ["p5.48xlarge", "p4d.24xlarge"], 2, 24, NOW, NOW + timedelta(days=7))
    assert ec2.called("describe_capacity_block_offerings") == [
        {"InstanceType": t, "InstanceCount": 2, "CapacityDurationHours": 24, "StartDateRange": NOW,
         # a block starting by the window's end ends a duration later, up to a day more (at 11:30 UTC)
         "EndDateRange": NOW + timedelta(days=9)}
        for t in ("p5.48xlarge", "p4d.24xlarge")
    ]
    assert found[0] == Offering(offering_id="cb-1", region="us-east-2", availability_zone="us-east-2a",
                                instance_type="p5.48xlarge", instance_count=2, start=START, end=START + timedelta(hours=24),
                                duration_hours=24, upfront_fee=1390.5, currency="USD")
    assert [o.offering_id for o in found] == ["cb-1", "cb-2", "cb-3"]
    assert (found[1].duration_hours, found[1].duration_minutes) == (23, 35)  # hours plus minutes to the 11:30 UTC end
    assert (found[2].currency, found[2].instance_count, found[2].instance_type) == ("EUR", 2, "p4d.24xlarge")


@pytest.mark.parametrize(("error", "said"), [
    (client_error("UnauthorizedOperation", 403, "not allowed", "DescribeCapacityBlockOfferings"), "UnauthorizedOperation: "),
    (ReadTimeoutError(endpoint_url="https://ec2.us-east-2.amazonaws.com"), "ReadTimeoutError: "),
])
def test_a_region_that_does_not_answer_is_named_with_why(account, error, said):
    account().answers["describe_capacity_block_offerings"] = [error]
    with pytest.raises(capacity_blocks.RegionNotAnswering) as raised:
        capacity_blocks.offerings("us-east-2", ["p5.48xlarge"], 2, 24, NOW, NOW)
    assert str(raised.value).startswith(said) and raised.value.__cause__ is error


# --- PurchaseCapacityBlock, exactly once ---------------------------------------------------------


def reservation(rid: str = "cr-1", tags: dict | None = None) -> dict:
    return {"CapacityReservationId": rid, "AvailabilityZone": "us-east-2a",
            "Tags": [{"Key": k, "Value": v} for k, v in (TAGS if tags is None else tags).items()]}


def held(*reservations: dict) -> dict:
    return {"CapacityReservations": list(reservations)}


def buy(account) -> tuple[dict, bool]:
    return capacity_blocks.purchase_once("us-east-2", "cb-1", deployment="prod", request_id="r1")


def test_the_block_is_bought_tagged_with_the_deployment_the_request_and_the_offering(account):
    ec2 = account()
    ec2.answers["describe_capacity_reservations"] = [held(reservation("cr-other", {**TAGS, "gpufill:request-id": "r2"}))]
    ec2.answers["purchase_capacity_block"] = [{"CapacityReservation": {"CapacityReservationId": "cr-new"}}]
    assert buy(account) == ({"CapacityReservationId": "cr-new"}, True)
    assert ec2.called("describe_capacity_reservations") == [
        {"Filters": [{"Name": "instance-match-criteria", "Values": ["targeted"]}]}]
    assert ec2.called("purchase_capacity_block") == [{
        "CapacityBlockOfferingId": "cb-1", "InstancePlatform": "Linux/UNIX",
        "TagSpecifications": [{"ResourceType": "capacity-reservation",
                               "Tags": [{"Key": k, "Value": v} for k, v in TAGS.items()]}],
    }]
    assert capacity_blocks.block_tags(deployment="prod", request_id="r1", offering_id="cb-1") == TAGS


def test_a_retried_purchase_finds_the_block_its_first_try_bought_and_buys_nothing(account, caplog):
    caplog.set_level("INFO")
    ec2 = account()
    ec2.answers["describe_capacity_reservations"] = [[{}, held(reservation("cr-x", {})), held(reservation("cr-1"))]]
    assert buy(account) == (reservation("cr-1"), False)
    assert ec2.called("purchase_capacity_block") == []
    [logged] = [r for r in caplog.records if r.getMessage() == "capacity block already bought"]
    assert logged.reservation == "cr-1"


def test_a_block_of_another_offering_or_untagged_is_not_ours(account):
    ec2 = account()
    other = reservation("cr-2", {**TAGS, "gpufill:capacity-block-offering": "cb-9"})
    bare = {"CapacityReservationId": "cr-3", "Tags": [{"Key": "gpufill:managed"}]}
    ec2.answers["describe_capacity_reservations"] = [held(other, bare, {"CapacityReservationId": "cr-4"})]
    ec2.answers["purchase_capacity_block"] = [{"CapacityReservation": {"CapacityReservationId": "cr-new"}}]
    assert buy(account)[1] is True


@pytest.mark.parametrize("error", [
    ReadTimeoutError(endpoint_url="https://ec2"), client_error("InternalError", 500), client_error("RequestLimitExceeded"),
    client_error("InvalidCapacityBlockOfferingId.NotFound"), client_error("ServiceUnavailable", 503),
    client_error("Unavailable", 503), client_error("InternalFailure", 500),
])
def test_a_purchase_whose_answer_is_unsettled_is_looked_for_until_its_block_shows(account, error, caplog):
    caplog.set_level("INFO")
    ec2 = account()
    ec2.answers["describe_capacity_reservations"] = [held(), held(), held(reservation("cr-1"))]
    ec2.answers["purchase_capacity_block"] = [error]
    assert buy(account) == (reservation("cr-1"), False)
    assert len(ec2.called("describe_capacity_reservations")) == 3 and account.paused == [0.5]
    assert len(ec2.called("purchase_capacity_block")) == 1  # never bought twice
    [unsettled] = [r for r in caplog.records if r.getMessage() == "capacity block purchase unsettled"]
    assert (unsettled.offering, unsettled.error) == ("cb-1", str(error))
    [looked] = [r for r in caplog.records if r.getMessage() == "not visible yet, asking again"]
    assert looked.call == "capacity block from cb-1"


def test_an_unsettled_purchase_whose_block_never_shows_raises_the_purchases_own_error(account):
    ec2 = account()
    error = client_error("InternalError", 500, operation="PurchaseCapacityBlock")
    ec2.answers["describe_capacity_reservations"] = [held()]
    ec2.answers["purchase_capacity_block"] = [error]
    with pytest.raises(type(error)) as raised:
        buy(account)
    assert raised.value is error and raised.value.__cause__ is None
    assert account.paused == [0.5, 1.0, 2.0, 4.0] and len(ec2.called("purchase_capacity_block")) == 1


def test_a_refused_purchase_gets_one_look_then_the_refusal_stands(account):
    ec2 = account()
    refusal = client_error("InsufficientCapacity", 400, "sold", "PurchaseCapacityBlock")
    ec2.answers["describe_capacity_reservations"] = [held()]
    ec2.answers["purchase_capacity_block"] = [refusal]
    with pytest.raises(type(refusal)) as raised:
        buy(account)
    assert raised.value is refusal and len(ec2.called("describe_capacity_reservations")) == 2 and account.paused == []


def test_a_refused_purchase_whose_block_an_earlier_try_bought_is_that_block(account):
    ec2 = account()
    ec2.answers["describe_capacity_reservations"] = [held(), held(reservation("cr-1"))]
    ec2.answers["purchase_capacity_block"] = [client_error("InvalidParameterValue")]
    assert buy(account) == (reservation("cr-1"), False)


# --- EventBridge Scheduler ------------------------------------------------------------------------


@pytest.fixture
def scheduler(account, monkeypatch):
    monkeypatch.setenv(ENV_SCHEDULE_GROUP, "gpufill-prod")
    monkeypatch.setenv(ENV_SCHEDULER_ROLE_ARN, "arn:aws:iam::1:role/scheduler")
    monkeypatch.setenv(ENV_APPROVAL_TOPIC_ARN, "arn:aws:sns:us-east-1:1:approvals")
    monkeypatch.setenv(ENV_REMINDER_FUNCTION_ARN, "arn:aws:lambda:us-east-1:1:function:gpufill-prod-RemindApprovers")
    monkeypatch.setattr(schedules.clock, "now", lambda: NOW)
    fake = account("scheduler", None)
    fake.answers["create_schedule"] = [{}]
    fake.answers["delete_schedule"] = [{}]
    return fake


def test_the_lifetime_schedule_starts_the_requests_teardown_once_at_its_expiry_and_deletes_itself(scheduler):
    assert schedules.schedule_expiry("r1", "2026-12-05T12:00:00+00:00", "arn:sm") is True
    [made] = scheduler.called("create_schedule")
    target = made.pop("Target")
    assert made == {"GroupName": "gpufill-prod", "Name": "life-r1", "ScheduleExpression": "at(2026-12-05T12:00:00)",
                    "ScheduleExpressionTimezone": "UTC", "FlexibleTimeWindow": {"Mode": "OFF"}, "State": "ENABLED",
                    "ActionAfterCompletion": "DELETE"}
    assert target["Arn"] == "arn:aws:scheduler:::aws-sdk:sfn:startExecution"
    assert target["RoleArn"] == "arn:aws:iam::1:role/scheduler"
    assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 86400, "MaximumRetryAttempts": 185}
    started = json.loads(target["Input"])
    assert (started["StateMachineArn"], started["Name"]) == ("arn:sm", "r1-expired")
    assert json.loads(started["Input"])["action"] == "teardown"


def test_a_late_round_is_scheduled_at_its_own_moment_under_its_own_name(scheduler):
    assert schedules.schedule_expiry("r1", "2026-12-01T00:00:00+00:00", "arn:sm", "3", at="2026-12-05T09:00:00+00:00") is True
    [made] = scheduler.called("create_schedule")
    assert (made["Name"], made["ScheduleExpression"]) == ("life-r1.3", "at(2026-12-05T09:00:00)")
    assert json.loads(made["Target"]["Input"])["Name"] == "r1-r3-expired"
    schedules.schedule_expiry("r1", "2026-12-01T00:00:00+00:00", "arn:sm", "4", at="2026-12-01T00:00:00+00:00")
    assert scheduler.called("create_schedule")[1]["ScheduleExpression"] == "at(2026-12-04T12:01:00)"  # past: a minute from now


def test_a_lifetime_already_past_is_asked_about_a_minute_from_now(scheduler):
    schedules.schedule_expiry("r1", "2026-12-01T00:00:00+00:00", "arn:sm")
    assert scheduler.called("create_schedule")[0]["ScheduleExpression"] == "at(2026-12-04T12:01:00)"


def test_a_schedule_made_already_is_not_an_error_and_other_refusals_are(scheduler):
    scheduler.answers["create_schedule"] = [client_error("ConflictException", 409, operation="CreateSchedule")]
    assert schedules.schedule_expiry("r1", "2026-12-05T12:00:00+00:00", "arn:sm") is False
    scheduler.answers["create_schedule"] = [client_error("AccessDeniedException", 403, operation="CreateSchedule")]
    with pytest.raises(Exception, match="AccessDeniedException"):
        schedules.schedule_expiry("r1", "2026-12-05T12:00:00+00:00", "arn:sm")


def test_reminders_publish_the_approval_again_every_hour_from_the_first_until_the_deadline(scheduler):
    until = NOW + timedelta(days=1)
    assert schedules.schedule_reminders("t-1", subject="S", message="M", first=NOW, until=until) is True
    [made] = scheduler.called("create_schedule")
    assert (made["Name"], made["ScheduleExpression"], made["StartDate"], made["EndDate"]) == ("remind-t-1", "rate(1 hour)", NOW, until)
    assert "ActionAfterCompletion" not in made
    assert made["Target"]["Arn"] == "arn:aws:lambda:us-east-1:1:function:gpufill-prod-RemindApprovers"
    assert json.loads(made["Target"]["Input"]) == {"execution_name": "t-1", "subject": "S", "message": "M"}
    assert made["Target"]["RoleArn"] == "arn:aws:iam::1:role/scheduler"
    schedules.schedule_expiry("r1", "2026-12-05T12:00:00+00:00", "arn:sm")  # a one-time schedule: no window
    assert "StartDate" not in scheduler.called("create_schedule")[1] and "EndDate" not in scheduler.called("create_schedule")[1]


def test_deleting_a_schedule_that_is_gone_is_not_an_error_and_other_refusals_are(scheduler):
    assert schedules.cancel_expiry("r1") is True and schedules.cancel_reminders("t-1") is True
    assert scheduler.called("delete_schedule") == [{"GroupName": "gpufill-prod", "Name": "life-r1"},
                                                   {"GroupName": "gpufill-prod", "Name": "remind-t-1"}]
    scheduler.answers["delete_schedule"] = [client_error("ResourceNotFoundException", 404, operation="DeleteSchedule")]
    assert schedules.cancel_expiry("r1") is False
    scheduler.answers["delete_schedule"] = [client_error("ThrottlingException", 400, operation="DeleteSchedule")]
    with pytest.raises(Exception, match="ThrottlingException"):
        schedules.cancel_expiry("r1")


# --- the sweep's read of the active blocks' ends ------------------------------------------------


def test_the_sweep_reads_the_end_of_each_active_block_and_nothing_else(account, caplog):
    caplog.set_level("INFO")
    ec2 = account()
    ends = START + timedelta(hours=24)
    ec2.answers["describe_capacity_reservations"] = [[
        {"CapacityReservations": [{"CapacityReservationId": "cr-b1", "ReservationType": "capacity-block", "EndDate": ends}]},
        {},  # a page without reservations
        {"CapacityReservations": [
            {"CapacityReservationId": "cr-b2", "ReservationType": "capacity-block", "EndDate": ends + timedelta(days=1)},
            {"CapacityReservationId": "cr-od", "ReservationType": "default", "EndDate": ends},  # an ODCR, not a block
            {"CapacityReservationId": "cr-open", "ReservationType": "capacity-block"},  # no end said: nothing to warn of
        ]},
    ]]
    assert capacity_blocks.active_ends("us-east-2") == {"cr-b1": ends, "cr-b2": ends + timedelta(days=1)}
    assert ec2.called("describe_capacity_reservations") == [
        {"Filters": [{"Name": "state", "Values": ["active"]}, {"Name": "instance-match-criteria", "Values": ["targeted"]}]}
    ]
    refused = account(region="eu-west-1")
    refused.answers["describe_capacity_reservations"] = [client_error("UnauthorizedOperation", operation="DescribeCapacityReservations")]
    assert capacity_blocks.active_ends("eu-west-1") == {}  # the next pass looks again
    [logged] = [r for r in caplog.records if r.getMessage() == "capacity blocks not read"]
    assert (logged.region, logged.error) == ("eu-west-1", str(refused.answers["describe_capacity_reservations"][0]))
