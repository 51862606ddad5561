"""StartRefill's own work (handlers/start_refill.py): an EC2 event about an instance of a request
with `maintain` that EC2 reclaimed starts one refill run, after the pool is remembered full and
the old record says what happened and which run replaces it; every other event starts nothing
and says why, without asking AWS more than it needs. AWS is replaced by recorders."""

import logging
from datetime import UTC, datetime

import pytest

from gpufill.adapters import capacity_cache, clock, executions, instances_table, managed_instances, run_store
from gpufill.handlers import start_refill
from gpufill.handlers.observability import metrics
from gpufill.models.request import Request, normalise

OLD = "i-0123456789abcdef0"
NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)
RECORD = {"instance_id": OLD, "request_id": "serve", "region": "eu-west-1", "availability_zone": "eu-west-1a",
          "instance_type": "g6.xlarge", "market": "spot", "maintain": True, "state": "running"}
STORED = normalise(Request(instance_types=["g6.xlarge"], count=2, maintain=True, regions=["eu-west-1"]),
                   request_id="serve", default_regions=[], home_region="us-east-1").model_dump(mode="json", exclude_none=True)


class Context:
    function_name = "StartRefill"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:StartRefill"
    memory_limit_in_mb = 256
    aws_request_id = "req"
    log_group_name = "/aws/lambda/StartRefill"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def warning(action: str = "terminate") -> dict:
    return {"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning", "region": "eu-west-1",
            "detail": {"instance-id": OLD, "instance-action": action}}


def state_change(state: str = "terminated") -> dict:
    return {"source": "aws.ec2", "detail-type": "EC2 Instance State-change Notification", "region": "eu-west-1",
            "detail": {"instance-id": OLD, "state": state}}


@pytest.fixture
def aws(monkeypatch):
    """What the table and EC2 hold, and what the handler asked for, in order."""
    done: list[tuple] = []
    held = {"records": {OLD: dict(RECORD)}, "request": STORED, "stopped_by": None, "siblings": {}, "reason": None}
    monkeypatch.setattr(clock, "now", lambda: NOW)
    monkeypatch.setattr(instances_table, "records_by_ids", lambda ids: done.append(("records", ids)) or {
        i: held["records"][i] for i in ids if i in held["records"]})
    monkeypatch.setattr(run_store, "load_request", lambda rid: done.append(("request", rid)) or held["request"])
    monkeypatch.setattr(run_store, "maintenance_stopped_by", lambda rid: done.append(("stopped?", rid)) or held["stopped_by"])
    monkeypatch.setattr(instances_table, "request_holdings", lambda rid: done.append(("siblings", rid)) or instances_table.Holdings(
        records=held["siblings"]))
    monkeypatch.setattr(managed_instances, "state_reason", lambda region, iid: done.append(("reason", region, iid)) or held["reason"])
    monkeypatch.setattr(capacity_cache, "remember_full", lambda key, **kw: done.append(("full", key, kw)))
    monkeypatch.setattr(instances_table, "mark_interrupted", lambda iid, **kw: done.append(("interrupted", iid, kw)))
    monkeypatch.setattr(instances_table, "mark_refill_held", lambda iid, **kw: done.append(("held", iid, kw)))
    monkeypatch.setattr(executions, "start", lambda name, given: done.append(("start", name, given)) or f"arn:exec:{name}")
    monkeypatch.setattr(metrics, "add_metric", lambda name, unit, value: done.append(("metric", name, unit, value)))
    return done, held


def test_a_reclaim_warning_remembers_the_pool_marks_the_record_and_starts_one_refill(aws, caplog):
    done, held = aws
    caplog.set_level(logging.INFO)
    out = start_refill.handler(warning(), Context())
    name = f"serve-refill-{OLD}"
    pool = "spot/eu-west-1/eu-west-1a/g6.xlarge"
    assert done[:4] == [("records", [OLD]), ("request", "serve"), ("stopped?", "serve"), ("siblings", "serve")]
    assert done[4:6] == [("full", pool, {"request_id": "serve", "reason": "reclaimed"}),
                         ("interrupted", OLD, {"interruption": "spot interruption warning", "refill_run": name, "at": NOW})]
    (_, started, given), metric = done[6:]
    assert started == name and metric == ("metric", "RefillsStarted", "Count", 1)
    assert (given["count"], given["refill"]["replaces"], given["refill"]["request_id"]) == (1, [OLD], "serve")
    assert out == {"refill": True, "reason": "reclaimed", "execution_name": name, "reclaimed_pool": pool,
                   "interruption": "spot interruption warning", "execution_arn": f"arn:exec:{name}",
                   "detail": f"{OLD} of request serve was reclaimed (spot interruption warning); {name} replaces it"}
    # The operator's log says what came in and what was decided, without the whole request again.
    [logged] = [r for r in caplog.records if r.getMessage() == "instance event"]
    assert logged.event == {"kind": "warning", "instance_id": OLD, "region": "eu-west-1", "state": None, "action": "terminate"}
    assert logged.decision["execution_name"] == name and "input" not in logged.decision


def test_an_end_ec2_caused_asks_ec2_why_and_refills_naming_it(aws):
    done, held = aws
    held["reason"] = "Server.SpotInstanceTermination"
    out = start_refill.handler(state_change(), Context())
    assert ("reason", "eu-west-1", OLD) in done
    assert out["refill"] is True and out["interruption"] == "Server.SpotInstanceTermination"


def test_an_event_that_is_not_an_interruption_is_answered_without_asking_anything(aws):
    done, _ = aws
    out = start_refill.handler({"source": "aws.ec2", "detail-type": "EC2 Instance Rebalance Recommendation",
                                "region": "eu-west-1", "detail": {"instance-id": OLD}}, Context())
    assert out == {"refill": False, "reason": "not-an-interruption",
                   "detail": "'EC2 Instance Rebalance Recommendation' is not handled"}
    assert done == []


def test_an_instance_of_a_request_without_maintain_is_ignored_without_loading_the_request(aws):
    done, held = aws
    held["records"][OLD]["maintain"] = False
    out = start_refill.handler(state_change(), Context())
    assert done == [("records", [OLD]), ("metric", "InterruptionsIgnored", "Count", 1)]
    assert out == {"refill": False, "reason": "no-maintain", "detail": "request serve did not ask for maintain"}


def test_an_instance_gpufill_holds_no_record_of_is_not_ours(aws):
    done, held = aws
    held["records"] = {}
    out = start_refill.handler(warning(), Context())
    assert done == [("records", [OLD]), ("metric", "InterruptionsIgnored", "Count", 1)]
    assert out["reason"] == "not-ours"
    held["records"] = {OLD: {**RECORD, "request_id": ""}}
    assert start_refill.handler(warning(), Context())["reason"] == "not-ours"


def test_a_request_no_longer_kept_is_not_asked_about_further(aws):
    done, held = aws
    held["request"] = None
    out = start_refill.handler(state_change(), Context())
    assert done == [("records", [OLD]), ("request", "serve"), ("metric", "InterruptionsIgnored", "Count", 1)]
    assert out["reason"] == "request-unknown"


def test_a_teardown_of_the_request_stops_the_refill(aws):
    done, held = aws
    held["stopped_by"] = "serve-teardown"
    out = start_refill.handler(warning(), Context())
    assert out["reason"] == "torn-down" and "serve-teardown" in out["detail"]
    assert not [d for d in done if d[0] in ("full", "interrupted", "start")]
    # The reclaim is recorded as held by that teardown, which starts the refill if it is rejected.
    assert ("held", OLD, {"interruption": "spot interruption warning", "held_by": "serve-teardown", "at": NOW}) in done
    assert out["held_by"] == "serve-teardown"


def test_a_sibling_ended_by_a_teardown_stops_the_refill(aws):
    done, held = aws
    held["siblings"] = {"i-2": {"instance_id": "i-2", "terminated_by": "td-3"}}
    out = start_refill.handler(warning(), Context())
    assert out["reason"] == "torn-down" and "td-3" in out["detail"]
    assert not [d for d in done if d[0] == "held"]  # an approved teardown holds nothing back


def test_an_instance_ended_through_the_api_is_not_refilled(aws):
    done, held = aws
    held["reason"] = "Client.UserInitiatedShutdown"
    out = start_refill.handler(state_change(), Context())
    assert out["reason"] == "user-initiated" and not [d for d in done if d[0] == "start"]


def test_a_reclaim_held_by_a_teardown_answers_without_the_refill_it_would_have_started(aws):
    _, held = aws
    held["stopped_by"] = "serve-teardown"
    out = start_refill.handler(warning(), Context())
    # The refill it holds back is decided in full, but neither its input nor its run is in the answer.
    assert out == {"refill": False, "reason": "torn-down", "held_by": "serve-teardown",
                   "interruption": "spot interruption warning",
                   "detail": "request serve was torn down (serve-teardown): a teardown stops its maintenance"}
