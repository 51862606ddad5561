"""On-Demand Capacity Reservations used first (capacity_reservations), end to end on the local engine."""

import boto3

from tests.conftest import zone
from tests.workflow.conftest import tried

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
