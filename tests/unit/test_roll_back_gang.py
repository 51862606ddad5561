"""RollBackGang's own work (handlers/roll_back_gang.py): every instance the run holds and every
record of the request not ended yet terminated, region by region, and recorded rolled back under
the request; a same-az gang's empty cluster groups removed; the gang resumed in the next untried
place, or the run ended GANG_NOT_PLACED naming what was rolled back. A terminate whose reply was
lost counts as done only when EC2 shows every instance ending. AWS is replaced by recorders."""

import json
import logging
from datetime import UTC, datetime

import pytest
from botocore.exceptions import ClientError

from gpufill.adapters import clock, instances_table, managed_instances, placement_groups, run_store
from gpufill.adapters.aws import TransientAwsError
from gpufill.handlers import roll_back_gang
from gpufill.handlers.observability import metrics
from gpufill.models.request import Request, normalise
from gpufill.models.run import Attempt, Gang, Instance, Plan, PlanRef, Pool, Run
from gpufill.models.teardown import LiveInstance

WEST, EAST = "us-west-2", "us-east-1"
NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)
A = Pool(region=WEST, availability_zone="us-west-2a", instance_type="g6.12xlarge", market="spot", price=2.0)
B = Pool(region=WEST, availability_zone="us-west-2b", instance_type="g6.12xlarge", market="spot", price=2.1)
C = Pool(region=EAST, availability_zone="us-east-1a", instance_type="g6.12xlarge", market="spot", price=2.2)


class Context:
    function_name = "RollBackGang"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:RollBackGang"
    memory_limit_in_mb = 256
    aws_request_id = "req"
    log_group_name = "/aws/lambda/RollBackGang"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def request(**fields):
    return normalise(Request(**{"count": 2, "regions": [WEST, EAST], "instance_types": ["g6.12xlarge"],
                                "all_or_nothing": True, "placement": "same-region", **fields}),
                     request_id="req-1", default_regions=[WEST], home_region=EAST)


def held(iid: str, pool: Pool = A) -> Instance:
    return Instance(instance_id=iid, region=pool.region, availability_zone=pool.availability_zone,
                    instance_type=pool.instance_type, market="spot", hourly_price=pool.price, state="running")


def gang_run(*instances: Instance, next_move: str = "rollback", **fields) -> Run:
    return Run(batch=2, remaining=2 - len(instances), launched=len(instances), next=next_move, cursor=1, attempts_total=4,
               instances=list(instances), hourly_cost=2.0 * len(instances),
               gang=Gang(anchor=WEST, market="spot", resume=1), **fields)


def event(req, run: Run, plan: bool = True) -> dict:
    found = {"request": req.model_dump(mode="json"), "run": run.model_dump(mode="json", exclude_none=True)}
    if plan:
        found["plan"] = PlanRef(request_id="req-1", market="spot", key="plan#req-1#k", pools=3).model_dump(mode="json")
    return found


@pytest.fixture
def aws(monkeypatch):
    """The table's records of the request, and what the handler asked AWS for, in order."""
    done: list[tuple] = []
    records: dict[str, dict] = {}
    monkeypatch.setenv("GPUFILL_DEPLOYMENT", "prod")
    monkeypatch.setattr(clock, "now", lambda: NOW)
    monkeypatch.setattr(instances_table, "request_holdings",
                        lambda request_id: done.append(("holdings", request_id)) or instances_table.Holdings(records=records))
    monkeypatch.setattr(managed_instances, "terminate", lambda region, ids: done.append(("terminate", region, ids)) or {})
    monkeypatch.setattr(instances_table, "mark_rolled_back", lambda iid, **kw: done.append(("rolled_back", iid, kw)))
    monkeypatch.setattr(placement_groups, "remove_empty", lambda region, deployment, ids: done.append(("groups", region, deployment, ids)))
    monkeypatch.setattr(run_store, "load_plan", lambda key: done.append(("plan", key)) or Plan(
        request_id="req-1", market="spot", pools=[A, B, C]))
    monkeypatch.setattr(run_store, "load_attempts", lambda request_id, total: done.append(("attempts", request_id, total)) or [
        Attempt(number=1, region=WEST, availability_zone="us-west-2a", instance_type="g6.12xlarge", market="spot",
                batch=2, launched=1, outcome="capacity", reason="InsufficientInstanceCapacity")])
    monkeypatch.setattr(metrics, "add_metric", lambda name, unit, value: done.append(("metric", name, unit, value)))
    return done, records


def test_everything_held_or_recorded_unended_is_terminated_by_region_and_recorded_rolled_back(aws):
    done, records = aws
    records.update({
        "i-rec": {"region": EAST, "state": "pending"},           # launched, its record written, not in the state
        "i-gone": {"region": WEST, "state": "terminated"},       # ended before: not terminated again
        "i-nowhere": {"state": "pending"},                       # no region: nothing can be asked of it
        "i-b": {"region": WEST, "state": "running"},             # held too: terminated once
    })
    out = roll_back_gang.handler(event(request(), gang_run(held("i-b"), held("i-a"))), Context())
    by = {"terminated_at": NOW, "reason": f"all_or_nothing: the gang could not complete in {WEST}; started again elsewhere"}
    assert done[:8] == [
        ("holdings", "req-1"),
        ("terminate", WEST, ["i-a", "i-b"]),
        ("rolled_back", "i-a", {"region": WEST, "request_id": "req-1", **by}),
        ("rolled_back", "i-b", {"region": WEST, "request_id": "req-1", **by}),
        ("terminate", EAST, ["i-rec"]),
        ("rolled_back", "i-rec", {"region": EAST, "request_id": "req-1", **by}),
        ("metric", "InstancesRolledBack", "Count", 3),
        ("plan", "plan#req-1#k"),
    ]
    assert len(done) == 8  # a same-region gang has no cluster group to remove; it goes on, so no cause
    assert (out["instances"], out["launched"], out["remaining"], out["hourly_cost"]) == ([], 0, 2, 0.0)
    assert out["gang"]["rolled_back"] == 3 and out["gang"]["excluded"] == [f"spot:{WEST}"]
    assert (out["next"], out["cursor"]) == ("prepare", 2) and "cause" not in out


def test_the_operator_log_names_every_instance_rolled_back_and_where_the_gang_goes_next(aws, caplog):
    caplog.set_level(logging.INFO)
    roll_back_gang.handler(event(request(), gang_run(held("i-b"), held("i-a"))), Context())
    [logged] = [r for r in caplog.records if r.getMessage() == "gang rolled back"]
    assert (logged.instances, logged.next) == (["i-a", "i-b"], "prepare")


def test_a_rollback_whose_record_write_is_throttled_is_retried_saying_what_failed(aws, monkeypatch):
    from aws_fakes import client_error

    def throttled(iid, **kw):
        raise client_error("ProvisionedThroughputExceededException", operation="UpdateItem")

    monkeypatch.setattr(instances_table, "mark_rolled_back", throttled)
    with pytest.raises(TransientAwsError, match="^recording the rollback: "):
        roll_back_gang.handler(event(request(), gang_run(held("i-a"))), Context())


def test_a_same_az_gangs_empty_cluster_groups_are_removed_in_each_region_it_used(aws):
    done, records = aws
    records["i-e"] = {"instance_id": "i-e", "region": EAST, "state": "running"}
    roll_back_gang.handler(event(request(placement="same-az"), gang_run(held("i-a"))), Context())
    assert [d for d in done if d[0] == "groups"] == [("groups", WEST, "prod", {"req-1"}), ("groups", EAST, "prod", {"req-1"})]


def test_an_incomplete_end_of_the_fill_ends_the_run_gang_not_placed_naming_what_was_rolled_back(aws, monkeypatch):
    done, records = aws
    records.update({"i-a": {"instance_id": "i-a", "region": WEST, "state": "running"},
                    "i-old": {"instance_id": "i-old", "region": WEST, "state": "terminated", "rolled_back": True}})

    def rolled_after(request_id):
        done.append(("holdings", request_id))
        return instances_table.Holdings(records={**records, "i-a": {"instance_id": "i-a", "region": WEST, "state": "terminated", "rolled_back": True}})

    out = roll_back_gang.handler(event(request(), gang_run(held("i-a"), next_move="exhausted")), Context())
    assert out["next"] == "not_placed"
    assert ("attempts", "req-1", 4) in done
    cause = json.loads(out["cause"])
    assert cause["error"] == "GANG_NOT_PLACED" and cause["request_id"] == "req-1"
    assert cause["places_tried"] == [f"spot:{WEST}"]  # the place just rolled back is named tried
    assert "1 instance(s) this run launched were terminated" in cause["message"]
    # The second look at the table is what counts: an instance rolled back just now is named.
    records["i-a"] = {"instance_id": "i-a", "region": WEST, "state": "running"}
    done.clear()
    monkeypatch.setattr(instances_table, "request_holdings", rolled_after)
    out = roll_back_gang.handler(event(request(), gang_run(held("i-a"), next_move="exhausted")), Context())
    assert [d for d in done if d[0] == "holdings"] == [("holdings", "req-1"), ("holdings", "req-1")]
    assert "2 instance(s) this run launched were terminated" in json.loads(out["cause"])["message"]


def test_a_gang_without_a_plan_resumes_nowhere(aws):
    done, _ = aws
    out = roll_back_gang.handler(event(request(), gang_run(held("i-a")), plan=False), Context())
    assert ("plan", "plan#req-1#k") not in done
    assert out["next"] == "exhausted"  # no pool left to place it in


def refused(code: str):
    def terminate(region, ids):
        raise ClientError({"Error": {"Code": code, "Message": "no"}}, "TerminateInstances")
    return terminate


def test_a_terminate_whose_reply_was_lost_counts_once_ec2_shows_every_instance_ending(aws, monkeypatch, caplog):
    done, _ = aws
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(managed_instances, "terminate", refused("InternalError"))
    monkeypatch.setattr(managed_instances, "by_ids", lambda region, ids: done.append(("describe", region, ids)) or {
        "i-a": LiveInstance(instance_id="i-a", region=region, state="shutting-down"),
        "i-b": LiveInstance(instance_id="i-b", region=region, state="terminated")})
    roll_back_gang.handler(event(request(), gang_run(held("i-a"), held("i-b"))), Context())
    assert ("describe", WEST, ["i-a", "i-b"]) in done
    assert [d[1] for d in done if d[0] == "rolled_back"] == ["i-a", "i-b"]
    [logged] = [r for r in caplog.records if r.getMessage() == "rollback settled by describing"]
    assert logged.region == WEST and "InternalError" in logged.error


def test_a_terminate_that_failed_with_an_instance_still_running_is_raised_and_nothing_is_recorded(aws, monkeypatch):
    done, _ = aws
    monkeypatch.setattr(managed_instances, "by_ids", lambda region, ids: {
        "i-a": LiveInstance(instance_id="i-a", region=region, state="shutting-down"),
        "i-b": LiveInstance(instance_id="i-b", region=region, state="running")})
    monkeypatch.setattr(managed_instances, "terminate", refused("UnauthorizedOperation"))
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        roll_back_gang.handler(event(request(), gang_run(held("i-a"), held("i-b"))), Context())

    def lost(region, ids):
        raise TransientAwsError("TerminateInstances timed out")

    monkeypatch.setattr(managed_instances, "terminate", lost)
    with pytest.raises(TransientAwsError, match="timed out"):
        roll_back_gang.handler(event(request(), gang_run(held("i-a"), held("i-b"))), Context())
    assert [d for d in done if d[0] == "rolled_back"] == []


def test_an_instance_ec2_does_not_show_yet_retries_the_step(aws, monkeypatch):
    monkeypatch.setattr(managed_instances, "terminate", refused("InvalidInstanceID.NotFound"))
    monkeypatch.setattr(managed_instances, "by_ids", lambda region, ids: {})
    with pytest.raises(TransientAwsError, match=f"TerminateInstances in {WEST}: not visible yet"):
        roll_back_gang.terminate(WEST, ["i-a"])


def test_nothing_to_terminate_is_not_settled_by_describing():
    from gpufill.policy import gang

    assert not gang.rollback_settled([], {})


def test_a_waiting_run_whose_try_ended_short_hands_everything_back_and_waits_for_the_next_try(aws):
    from gpufill.policy import waiting

    done, _ = aws
    wait = waiting.begin(3600, NOW.timestamp()).model_copy(update={"tries": 3})
    run = gang_run(held("i-a"), next_move="exhausted", wait=wait).model_copy(update={"cursor": 0})
    out = roll_back_gang.handler(event(request(wait_for_capacity={"deadline": "PT1H"}), run), Context())
    reason = "all_or_nothing: try 3 launched 1 of 2 and could not complete; handed back before waiting for capacity"
    assert ("rolled_back", "i-a", {"region": WEST, "request_id": "req-1", "terminated_at": NOW, "reason": reason}) in done
    assert not any(d[0] == "attempts" for d in done)  # no GANG_NOT_PLACED cause: the run goes on waiting
    assert (out["next"], out["instances"], out["launched"], out["remaining"]) == ("await_capacity", [], 0, 2)
    # The next try starts afresh: every place open again, nothing anchored; the count handed back is kept.
    assert out["gang"] == {"resume": 0, "excluded": [], "rolled_back": 1} and out["cursor"] == 0
    assert out["wait"]["tries"] == 3 and "cause" not in out
