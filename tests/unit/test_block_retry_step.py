"""TryBlockAgain (handlers/plan_block_launch.py, phase "retry") to the letter: the status view it
writes under the request's own id and this execution's name, its log lines and metric, and the
CAPACITY_BLOCK_UNUSED cause a person reads when the bought block took nothing."""

import json
from datetime import timedelta

import pytest
from test_block_use import HELD, START, Context, again

from gpufill.adapters import clock, run_store
from gpufill.handlers import plan_block_launch
from gpufill.handlers.observability import metrics


@pytest.fixture
def seen(monkeypatch, caplog):
    """Each status view written (request id, view), each metric (name, unit, value), at a modelled time."""
    done: list[tuple] = []
    moment = {"now": START + timedelta(minutes=1)}
    caplog.set_level("INFO")
    monkeypatch.setattr(clock, "now", lambda: moment["now"])
    monkeypatch.setattr(run_store, "save_wait", lambda rid, view: done.append(("show", rid, view)))
    monkeypatch.setattr(metrics, "add_metric", lambda name, unit, value: done.append(("metric", name, unit, value)))
    return done, moment


def said(caplog, message):
    [record] = [r for r in caplog.records if r.getMessage() == message]
    return record


def continued(event: dict, execution: str | None) -> dict:
    """The event of a run continued under another execution name (or of one that names none)."""
    return {**event, "execution": execution} if execution else {k: v for k, v in event.items() if k != "execution"}


@pytest.mark.parametrize(("execution", "shown_as"), [("r-2", "r-2"), (None, "r")])
def test_a_try_again_shows_this_executions_name_and_what_runs_under_the_requests_id(seen, caplog, execution, shown_as):
    done, _ = seen
    out = plan_block_launch.handler(continued(again(2, launched=1), execution), Context())
    assert out == {"next": "retry", "tries": 3, "delay_seconds": 240}
    [(kind, rid, view)] = done
    assert (kind, rid, view["execution"], view["tries"], view["launched"]) == ("show", "r", shown_as, 3, 1)
    record = said(caplog, "capacity block tried again")
    assert (record.tries, record.delay_seconds, record.launched) == (3, 240, 1)


@pytest.mark.parametrize(("execution", "shown_as"), [("r-2", "r-2"), (None, "r")])
def test_a_block_that_took_nothing_ends_unused_shown_logged_counted_and_explained(seen, caplog, execution, shown_as):
    done, moment = seen
    moment["now"] = START + timedelta(hours=23, minutes=50)
    out = plan_block_launch.handler(continued(again(90), execution), Context())
    assert (out["next"], out["tries"]) == ("unused", 91)
    (kind, rid, view), metric = done
    assert (kind, rid, view["phase"], view["execution"], view["error"], view["launched"]) == (
        "show", "r", "capacity-block-ended", shown_as, "CAPACITY_BLOCK_UNUSED", 0)
    assert metric == ("metric", "CapacityBlocksUnused", "Count", 1)
    record = said(caplog, "capacity block not used")
    assert (record.levelname, record.tries, record.reservation) == ("WARNING", 91, HELD["capacity_reservation_id"])
    cause = json.loads(out["cause"])
    assert (cause["request_id"], cause["requested"], cause["launched"], cause["tries"]) == ("r", 2, 0, 91)
    assert cause["message"].startswith("The Capacity Block answered no room to 91 launch(es) from its start")
    assert "ending its instances (last answer: ReservationCapacityExceeded). " in cause["message"]


def test_a_block_never_answered_ends_unused_without_a_last_answer(seen):
    _, moment = seen
    moment["now"] = START + timedelta(hours=23, minutes=50)
    event = again(90)
    event["run"]["step_attempts"] = []
    cause = json.loads(plan_block_launch.handler(event, Context())["cause"])
    assert "until EC2 begins ending its instances. " in cause["message"] and "last answer" not in cause["message"]
