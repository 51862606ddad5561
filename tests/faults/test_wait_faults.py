"""The wait for capacity under faults: a hand-over to the next execution that fails, a name taken,
a continued execution that cannot read what it carries."""

from gpufill.adapters import run_store
from gpufill.local.engine import LocalEngine
from tests.support.audit import assert_exactly_once, live_instances
from tests.workflow.test_wait_for_capacity import request, restocked_after


def chained(monkeypatch, name: str, before=None, during=None):
    """A request that waits and hands over after two tries; `before` runs first, `during` once it waits."""
    monkeypatch.setenv("WAIT_TRIES_PER_EXECUTION", "2")
    with LocalEngine(restocked_after(1200)) as engine:
        if before:
            before(engine)
        if during:
            engine.at(30, lambda: during(engine))
        execution = engine.run(request("PT6H"), name=name)
        engine.faults.clear()
        wait = run_store.load_wait(name)
        executions = engine.executions()
        status = engine.run({"action": "status", "request_id": name}, name=f"look-{name}").output
        seen = assert_exactly_once(engine, execution, request_id=name)
        live = live_instances(name, regions=("us-west-2", "us-east-1"))
    return execution, wait, executions, status, seen, live


def kept(execution) -> set[str]:
    return {i["instance_id"] for i in execution.cause["instances"]}


def test_a_successor_name_held_by_another_execution_ends_the_wait_by_name(monkeypatch):
    def squat(engine):
        # Someone ran an execution of the name the wait will hand over to (refused, but it exists).
        assert engine.run({"instance_type": "g6.xlarge"}, name="taken-c1").error == "InvalidRequest"

    execution, wait, names, status, seen, live = chained(monkeypatch, "taken", before=squat)
    assert (execution.status, execution.error) == ("FAILED", "PROVISIONING_FAILED")
    assert execution.cause["failed_with"]["error"] == "ContinuationNameTaken"
    assert "taken-c1 is held by another execution" in execution.cause["failed_with"]["cause"]
    assert kept(execution) == live == seen.in_ec2 and len(live) == 1
    assert execution.cause["teardown"] == {"action": "teardown", "request_id": "taken"}
    assert wait["phase"] == "failed" and "under way" not in status["waiting"]
    assert status["waiting"].startswith("the wait for capacity ended: taken failed (ContinuationNameTaken) after 3 tries")
    assert names.count("taken-c1") == 1


def test_a_hand_over_that_never_started_is_not_shown_as_under_way(monkeypatch):
    def refuse(engine):
        engine.faults.aws("stepfunctions", "StartExecution", error="ServiceUnavailable", times=None)

    execution, wait, names, status, seen, live = chained(monkeypatch, "unstarted", during=refuse)
    assert (execution.status, execution.error) == ("FAILED", "PROVISIONING_FAILED")
    assert execution.cause["failed_with"]["error"] == "ContinuationNotStarted"
    assert "unstarted-c1" not in names
    assert kept(execution) == live == seen.in_ec2 and len(live) == 1
    assert wait["phase"] == "failed" and "under way" not in status["waiting"]


def test_lost_replies_to_every_start_of_the_successor_still_continue_once(monkeypatch):
    def lose(engine):
        engine.faults.aws("stepfunctions", "StartExecution", error="InternalError", after=True, times=None)

    execution, wait, names, status, seen, live = chained(monkeypatch, "unheard", during=lose)
    # Every StartExecution took effect and lost its reply: the run looks, finds its own successor.
    assert [e.output["status"] for e in execution.continued_from] == ["CONTINUED", "CONTINUED"]
    assert execution.output["status"] == "FULFILLED" and [n for n in names if n.startswith("unheard")] == [
        "unheard", "unheard-c1", "unheard-c2"]


def test_a_continued_execution_that_cannot_read_its_request_names_what_it_keeps(monkeypatch):
    def break_validation(engine):
        engine.faults.lambda_invoke("ValidateRequest", error="Lambda.ServiceException", times=None)

    execution, wait, names, status, seen, live = chained(monkeypatch, "unread", during=break_validation)
    assert execution.name == "unread-c1"
    assert (execution.status, execution.error) == ("FAILED", "PROVISIONING_FAILED")
    assert isinstance(execution.cause, dict), execution.cause  # a cause in gpufill's words, not Lambda's
    assert execution.cause["failed_with"]["error"] == "Lambda.ServiceException"
    assert "keep running until torn down" in execution.cause["message"]
    assert kept(execution) == live == seen.in_ec2 and len(live) == 1
    assert execution.cause["teardown"] == {"action": "teardown", "request_id": "unread"}
    assert wait["phase"] == "failed" and status["waiting"].startswith("the wait for capacity ended: unread-c1 failed")
