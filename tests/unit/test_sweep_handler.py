"""The Sweep handler (handlers/sweep.py): a teardown is asked before the notification that
names it, each finding is notified once, nothing is terminated, and the pass's summary and
gauges are kept. AWS is replaced by recorders."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from gpufill.adapters import approvals, clock, executions, inventory, managed_instances, sweep_store
from gpufill.constants import ENV_STATE_MACHINE_ARN, TAG_DEPLOYMENT, TAG_MANAGED, TAG_REQUEST_ID
from gpufill.handlers import sweep as sweep_handler
from gpufill.handlers.observability import metrics
from gpufill.models.teardown import LiveInstance

NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)
STRAY = LiveInstance(
    instance_id="i-0stray", region="us-west-2", availability_zone="us-west-2a", instance_type="g6.xlarge", state="running",
    tags={TAG_MANAGED: "true", TAG_DEPLOYMENT: "dev", TAG_REQUEST_ID: "by-hand"},
    launch_time=(NOW - timedelta(hours=2)).isoformat(),
)


class Context:
    function_name = "Sweep"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:Sweep"
    memory_limit_in_mb = 512
    aws_request_id = "req"
    log_group_name = "/aws/lambda/Sweep"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


@pytest.fixture
def aws(monkeypatch):
    done: list[tuple] = []
    held = {"notified": {}, "taken": False}
    monkeypatch.setenv(ENV_STATE_MACHINE_ARN, "arn:aws:states:us-east-1:1:stateMachine:gpufill-dev")
    monkeypatch.setattr(clock, "now", lambda: NOW)
    monkeypatch.setattr(sweep_store, "scan", lambda: sweep_store.TableView(notified=dict(held["notified"])))
    monkeypatch.setattr(
        inventory, "gather",
        lambda **kw: inventory.Inventory(records={}, live={STRAY.instance_id: STRAY}, regions=["us-west-2"],
                                         reconciled=[STRAY.instance_id], deployment="dev"),
    )

    def start(name, given):
        done.append(("start", name, given))
        if held["taken"]:
            raise executions.ExecutionNameTaken(name)
        return f"arn:exec:{name}"

    monkeypatch.setattr(executions, "start", start)
    monkeypatch.setattr(executions, "describe", lambda arn, name: done.append(("describe", name)))
    monkeypatch.setattr(approvals, "publish", lambda subject, body: done.append(("publish", subject, body)) or "m-1")
    monkeypatch.setattr(sweep_store, "mark_notified", lambda key, at: done.append(("notified", key)) or held["notified"].update({key: at}))
    monkeypatch.setattr(sweep_store, "save_summary", lambda summary: done.append(("summary", summary)))
    monkeypatch.setattr(managed_instances, "terminate", lambda *a: pytest.fail("the sweep never terminates"))
    monkeypatch.setattr(metrics, "add_metric", lambda name, unit, value: done.append(("metric", name, value)))
    return done, held


def test_an_untracked_instance_gets_its_teardown_asked_then_one_notification(aws):
    done, held = aws
    out = sweep_handler.handler({}, Context())
    kinds = [d[0] for d in done]
    assert kinds[:4] == ["start", "publish", "notified", "summary"]
    (_, name, given), (_, subject, body) = done[0], done[1]
    assert given == {"action": "teardown", "instance_ids": ["i-0stray"], "requested_by": "gpufill sweep (untracked)"}
    assert subject == "gpufill (dev) sweep: untracked" and f"gpufill approve {name}" in body
    assert out["found"]["untracked"] == 1 and out["teardowns_asked"] == [name]
    gauges = {d[1]: d[2] for d in done if d[0] == "metric"}
    assert gauges["UntrackedInstances"] == 1 and gauges["RunningInstances"] == 1 and gauges["HourlyCost"] > 0
    assert gauges["EndingBlockInstances"] == 0

    done.clear()
    sweep_handler.handler({}, Context())  # the next pass: notified already, the same ask again
    assert [d[0] for d in done if d[0] in ("publish", "notified")] == []
    assert [d[1] for d in done if d[0] == "start"] == [name]  # Step Functions answers it as the same start


def test_a_taken_name_is_logged_and_the_pass_goes_on(aws):
    done, held = aws
    held["taken"] = True
    out = sweep_handler.handler({}, Context())
    assert [d[0] for d in done][:3] == ["start", "publish", "notified"] and out["notified"] == 1


def test_the_store_keeps_notifications_and_the_summary_apart_from_the_records(table):
    from dynamodb_table import item

    table.put_item(Item={"instance_id": "i-1", "request_id": "r1", "region": "us-west-2", "state": "running"})
    table.put_item(Item={"instance_id": "approval#t1", "kind": "approval", "status": "PENDING", "execution_name": "t1"})
    sweep_store.mark_notified("untracked:r1:abc", NOW)
    sweep_store.save_summary({"at": NOW.isoformat(), "hourly_cost": 12.5})
    view = sweep_store.scan()
    assert list(view.holdings.records) == ["i-1"]
    assert [a["execution_name"] for a in view.approvals] == ["t1"]
    assert view.notified == {"untracked:r1:abc": NOW}
    assert sweep_store.last_summary() == {"at": NOW.isoformat(), "hourly_cost": 12.5}
    assert int(item(table, "sweep-finding#untracked:r1:abc")["expires_at"]) == int(NOW.timestamp()) + 2 * 86400


def test_status_shows_the_last_pass():
    from gpufill.cli.render_status import render_sweep

    summary = {"at": "2026-12-04T12:00:00+00:00", "running": 2, "hourly_cost": 20.0,
               "found": {"untracked": 1, "expired": 0}, "findings": [{"kind": "untracked", "message": "1 instance(s) ...", "command": "gpufill approve x"}]}
    assert render_sweep(summary) == [
        "", "Sweep: last pass 2026-12-04T12:00:00+00:00: found 1 untracked; 2 running at $20.0000/h",
        "  untracked: 1 instance(s) ...", "    gpufill approve x",
    ]
    assert render_sweep(None) == []
