"""ready_timeout: which model servers answer, which are still starting and where, when the run
looks again, and what each instance's verdict says once it stops looking."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufill.constants import READY_POLL_SECONDS
from gpufill.models.request import Request, normalise
from gpufill.models.run import Instance, Run
from gpufill.policy import readiness
from gpufill.policy.boot import NOT_VISIBLE
from gpufill.policy.result import fill_result

NOW = 1_800_000_000.0
TIMEOUT = 1800


def instance(n, **fields):
    fields.setdefault("state", "running")
    return Instance(instance_id=f"i-{n:017x}", region="us-west-2", availability_zone="us-west-2a",
                    instance_type="g6.xlarge", market="spot", hourly_price=0.5, **fields)


def run_of(*instances, **fields):
    return Run(batch=len(instances), remaining=0, launched=len(instances), instances=list(instances), **fields)


def seen(**steps):
    """{instance number: step} -> what DescribeInstances showed this round."""
    return {instance(int(n[1:])).instance_id: {"state": "running", "startup_step": step} for n, step in steps.items()}


# --- one round -------------------------------------------------------------------------------


def test_the_first_round_fixes_the_deadline_and_looks_again_a_minute_later():
    checked = readiness.check(run_of(instance(1)), seen(n1="syncing model"), now=NOW, timeout_seconds=TIMEOUT)
    assert (checked.next, checked.ready_deadline, checked.ready_rounds, checked.ready_pause) == (
        "wait", NOW + TIMEOUT, 1, READY_POLL_SECONDS)
    assert READY_POLL_SECONDS == 60
    assert checked.instances[0].startup_step == "syncing model"
    assert checked.instances[0].serving is None, "no verdict while the run still looks"


def test_a_later_round_keeps_the_first_deadline_and_counts_rounds():
    first = readiness.check(run_of(instance(1)), seen(n1="preparing storage"), now=NOW, timeout_seconds=TIMEOUT)
    later = readiness.check(first, seen(n1="loading model"), now=NOW + 600, timeout_seconds=TIMEOUT)
    assert (later.ready_deadline, later.ready_rounds, later.next) == (NOW + TIMEOUT, 2, "wait")
    assert later.instances[0].startup_step == "loading model"


def test_the_last_pause_ends_at_the_deadline_rounded_up():
    run = run_of(instance(1), ready_deadline=NOW + 30.2, ready_rounds=7)
    checked = readiness.check(run, seen(n1="loading model"), now=NOW, timeout_seconds=TIMEOUT)
    assert (checked.next, checked.ready_pause, checked.ready_rounds) == ("wait", 31, 8)


def test_a_second_left_is_still_worth_one_more_look():
    run = run_of(instance(1), ready_deadline=NOW + 1)
    checked = readiness.check(run, seen(n1="loading model"), now=NOW, timeout_seconds=TIMEOUT)
    assert (checked.next, checked.ready_pause) == ("wait", 1)
    run = run_of(instance(1), ready_deadline=NOW + 0.25)
    assert readiness.check(run, seen(n1="loading model"), now=NOW, timeout_seconds=TIMEOUT).ready_pause == 1


def test_a_deadline_one_poll_away_pauses_the_whole_poll():
    run = run_of(instance(1), ready_deadline=NOW + READY_POLL_SECONDS)
    assert readiness.check(run, seen(n1="loading model"), now=NOW, timeout_seconds=TIMEOUT).ready_pause == 60
    run = run_of(instance(1), ready_deadline=NOW + READY_POLL_SECONDS + 1)
    assert readiness.check(run, seen(n1="loading model"), now=NOW, timeout_seconds=TIMEOUT).ready_pause == 60


def test_every_server_answering_ends_the_wait_at_once_with_serving_true():
    run = run_of(instance(1), instance(2))
    checked = readiness.check(run, seen(n1="serving", n2="serving"), now=NOW, timeout_seconds=TIMEOUT)
    assert (checked.next, checked.ready_pause) == ("ready", None)
    assert [(i.serving, i.serving_reason) for i in checked.instances] == [(True, None), (True, None)]
    assert readiness.serving_count(checked) == 2


def test_one_server_still_loading_keeps_the_run_looking():
    run = run_of(instance(1), instance(2))
    checked = readiness.check(run, seen(n1="serving", n2="loading model"), now=NOW, timeout_seconds=TIMEOUT)
    assert checked.next == "wait"
    assert [i.serving for i in checked.instances] == [None, None]


def test_at_the_deadline_the_run_stops_and_names_the_step_each_laggard_reached():
    run = run_of(instance(1), instance(2), instance(3), ready_deadline=NOW)
    checked = readiness.check(run, seen(n1="serving", n2="syncing model"), now=NOW, timeout_seconds=TIMEOUT)
    assert (checked.next, checked.ready_pause, checked.ready_rounds) == ("ready", None, 1)
    verdicts = [(i.serving, i.serving_reason) for i in checked.instances]
    assert verdicts == [
        (True, None),
        (False, "still at startup step 'syncing model' when ready_timeout PT30M ran out"),
        (False, "no startup step reported within PT30M (startup.sh did not run, or could not tag the instance)"),
    ]
    assert readiness.serving_count(checked) == 1


def test_past_the_deadline_is_the_same_as_at_it():
    run = run_of(instance(1), ready_deadline=NOW - 5)
    checked = readiness.check(run, seen(n1="loading model"), now=NOW, timeout_seconds=TIMEOUT)
    assert checked.next == "ready" and checked.instances[0].serving is False


def test_a_timeout_of_zero_checks_once_and_gives_every_verdict():
    checked = readiness.check(run_of(instance(1)), seen(n1="serving"), now=NOW, timeout_seconds=0)
    assert (checked.next, checked.ready_deadline, checked.instances[0].serving) == ("ready", NOW, True)


def test_a_failed_startup_ends_the_wait_for_that_instance_with_its_step():
    run = run_of(instance(1), instance(2))
    checked = readiness.check(run, seen(n1="failed: syncing model", n2="serving"), now=NOW, timeout_seconds=TIMEOUT)
    assert checked.next == "ready", "nothing left to wait for: one serves, one stopped"
    assert [(i.serving, i.serving_reason) for i in checked.instances] == [
        (False, "startup.sh stopped: failed: syncing model (its log: /var/log/gpufill-startup.log)"),
        (True, None),
    ]


@pytest.mark.parametrize("state", ["shutting-down", "terminated", "stopping", "stopped"])
def test_an_instance_that_went_off_will_never_serve(state):
    run = run_of(instance(1), instance(2))
    round_ = {instance(1).instance_id: {"state": state, "startup_step": "loading model"},
              instance(2).instance_id: {"state": state}}
    checked = readiness.check(run, round_, now=NOW, timeout_seconds=TIMEOUT)
    assert checked.next == "ready"
    assert [i.state for i in checked.instances] == [state, state]
    assert [i.serving_reason for i in checked.instances] == [
        f"the instance is {state} at startup step 'loading model'",
        f"the instance is {state} before startup.sh reported a step",
    ]


def test_a_serving_tag_on_an_instance_that_went_off_is_not_serving():
    run = run_of(instance(1))
    checked = readiness.check(run, {instance(1).instance_id: {"state": "terminated", "startup_step": "serving"}},
                              now=NOW, timeout_seconds=TIMEOUT)
    assert (checked.instances[0].serving, checked.instances[0].serving_reason) == (
        False, "the instance is terminated at startup step 'serving'")


def test_a_round_that_does_not_see_an_instance_keeps_what_it_knew():
    run = run_of(instance(1, startup_step="loading model"), instance(2, startup_step="syncing model"))
    round_ = {instance(1).instance_id: {"state": NOT_VISIBLE, "startup_step": None}}
    checked = readiness.check(run, round_, now=NOW, timeout_seconds=TIMEOUT)
    assert [(i.state, i.startup_step) for i in checked.instances] == [
        ("running", "loading model"), ("running", "syncing model")]


def test_a_run_with_no_instances_has_nothing_to_wait_for():
    checked = readiness.check(run_of(), {}, now=NOW, timeout_seconds=TIMEOUT)
    assert (checked.next, checked.instances) == ("ready", [])


# --- the words ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "PT0S"), (1, "PT1S"), (59, "PT59S"), (60, "PT1M"), (1800, "PT30M"), (3600, "PT1H"),
     (5400, "PT1H30M"), (3661, "PT1H1M1S"), (7200, "PT2H"), (3605, "PT1H5S")],
)
def test_durations_are_said_the_way_the_request_writes_them(seconds, text):
    assert readiness.iso_duration(seconds) == text


@pytest.mark.parametrize(
    ("step", "serving", "failed"),
    [("serving", True, False), ("failed: loading model", False, True), ("loading model", False, False),
     (None, False, False), ("Serving", False, False), ("failed:x", False, False)],
)
def test_which_steps_mean_serving_and_which_mean_stopped(step, serving, failed):
    assert (readiness.is_serving(step), readiness.has_failed(step)) == (serving, failed)


def test_settled_means_serving_failed_or_gone():
    assert readiness.settled(instance(1, startup_step="serving"))
    assert readiness.settled(instance(1, startup_step="failed: starting vLLM"))
    assert readiness.settled(instance(1, state="terminated"))
    assert not readiness.settled(instance(1, startup_step="loading model"))
    assert not readiness.settled(instance(1))
    assert not readiness.settled(instance(1, state="pending", startup_step="preparing storage"))


# --- the result ----------------------------------------------------------------------------


def test_the_result_counts_the_servers_that_answer_and_keeps_each_reason():
    request = normalise(Request(count=2), request_id="r1", default_regions=["us-west-2"], home_region="us-east-1")
    run = run_of(instance(1, startup_step="serving", serving=True),
                 instance(2, startup_step="syncing model", serving=False, serving_reason="still at it"))
    result = fill_result(request, run, [], "FULFILLED")
    assert result["instances_serving"] == 1
    assert [(i["serving"], i.get("serving_reason")) for i in result["instances"]] == [(True, None), (False, "still at it")]


def test_a_result_whose_servers_were_not_checked_says_nothing_of_serving():
    request = normalise(Request(count=1), request_id="r1", default_regions=["us-west-2"], home_region="us-east-1")
    result = fill_result(request, run_of(instance(1)), [], "FULFILLED")
    assert "instances_serving" not in result and "serving" not in result["instances"][0]


# --- properties ----------------------------------------------------------------------------

STEPS = st.sampled_from([None, "preparing storage", "syncing model", "loading model", "serving", "failed: syncing model"])
STATES = st.sampled_from(["running", "running", "stopped", "terminated"])


@given(facts=st.lists(st.tuples(STEPS, STATES), min_size=1, max_size=8),
       left=st.integers(min_value=-100, max_value=7200))
def test_the_run_waits_exactly_while_someone_is_unsettled_and_time_is_left(facts, left):
    run = run_of(*(instance(n) for n in range(len(facts))), ready_deadline=NOW + left)
    round_ = {instance(n).instance_id: {"state": state, "startup_step": step} for n, (step, state) in enumerate(facts)}
    checked = readiness.check(run, round_, now=NOW, timeout_seconds=TIMEOUT)
    unsettled = any(step not in ("serving", "failed: syncing model") and state == "running" for step, state in facts)
    assert (checked.next == "wait") == (unsettled and left > 0)
    if checked.next == "wait":
        assert 1 <= checked.ready_pause <= READY_POLL_SECONDS and all(i.serving is None for i in checked.instances)
    else:
        # Every instance has a verdict; serving true exactly for a running instance that reported serving.
        assert [i.serving for i in checked.instances] == [s == "serving" and st_ == "running" for s, st_ in facts]
        assert all((i.serving_reason is None) == i.serving for i in checked.instances)


@given(st.text(max_size=300), st.integers(min_value=4, max_value=1024))
def test_a_reported_step_is_kept_whole_or_cut_at_a_character_within_its_bytes(step, max_bytes):
    kept = readiness.bounded_step(step, max_bytes)
    if len(step.encode()) <= max_bytes:
        assert kept == step
    else:
        assert kept.endswith(readiness.ELLIPSIS) and step.startswith(kept[: -len(readiness.ELLIPSIS)])
        assert len(kept.encode()) <= max_bytes
        # The longest such prefix: one more character would not fit.
        prefix = kept[: -len(readiness.ELLIPSIS)]
        assert len((step[: len(prefix) + 1] + readiness.ELLIPSIS).encode()) > max_bytes


def test_a_long_non_ascii_step_is_cut_between_characters_and_keeps_its_failure_prefix():
    step = "failed: " + "模型同步中" * 51  # a 256-character tag value, 773 bytes of UTF-8
    kept = readiness.bounded_step(step)
    assert kept.startswith("failed: 模型同步中") and kept.endswith("…")
    assert len(kept.encode()) <= readiness.STEP_MAX_BYTES < len(step.encode())
    assert readiness.has_failed(kept)
    assert readiness.bounded_step("syncing model") == "syncing model" and readiness.bounded_step(None) is None
