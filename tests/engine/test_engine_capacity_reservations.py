"""On-Demand Capacity Reservations in the simulated EC2 answer as EC2's do: described with their
room, open ones filled by any matching On-Demand launch, targeted ones only by launches naming
them, room back when an instance ends (its own simulated account)."""

import pytest

from gpufill.local.deploy.images import LOCAL_AMI
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from gpufill.local.reservations import SLOT_RELEASE_SECONDS
from tests.engine.test_engine_fleet import fleet, overrides, template
from tests.engine.test_engine_market import error_of

WEST = "us-west-2"
OPEN = "cr-00000000000000001"
TARGETED = "cr-00000000000000002"
ELSEWHERE = "cr-00000000000000003"
MARKET = {
    "regions": {
        WEST: {
            "zones": {
                f"{WEST}a": {"g6.xlarge": {"spot": 0, "on_demand": 0}, "g5.xlarge": {"spot": 0, "on_demand": 5}},
                f"{WEST}b": {"g6.xlarge": {"spot": 0, "on_demand": 0}},
            }
        },
        "us-east-1": {"zones": {"us-east-1a": {"g6.xlarge": {"spot": 0, "on_demand": 0}}}},
    },
    "capacity_reservations": [
        {"id": OPEN, "zone": f"{WEST}a", "type": "g6.xlarge", "count": 2, "match": "open"},
        {"id": TARGETED, "zone": f"{WEST}b", "type": "g6.xlarge", "count": 3, "match": "targeted", "for_deployment": False,
         "tags": {"team": "ml"}},
        {"id": ELSEWHERE, "zone": "us-east-1a", "type": "g6.xlarge", "count": 1},
    ],
}


@pytest.fixture(scope="module")
def engine():
    with LocalEngine(MarketScenario.model_validate(MARKET)) as account:
        yield account


def run(engine, *, zone="a", itype="g6.xlarge", low=1, high=1, spec=None, spot=False):
    params = {"ImageId": LOCAL_AMI, "InstanceType": itype, "MinCount": low, "MaxCount": high,
              "Placement": {"AvailabilityZone": f"{WEST}{zone}"}}
    if spec:
        params["CapacityReservationSpecification"] = spec
    if spot:
        params["InstanceMarketOptions"] = {"MarketType": "spot"}
    return engine.client("ec2", WEST).run_instances(**params)["Instances"]


def available(engine, reservation_id, region=WEST) -> int:
    reply = engine.client("ec2", region).describe_capacity_reservations(CapacityReservationIds=[reservation_id])
    return reply["CapacityReservations"][0]["AvailableInstanceCount"]


def end(engine, instances) -> None:
    """Terminate, and let EC2's clean-up pass: the slots are back for the next test."""
    engine.client("ec2", WEST).terminate_instances(InstanceIds=[i["InstanceId"] for i in instances])
    engine.advance(SLOT_RELEASE_SECONDS)


def target(reservation_id):
    return {"CapacityReservationTarget": {"CapacityReservationId": reservation_id}}


def test_describe_answers_per_region_with_filters_and_the_deployment_tag(engine):
    ec2 = engine.client("ec2", WEST)
    found = ec2.describe_capacity_reservations(Filters=[{"Name": "state", "Values": ["active"]}])["CapacityReservations"]
    assert sorted(r["CapacityReservationId"] for r in found) == [OPEN, TARGETED]
    by_id = {r["CapacityReservationId"]: r for r in found}
    assert by_id[OPEN]["InstanceMatchCriteria"] == "open" and by_id[OPEN]["TotalInstanceCount"] == 2
    assert {"Key": "gpufill:deployment", "Value": "local"} in by_id[OPEN]["Tags"]
    assert not any(t["Key"] == "gpufill:deployment" for t in by_id[TARGETED]["Tags"])
    assert ec2.describe_capacity_reservations(Filters=[{"Name": "instance-type", "Values": ["g5.xlarge"]}])["CapacityReservations"] == []
    assert error_of(lambda: ec2.describe_capacity_reservations(CapacityReservationIds=[ELSEWHERE]))[0] == (
        "InvalidCapacityReservationId.NotFound"
    )
    assert error_of(lambda: ec2.describe_capacity_reservations(Filters=[{"Name": "flavour", "Values": ["x"]}]))[0] == (
        "InvalidParameterValue"
    )


def test_an_open_reservation_takes_a_matching_on_demand_launch_and_gives_the_room_back_at_its_end(engine):
    [instance] = run(engine, zone="a")
    assert instance["CapacityReservationId"] == OPEN and available(engine, OPEN) == 1
    # The zone itself has no On-Demand capacity: beyond the reservation's room nothing launches.
    assert error_of(lambda: run(engine, zone="a", low=2, high=2))[0] == "InsufficientInstanceCapacity"
    # The slot comes back only once EC2 has cleaned the instance up, minutes after the terminate.
    engine.client("ec2", WEST).terminate_instances(InstanceIds=[instance["InstanceId"]])
    engine.advance(SLOT_RELEASE_SECONDS - 1)
    assert available(engine, OPEN) == 1
    assert error_of(lambda: run(engine, zone="a", low=2, high=2))[0] == "InsufficientInstanceCapacity"
    engine.advance(1)
    assert available(engine, OPEN) == 2


def test_spot_and_a_launch_that_opts_out_never_run_in_a_reservation(engine):
    assert error_of(lambda: run(engine, zone="a", spot=True))[0] == "InsufficientInstanceCapacity"
    assert error_of(lambda: run(engine, zone="a", spec={"CapacityReservationPreference": "none"}))[0] == (
        "InsufficientInstanceCapacity"
    )
    assert available(engine, OPEN) == 2


def test_a_targeted_reservation_takes_only_launches_that_name_it(engine):
    assert error_of(lambda: run(engine, zone="b"))[0] == "InsufficientInstanceCapacity"
    launched = run(engine, zone="b", low=1, high=5, spec=target(TARGETED))
    assert len(launched) == 3 and {i["CapacityReservationId"] for i in launched} == {TARGETED}
    code, message = error_of(lambda: run(engine, zone="b", spec=target(TARGETED)))
    assert code == "ReservationCapacityExceeded" and TARGETED in message
    end(engine, launched)
    assert available(engine, TARGETED) == 3


def test_a_launch_naming_a_reservation_it_does_not_fit_is_refused(engine):
    assert error_of(lambda: run(engine, zone="a", spec=target("cr-0000000000000000f")))[0] == (
        "InvalidCapacityReservationId.NotFound"
    )
    assert error_of(lambda: run(engine, zone="b", spec=target(ELSEWHERE)))[0] == "InvalidCapacityReservationId.NotFound"
    assert error_of(lambda: run(engine, zone="a", itype="g5.xlarge", spec=target(OPEN)))[0] == "InvalidParameterCombination"
    # MinCount above the room: nothing launches, the reservation keeps its room.
    assert error_of(lambda: run(engine, zone="a", low=3, high=3, spec=target(OPEN)))[0] == "ReservationCapacityExceeded"
    assert available(engine, OPEN) == 2


def test_a_reserved_capacity_fleet_launches_into_the_named_reservation_and_nowhere_else(engine):
    lt = template(engine, WEST, "reserved")
    ec2 = engine.client("ec2", WEST)
    answer = ec2.create_fleet(
        Type="instant",
        LaunchTemplateConfigs=[
            {"LaunchTemplateSpecification": {"LaunchTemplateId": lt[0], "Version": lt[1]},
             "Overrides": overrides(engine, WEST, "g6.xlarge", "b")}
        ],
        TargetCapacitySpecification={"TotalTargetCapacity": 5, "DefaultTargetCapacityType": "reserved-capacity"},
        ReservedCapacityOptions={
            "ReservationTypes": ["on-demand-capacity-reservation"],
            "CapacityReservationTarget": {"CapacityReservationIds": [TARGETED]},
        },
    )
    ids = [i for entry in answer["Instances"] for i in entry["InstanceIds"]]
    assert len(ids) == 3 and available(engine, TARGETED) == 0
    error_of(lambda: ec2.describe_instances(InstanceIds=ids))  # new instances are not described at once
    described = ec2.describe_instances(InstanceIds=ids)["Reservations"]
    assert {i["CapacityReservationId"] for r in described for i in r["Instances"]} == {TARGETED}
    again = ec2.create_fleet(
        Type="instant",
        LaunchTemplateConfigs=[
            {"LaunchTemplateSpecification": {"LaunchTemplateId": lt[0], "Version": lt[1]},
             "Overrides": overrides(engine, WEST, "g6.xlarge", "b")}
        ],
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "reserved-capacity"},
        ReservedCapacityOptions={"CapacityReservationTarget": {"CapacityReservationIds": [TARGETED]}},
    )
    assert again["Instances"] == [] and [e["ErrorCode"] for e in again["Errors"]] == ["ReservationCapacityExceeded"]
    ec2.terminate_instances(InstanceIds=ids)
    engine.advance(SLOT_RELEASE_SECONDS)


def test_an_on_demand_fleet_fills_a_matching_open_reservation_first(engine):
    lt = template(engine, WEST, "open-fleet")
    answer = fleet(engine, WEST, lt, overrides(engine, WEST, "g6.xlarge", "a"), target=3, market="on-demand")
    ids = [i for entry in answer["Instances"] for i in entry["InstanceIds"]]
    # The zone has no On-Demand capacity of its own: the open reservation's 2 is all the fleet gets.
    assert len(ids) == 2 and available(engine, OPEN) == 0
    assert [e["ErrorCode"] for e in answer["Errors"]] == ["InsufficientInstanceCapacity"]
    engine.client("ec2", WEST).terminate_instances(InstanceIds=ids)
    engine.advance(SLOT_RELEASE_SECONDS)
