"""Capacity Blocks for ML in the simulated EC2 answer as EC2's do: offerings of exactly the asked
type, count and duration inside the date range; a purchase without idempotency that becomes a
targeted capacity reservation; launches only while the block is active, only with the
capacity-block market; instances ended 30 minutes before the block's end (local/capacity_blocks.py)."""

from datetime import timedelta

import pytest

from gpufill.local.deploy.images import LOCAL_AMI
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.engine.test_engine_market import error_of

EAST = "us-east-2"
P5 = "p5.48xlarge"
MARKET = {
    "regions": {EAST: {"zones": {f"{EAST}a": {P5: {"spot": 0, "on_demand": 0}}, f"{EAST}b": {P5: {"spot": 0, "on_demand": 0}}}}},
    "capacity_blocks": [
        {"zone": f"{EAST}a", "type": P5, "count": 2, "start_in_hours": 2, "duration_hours": 24, "upfront_fee": 1500.5},
        {"zone": f"{EAST}b", "type": P5, "count": 2, "start_in_hours": 30, "duration_hours": 24, "upfront_fee": 1200},
        {"zone": f"{EAST}b", "type": P5, "count": 4, "start_in_hours": 2, "duration_hours": 24, "upfront_fee": 3000},
        {"zone": f"{EAST}a", "type": P5, "count": 2, "start_in_hours": 2, "duration_hours": 48, "upfront_fee": 2900},
    ],
}
TAGS = [{"ResourceType": "capacity-reservation", "Tags": [{"Key": "gpufill:request-id", "Value": "r1"}]}]


@pytest.fixture
def account():
    with LocalEngine(MarketScenario.model_validate(MARKET)) as engine:
        yield engine


def offerings(ec2, count=2, hours=24, **ranges):
    return ec2.describe_capacity_block_offerings(
        InstanceType=P5, InstanceCount=count, CapacityDurationHours=hours, **ranges
    )["CapacityBlockOfferings"]


def launch(ec2, block_id, *, market="capacity-block", count=1):
    params = {
        "ImageId": LOCAL_AMI, "InstanceType": P5, "MinCount": count, "MaxCount": count,
        "CapacityReservationSpecification": {"CapacityReservationTarget": {"CapacityReservationId": block_id}},
    }
    if market:
        params["InstanceMarketOptions"] = {"MarketType": market}
    return ec2.run_instances(**params)["Instances"]


def test_offerings_answer_exactly_the_type_count_and_duration_within_the_date_range(account):
    ec2 = account.client("ec2", EAST)
    found = offerings(ec2)
    assert [(o["AvailabilityZone"], o["UpfrontFee"], o["CurrencyCode"]) for o in found] == [
        (f"{EAST}a", "1500.50", "USD"), (f"{EAST}b", "1200.00", "USD"),
    ]
    # Every block ends at 11:30 UTC: it lasts the asked 24 hours plus the minutes to the next 11:30.
    for o in found:
        assert (o["EndDate"].hour, o["EndDate"].minute) == (11, 30)
        lasts = timedelta(hours=o["CapacityBlockDurationHours"], minutes=o["CapacityBlockDurationMinutes"])
        assert o["EndDate"] - o["StartDate"] == lasts and timedelta(hours=24) <= lasts < timedelta(hours=48)
    assert [o["InstanceCount"] for o in offerings(ec2, count=4)] == [4]
    soon = offerings(ec2, EndDateRange=found[0]["EndDate"])
    assert [o["AvailabilityZone"] for o in soon] == [f"{EAST}a"]
    assert error_of(lambda: offerings(ec2, count=3))[0] == "InvalidParameterValue"
    assert error_of(lambda: offerings(ec2, hours=25))[0] == "InvalidParameterValue"
    assert account.client("ec2", "us-west-2").describe_capacity_block_offerings(
        InstanceType=P5, InstanceCount=2, CapacityDurationHours=24
    )["CapacityBlockOfferings"] == []


def test_a_purchase_is_a_tagged_targeted_reservation_and_buying_it_again_is_refused(account):
    ec2 = account.client("ec2", EAST)
    offer = offerings(ec2)[0]
    bought = ec2.purchase_capacity_block(
        CapacityBlockOfferingId=offer["CapacityBlockOfferingId"], InstancePlatform="Linux/UNIX", TagSpecifications=TAGS
    )["CapacityReservation"]
    # The upfront payment is processed first (payment-pending), then the block is scheduled.
    assert bought["ReservationType"] == "capacity-block" and bought["State"] == "payment-pending"
    assert bought["InstanceMatchCriteria"] == "targeted" and bought["AvailableInstanceCount"] == 0
    # EC2 documents no tag filter for DescribeCapacityReservations: a caller reads the tags.
    described = [
        r for r in ec2.describe_capacity_reservations()["CapacityReservations"]
        if {"Key": "gpufill:request-id", "Value": "r1"} in r["Tags"]
    ]
    assert [r["CapacityReservationId"] for r in described] == [bought["CapacityReservationId"]]
    assert described[0]["StartDate"] == offer["StartDate"] and described[0]["EndDate"] == offer["EndDate"]
    # No ClientToken: the same offering is gone, so a repeat is refused rather than bought twice.
    assert error_of(
        lambda: ec2.purchase_capacity_block(CapacityBlockOfferingId=offer["CapacityBlockOfferingId"], InstancePlatform="Linux/UNIX")
    )[0] == "InvalidCapacityBlockOfferingId.NotFound"
    assert offer["CapacityBlockOfferingId"] not in {o["CapacityBlockOfferingId"] for o in offerings(ec2)}
    assert account.market.blocks.purchases == [(EAST, offer["CapacityBlockOfferingId"])]
    account.advance(120)
    [paid] = ec2.describe_capacity_reservations(CapacityReservationIds=[bought["CapacityReservationId"]])["CapacityReservations"]
    assert paid["State"] == "scheduled"


def test_a_failed_payment_leaves_the_block_payment_failed_and_never_usable(account):
    account.faults.payment_failed(after_minutes=10)
    ec2 = account.client("ec2", EAST)
    offer = offerings(ec2)[0]  # starts in 2 hours
    block = ec2.purchase_capacity_block(
        CapacityBlockOfferingId=offer["CapacityBlockOfferingId"], InstancePlatform="Linux/UNIX"
    )["CapacityReservation"]["CapacityReservationId"]

    def state():
        return ec2.describe_capacity_reservations(CapacityReservationIds=[block])["CapacityReservations"][0]["State"]

    account.advance(5 * 60)
    assert state() == "payment-pending"
    account.advance(6 * 60)
    assert state() == "payment-failed"
    account.advance(2 * 3600)  # past its start: still no capacity
    assert state() == "payment-failed" and error_of(lambda: launch(ec2, block))[0] == "InsufficientInstanceCapacity"
    assert account.faults.injected


def test_launches_fit_only_while_the_block_is_active_and_end_thirty_minutes_before_it_does(account):
    ec2 = account.client("ec2", EAST)
    offer = offerings(ec2)[0]  # starts in 2 hours, ends at the 11:30 UTC a day or so later
    block = ec2.purchase_capacity_block(
        CapacityBlockOfferingId=offer["CapacityBlockOfferingId"], InstancePlatform="Linux/UNIX"
    )["CapacityReservation"]["CapacityReservationId"]
    lasts = (offer["EndDate"] - offer["StartDate"]).total_seconds()
    assert error_of(lambda: launch(ec2, block))[0] == "InsufficientInstanceCapacity"  # scheduled, not active yet
    account.advance(2 * 3600 + 60)
    # Launched into only as a Capacity Block: an On-Demand launch or an ODCR fleet naming it is refused.
    assert error_of(lambda: launch(ec2, block, market=None))[0] == "InvalidParameterValue"
    assert error_of(lambda: ec2.create_fleet(
        Type="instant",
        LaunchTemplateConfigs=[{"LaunchTemplateSpecification": {"LaunchTemplateId": "lt-0123456789abcdef0", "Version": "1"}}],
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "reserved-capacity"},
        ReservedCapacityOptions={"ReservationTypes": ["on-demand-capacity-reservation"],
                                 "CapacityReservationTarget": {"CapacityReservationIds": [block]}},
    ))[0] == "InvalidParameterValue"
    instances = launch(ec2, block, count=2)
    assert {i["CapacityReservationId"] for i in instances} == {block}
    assert error_of(lambda: launch(ec2, block))[0] == "InsufficientInstanceCapacity"  # full
    account.advance(lasts - 60 - 29 * 60)  # 29 minutes before the end: EC2 has ended them
    ids = [i["InstanceId"] for i in instances]
    error_of(lambda: ec2.describe_instances(InstanceIds=ids))  # new instances are not described at once
    states = {i["State"]["Name"] for r in ec2.describe_instances(InstanceIds=ids)["Reservations"] for i in r["Instances"]}
    assert states <= {"shutting-down", "terminated"}
    account.advance(3600)
    [described] = ec2.describe_capacity_reservations(CapacityReservationIds=[block])["CapacityReservations"]
    assert described["State"] == "expired" and described["AvailableInstanceCount"] == 0


def test_a_capacity_block_launch_must_name_a_block(account):
    ec2 = account.client("ec2", EAST)
    params = {"ImageId": LOCAL_AMI, "InstanceType": P5, "MinCount": 1, "MaxCount": 1,
              "InstanceMarketOptions": {"MarketType": "capacity-block"}}
    assert error_of(lambda: ec2.run_instances(**params))[0] == "InvalidParameterCombination"
