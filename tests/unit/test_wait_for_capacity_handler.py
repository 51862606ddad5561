"""PlanNextTry, StartNextTry and SettleHandOver's own work (handlers/wait_for_capacity.py): after a
try ends short the run waits (or hands over to a new execution, or expires naming what it kept),
`gpufill status` is shown each phase, a teardown asked meanwhile stops the wait before anything
more is launched, and a failed hand-over is settled by asking Step Functions who holds the
successor's name. AWS is replaced by recorders."""

import json
import logging

import pytest

from gpufill.adapters import clock, executions, run_store
from gpufill.constants import WAIT_FACTS_TTL_SECONDS
from gpufill.handlers import wait_for_capacity
from gpufill.handlers.observability import metrics
from gpufill.models.request import Refill, Request, normalise
from gpufill.models.run import Attempt, Instance, RegionLaunch, Run, Waiting
from gpufill.policy import waiting

NOW = 1_800_000_000.0
DEADLINE = NOW + 6 * 3600
ATTEMPT = Attempt(number=1, region="us-west-2", availability_zone="us-west-2a", instance_type="g6.xlarge",
                  market="spot", batch=2, launched=0, outcome="capacity", reason="InsufficientInstanceCapacity")


class Context:
    function_name = "WaitForCapacity"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:WaitForCapacity"
    memory_limit_in_mb = 256
    aws_request_id = "req"
    log_group_name = "/aws/lambda/WaitForCapacity"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def request(**fields):
    return normalise(Request(**{"count": 2, "regions": ["us-west-2", "us-east-1", "eu-west-1"],
                                "wait_for_capacity": {"deadline": "PT6H"}, **fields}),
                     request_id="req-1", default_regions=["us-west-2"], home_region="us-east-1")


def waited(**fields) -> Waiting:
    return Waiting(**{"deadline": waiting.iso(DEADLINE), "deadline_epoch": DEADLINE, "tries": 3, "tries_here": 3,
                      "attempts_before": 4, "events_here": 200, **fields})


def kept() -> Instance:
    return Instance(instance_id="i-1", region="us-west-2", availability_zone="us-west-2a", instance_type="g6.xlarge",
                    market="spot", hourly_price=0.5, state="running")


def run_of(wait: Waiting, **fields) -> Run:
    return Run(**{"batch": 2, "remaining": 1, "launched": 1, "next": "exhausted", "attempts_total": 10,
                  "instances": [kept()], "wait": wait, **fields})


def event(phase: str, req, run: Run, **fields) -> dict:
    return {"phase": phase, "request": req.model_dump(mode="json"), "run": run.model_dump(mode="json", exclude_none=True),
            "execution": "req-1", **fields}


@pytest.fixture
def aws(monkeypatch):
    """The wait item the table holds, and what the handler asked and showed, in order."""
    done: list[tuple] = []
    table: dict = {"wait": None, "stopped_by": None}
    monkeypatch.delenv("WAIT_TRIES_PER_EXECUTION", raising=False)
    monkeypatch.setattr(clock, "epoch", lambda: NOW)
    monkeypatch.setattr(clock, "iso_now", lambda: "2027-01-15T08:00:00+00:00")
    monkeypatch.setattr(run_store, "save_wait", lambda rid, view: done.append(("show", rid, view)))
    monkeypatch.setattr(run_store, "load_wait", lambda rid: done.append(("load", rid)) or table["wait"])
    monkeypatch.setattr(run_store, "load_attempts", lambda rid, total: done.append(("attempts", rid, total)) or [ATTEMPT])
    monkeypatch.setattr(run_store, "maintenance_stopped_by", lambda rid: done.append(("stopped?", rid)) or table["stopped_by"])
    monkeypatch.setattr(run_store, "mark_wait_stopped", lambda rid, by: done.append(("mark stopped", rid, by)))
    monkeypatch.setattr(metrics, "add_metric", lambda name, unit, value: done.append(("metric", name, unit, value)))
    return done, table


def shown(phase, *, execution="req-1", next_try_at=None, tries=3, launched=1):
    return ("show", "req-1", {"phase": phase, "deadline": waiting.iso(DEADLINE), "next_try_at": next_try_at, "tries": tries,
                              "execution": execution, "launched": launched, "updated_at": "2027-01-15T08:00:00+00:00"})


# --- plan: after a try ended short ----------------------------------------------------------


def test_a_short_try_waits_its_jittered_delay_and_shows_when_the_next_try_is(aws, caplog):
    done, _ = aws
    caplog.set_level(logging.INFO)
    out = wait_for_capacity.handler(event("plan", request(), run_of(waited(), cause="earlier")), Context())
    seconds = waiting.delay(3, waiting.jitter("req-1", 3))
    at = waiting.iso(NOW + seconds)
    # Three regions, six attempts this try, one market: the history it may use.
    assert out["wait"]["events_here"] == 200 + waiting.try_events(3, 6, 1)
    assert (out["next"], out["wait"]["delay_seconds"], out["wait"]["next_try_at"]) == ("retry", seconds, at)
    assert "cause" not in out and out["instances"][0]["instance_id"] == "i-1"
    assert done == [shown("waiting", next_try_at=at)]
    [logged] = [r for r in caplog.records if r.getMessage() == "capacity wait"]
    assert (logged.move, logged.tries, logged.delay) == ("retry", 3, seconds)


def test_spot_then_on_demand_counts_both_markets_in_the_history_a_try_uses(aws):
    out = wait_for_capacity.handler(event("plan", request(market="spot-then-on-demand"), run_of(waited())), Context())
    assert out["wait"]["events_here"] == 200 + waiting.try_events(3, 6, 2)


def test_a_long_try_hands_over_to_a_new_execution_and_the_share_of_tries_is_configurable(aws, monkeypatch):
    out = wait_for_capacity.handler(event("plan", request(), run_of(waited(tries_here=99))), Context())
    assert out["next"] == "retry"
    out = wait_for_capacity.handler(event("plan", request(), run_of(waited(tries_here=100))), Context())
    assert out["next"] == "handover"
    monkeypatch.setenv("WAIT_TRIES_PER_EXECUTION", "3")
    out = wait_for_capacity.handler(event("plan", request(), run_of(waited(tries_here=3))), Context())
    assert out["next"] == "handover"


def test_a_wait_past_its_deadline_expires_naming_what_it_kept_and_every_pool_tried(aws):
    done, _ = aws
    run = run_of(waited(deadline_epoch=NOW - 1))
    out = wait_for_capacity.handler(event("plan", request(), run), Context())
    assert out["next"] == "expired"
    expected = waiting.expired_cause(run.model_copy(update={"next": "expired"}), request(), [ATTEMPT])
    assert out["cause"] == expected
    cause = json.loads(out["cause"])
    assert cause["error"] == "CAPACITY_WAIT_EXPIRED" and "i-1" in out["cause"] and "us-west-2a" in out["cause"]
    assert done == [("attempts", "req-1", 10), ("metric", "CapacityWaitsExpired", "Count", 1), shown("expired")]


# --- start: after the wait --------------------------------------------------------------------


def test_the_next_try_is_counted_and_shown_trying_in_this_execution(aws):
    done, _ = aws
    out = wait_for_capacity.handler(event("start", request(), run_of(waited(), next="retry")), Context())
    assert out["next"] == "prepare"
    assert (out["wait"]["tries"], out["wait"]["tries_here"], out["wait"]["attempts_before"]) == (4, 4, 10)
    assert done == [("load", "req-1"), shown("trying", tries=4)]


def test_a_try_ranks_by_the_facts_the_run_holds_while_they_are_fresh_and_reads_them_again_after(aws):
    west = RegionLaunch(region="us-west-2", image_id="ami-1", root_volume_gib=200)
    held = run_of(waited(facts_read_at=NOW - 60), next="retry", prepared=[west])
    fresh = wait_for_capacity.handler(event("start", request(), held), Context())
    assert (fresh["next"], fresh["wait"]["facts_read_at"]) == ("rank", NOW - 60)
    assert fresh["prepared"] == [west.model_dump(mode="json", exclude_none=True)]  # entered again as it was
    stale = NOW - WAIT_FACTS_TTL_SECONDS
    due = wait_for_capacity.handler(
        event("start", request(), held.model_copy(update={"wait": waited(facts_read_at=stale)})), Context()
    )
    # Facts read again: each region's launch parameters are fixed again too.
    assert (due["next"], due["wait"]["facts_read_at"], due.get("prepared", [])) == ("prepare", NOW, [])


def test_a_hand_over_names_its_successor_and_shows_the_try_under_that_name(aws):
    done, _ = aws
    out = wait_for_capacity.handler(event("start", request(), run_of(waited(generation=1), next="handover")), Context())
    assert out["next"] == "handover"
    assert (out["wait"]["successor"], out["wait"]["generation"], out["wait"]["tries_here"]) == ("req-1-c2", 2, 1)
    assert done == [("load", "req-1"), shown("trying", execution="req-1-c2", tries=4)]


def test_a_teardown_asked_during_the_wait_stops_it_before_anything_is_launched(aws, caplog):
    done, table = aws
    caplog.set_level(logging.INFO)
    table["wait"] = {"phase": "waiting", "stopped_by": "req-1-teardown"}
    # The try that was scheduled is not shown: nothing more is tried.
    out = wait_for_capacity.handler(event("start", request(), run_of(waited(next_try_at="2027-01-15T09:00:00Z"), next="retry")), Context())
    assert out["next"] == "stopped" and out["wait"]["tries"] == 3
    assert done == [("load", "req-1"), shown("stopped")]
    [logged] = [r for r in caplog.records if r.getMessage() == "capacity wait ended by a teardown"]
    assert logged.teardown == "req-1-teardown"


def test_a_refill_wait_ends_when_its_requests_maintenance_was_stopped(aws):
    done, table = aws
    req = request(maintain=True, count=1, refill=Refill(request_id="serve", replaces=["i-0123456789abcdef0"]))
    table["stopped_by"] = "serve-teardown"
    out = wait_for_capacity.handler(event("start", req, run_of(waited(), next="retry")), Context())
    assert out["next"] == "stopped"
    assert done == [("load", "req-1"), ("stopped?", "serve"), ("mark stopped", "req-1", "serve-teardown"), shown("stopped")]


def test_a_refill_wait_goes_on_while_its_request_is_maintained(aws):
    done, table = aws
    req = request(maintain=True, count=1, refill=Refill(request_id="serve", replaces=["i-0123456789abcdef0"]))
    table["wait"] = {"phase": "waiting"}
    out = wait_for_capacity.handler(event("start", req, run_of(waited(), next="retry")), Context())
    assert out["next"] == "prepare" and done[:2] == [("load", "req-1"), ("stopped?", "serve")]
    # Stopped already: the request's maintenance is not asked again.
    done.clear()
    table["wait"] = {"phase": "waiting", "stopped_by": "td"}
    wait_for_capacity.handler(event("start", req, run_of(waited(), next="retry")), Context())
    assert done == [("load", "req-1"), shown("stopped")]


# --- settle: the successor's StartExecution failed ----------------------------------------------


def settle_event(**fields):
    run = run_of(waited(successor="req-1-c1"), next="handover")
    sent = {"request": {"request_id": "req-1"}, "run": {"n": 1}}
    return event("settle", request(), run, state_machine="arn:sm", carried=sent,
                 failure={"Error": "States.Timeout", "Cause": "no answer"}, **fields), sent


def test_a_successor_that_runs_this_request_is_continued(aws, monkeypatch):
    done, _ = aws
    body, sent = settle_event()
    asked = []
    monkeypatch.setattr(executions, "describe", lambda sm, name: asked.append((sm, name)) or {
        "input": {waiting.CONTINUATION: sent}, "started": "t"})
    assert wait_for_capacity.handler(body, Context()) == {"next": "continued"}
    assert asked == [("arn:sm", "req-1-c1")] and done == []


def test_a_successor_never_started_fails_the_hand_over_saying_why(aws, monkeypatch):
    done, _ = aws
    body, _ = settle_event()
    monkeypatch.setattr(executions, "describe", lambda sm, name: None)
    out = wait_for_capacity.handler(body, Context())
    assert out == {"next": "handover_failed", "failure": waiting.handover_failure(
        "not_started", "req-1-c1", {"Error": "States.Timeout", "Cause": "no answer"})}
    assert "States.Timeout" in out["failure"]["Cause"]
    assert done == [("metric", "HandOversFailed", "Count", 1)]


def test_a_successor_name_held_by_another_execution_fails_the_hand_over_naming_when_it_started(aws, monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    body, _ = settle_event()
    monkeypatch.setattr(executions, "describe", lambda sm, name: {"input": {"other": 1}, "started": "2027-01-01T00:00:00Z"})
    out = wait_for_capacity.handler(body, Context())
    assert out["failure"]["Error"] == "ContinuationNameTaken" and "(started 2027-01-01T00:00:00Z)" in out["failure"]["Cause"]
    [logged] = [r for r in caplog.records if r.getMessage() == "hand-over settled"]
    assert (logged.successor, logged.outcome, logged.error) == ("req-1-c1", "name_taken", "States.Timeout")


def test_a_settle_without_a_successor_named_asks_step_functions_nothing(aws, monkeypatch):
    body, _ = settle_event()
    body["run"]["wait"].pop("successor")
    monkeypatch.setattr(executions, "describe", lambda sm, name: pytest.fail(f"asked about {name}"))
    with pytest.raises(AssertionError):
        wait_for_capacity.handler(body, Context())


def test_a_settle_without_what_was_sent_or_a_failure_still_settles(aws, monkeypatch):
    body, _ = settle_event()
    body.pop("carried"), body.pop("failure")
    monkeypatch.setattr(executions, "describe", lambda sm, name: {"input": {waiting.CONTINUATION: {}}, "started": "t"})
    assert wait_for_capacity.handler(body, Context()) == {"next": "continued"}
