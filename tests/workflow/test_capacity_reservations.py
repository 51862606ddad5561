"""On-Demand Capacity Reservations used first (capacity_reservations), end to end on the local engine."""

import boto3

from gpufill.local.reservations import SLOT_RELEASE_SECONDS

from tests.support import zone
from tests.support import tried

RESERVED = "cr-0a1b2c3d4e5f60718"
TARGETED = "cr-0fedcba9876543210"


def market(*reservations, spot=4, on_demand=4):
    return {
        "regions": {
            "us-west-2": {"zones": {"us-west-2a": zone(0.40, spot=spot, on_demand=on_demand), "us-west-2b": zone(0.45, spot=spot, on_demand=on_demand)}},
        },
        "capacity_reservations": list(reservations),
    }


def reservation(count=2, *, id=RESERVED, zone_name="us-west-2b", match="open", **more):
    return {"id": id, "zone": zone_name, "type": "g6.xlarge", "count": count, "match": match, **more}


def request(**fields):
    return {"regions": ["us-west-2"], "scoring": "classic", **fields}


def records(engine):
    table = boto3.resource("dynamodb", region_name="us-east-1").Table("GpuProvisioningInstances-local")
    return {item["instance_id"]: item for item in table.scan()["Items"] if "kind" not in item}


def test_a_reservation_with_room_is_used_before_spot(local_account):
    with local_account(market(reservation(2))) as engine:
        execution = engine.run(request(count=3, launch_mode="partial"), name="reserved-first")
        kept = records(engine)
    result = execution.output
    assert result["status"] == "FULFILLED"
    reserved = [i for i in result["instances"] if i.get("capacity_reservation_id") == RESERVED]
    assert len(reserved) == 2 and all(i["market"] == "on-demand" and i["availability_zone"] == "us-west-2b" for i in reserved)
    assert [i["market"] for i in result["instances"] if not i.get("capacity_reservation_id")] == ["spot"]
    assert tried(execution)[0] == ("us-west-2b", 2, 2, "launched")
    assert sorted(k for k, r in kept.items() if r.get("capacity_reservation_id") == RESERVED) == sorted(i["instance_id"] for i in reserved)


def test_a_fleet_launches_into_the_reservation_alone_then_spot_fills_the_rest(local_account):
    sent = []
    with local_account(market(reservation(2))) as engine:
        from gpufill.adapters import aws

        aws.client("ec2", "us-west-2").meta.events.register(
            "provide-client-params.ec2.CreateFleet", lambda params, **_: sent.append(dict(params))
        )
        execution = engine.run(request(count=4), name="reserved-fleet")
        kept = records(engine)
    result = execution.output
    assert result["status"] == "FULFILLED" and result["launched"] == 4
    reserved = [i for i in result["instances"] if i.get("capacity_reservation_id") == RESERVED]
    assert len(reserved) == 2 and {i["market"] for i in reserved} == {"on-demand"}
    assert sorted(i["market"] for i in result["instances"] if not i.get("capacity_reservation_id")) == ["spot", "spot"]
    # The first fleet is the reservation's: reserved capacity naming it, for what it has room for.
    first = sent[0]
    assert first["TargetCapacitySpecification"] == {"TotalTargetCapacity": 2, "DefaultTargetCapacityType": "reserved-capacity"}
    assert first["ReservedCapacityOptions"]["CapacityReservationTarget"] == {"CapacityReservationIds": [RESERVED]}
    assert sent[1]["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "spot"
    assert {kept[i["instance_id"]].get("capacity_reservation_id") for i in reserved} == {RESERVED}


def test_none_leaves_reservations_alone_even_open_ones(local_account):
    with local_account(market(reservation(4), spot=0, on_demand=0)) as engine:
        execution = engine.run(request(count=2, market="on-demand", capacity_reservations="none", launch_mode="partial"), name="no-reservations")
        calls = execution.metrics["ec2_calls"]
    assert execution.error == "ALL_ON_DEMAND_FAILED"
    assert not calls.get("DescribeCapacityReservations")
    # The open reservation would have taken an On-Demand launch that did not opt out.
    assert {a["outcome"] for a in execution.cause["attempts"]} == {"capacity"}


def test_an_open_reservation_takes_a_plain_on_demand_launch_that_does_not_opt_out(local_account):
    # A reservation of another deployment is not planned, but EC2 still fills it from a matching launch.
    with local_account(market(reservation(1, for_deployment=False), spot=0, on_demand=0)) as engine:
        execution = engine.run(request(count=1, market="on-demand", launch_mode="partial"), name="open-match")
    [instance] = execution.output["instances"]
    assert instance["capacity_reservation_id"] == RESERVED


def test_only_with_no_room_ends_naming_what_it_found(local_account):
    full = reservation(1)
    with local_account(market(full, spot=4, on_demand=4)) as engine:
        first = engine.run(request(count=1, capacity_reservations="only", launch_mode="partial"), name="takes-the-room")
        second = engine.run(request(count=1, capacity_reservations="only", launch_mode="partial"), name="finds-none")
        calls = second.metrics["ec2_calls"]
    assert first.output["instances"][0]["capacity_reservation_id"] == RESERVED
    assert second.error == "NO_RESERVATION_ROOM"
    cause = second.cause
    assert cause["launched"] == 0
    [found] = cause["reservations_found"]
    assert found["capacity_reservation_id"] == RESERVED and found["available"] == 0 and "no room" in found["why_not"]
    # Spot and On-Demand had room, but "only" never goes there.
    assert not calls.get("RunInstances") and not calls.get("CreateFleet")


def test_only_with_no_reservation_at_all_says_so(local_account):
    with local_account(market()) as engine:
        execution = engine.run(request(count=2, capacity_reservations="only"), name="none-held")
    assert execution.error == "NO_RESERVATION_ROOM"
    assert "No On-Demand Capacity Reservation of this deployment" in execution.cause["message"]
    assert execution.cause["reservations_found"] == []


def test_a_targeted_reservation_named_in_the_request_is_used_and_an_unnamed_one_is_not(local_account):
    targeted = reservation(2, id=TARGETED, match="targeted", for_deployment=False, zone_name="us-west-2a")
    with local_account(market(targeted, spot=0, on_demand=0)) as engine:
        unnamed = engine.run(request(count=1, market="on-demand", launch_mode="partial"), name="unnamed")
        named = engine.run(
            request(count=2, market="on-demand", capacity_reservation_ids=[TARGETED], launch_mode="partial"), name="named"
        )
        kept = records(engine)
    assert unnamed.error == "ALL_ON_DEMAND_FAILED"
    assert named.output["status"] == "FULFILLED"
    assert {i["capacity_reservation_id"] for i in named.output["instances"]} == {TARGETED}
    assert {kept[i["instance_id"]]["capacity_reservation_id"] for i in named.output["instances"]} == {TARGETED}


def test_a_reservation_gets_its_room_back_when_its_instance_ends(local_account):
    with local_account(market(reservation(1), spot=0, on_demand=0)) as engine:
        first = engine.run(request(count=1, capacity_reservations="only", launch_mode="partial"), name="first-in")
        ec2 = boto3.client("ec2", region_name="us-west-2")
        ec2.terminate_instances(InstanceIds=[first.output["instances"][0]["instance_id"]])
        engine.advance(SLOT_RELEASE_SECONDS)  # EC2 cleans the instance up before its slot is back
        again = engine.run(request(count=1, capacity_reservations="only", launch_mode="partial"), name="second-in")
    assert again.output["instances"][0]["capacity_reservation_id"] == RESERVED


def test_a_request_naming_a_malformed_reservation_id_is_refused_naming_the_field(simulate):
    execution = simulate(request(capacity_reservation_ids=["cr-123"]), market())
    assert execution.error == "InvalidRequest"
    assert "capacity_reservation_ids" in str(execution.cause)


def test_a_plan_lists_the_reservations_found_and_puts_theirs_first(local_account):
    with local_account(market(reservation(2), reservation(1, id=TARGETED, match="targeted", for_deployment=False))) as engine:
        execution = engine.run(request(action="plan", count=3), name="reserved-plan")
    plan = execution.output
    first = plan["pools"][0]
    assert (first["capacity_reservation_id"], first["market"], first["reserved"]) == (RESERVED, "on-demand", 2)
    assert all(not p.get("capacity_reservation_id") for p in plan["pools"][1:])
    seen = {r["capacity_reservation_id"]: r for r in plan["reservations"]}
    assert seen[RESERVED]["planned"] == 2
    assert seen[TARGETED]["planned"] == 0 and "neither tagged" in seen[TARGETED]["why_not"]
