"""Which approval a name answers, and what an answer did (policy/answers.py); answering with a reply
refused or lost and the execution unreadable (approve.answer, with moto's table and a fake Step
Functions client); the wait on a person as `up`/`watch` print it (cli/render_progress.py)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from hypothesis import given
from hypothesis import strategies as st

from gpufill import approve
from gpufill.cli.render_progress import Progress
from gpufill.cli.render_teardown import render_teardown
from gpufill.constants import approval_key
from gpufill.models.teardown import TeardownInstance
from gpufill.policy import answers, teardown
from tests.unit.dynamodb_table import item as table_item
from tests.unit.dynamodb_table import table  # noqa: F401 (fixture)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LATER = (NOW + timedelta(hours=1)).isoformat(timespec="seconds")


def pending(name: str, *, kind: str = "teardown", request: str | None = "run-1", ids=("i-1",), at: str = "2026-03-01T11:00:00+00:00", **extra) -> dict:
    item = {"instance_id": approval_key(name), "execution_name": name, "task_token": f"tok-{name}", "deadline": LATER,
            "requested_at": at, "execution_arn": f"arn:aws:states:us-east-1:1:execution:gpufill-provisioner-dev:{name}",
            "target": json.dumps({"request_id": request} if request else {"all": True}), "status": "PENDING",
            "instance_ids": list(ids)}
    if kind == "purchase":
        item |= {"approval_for": answers.PURCHASE_MARK, "instance_ids": [],
                 "purchase": json.dumps({"instance_count": 2, "instance_type": "p5.48xlarge", "availability_zone": "us-east-2a", "upfront_fee": 1500})}
    return item | extra


# --- which approval a name answers ------------------------------------------------------------------


def test_a_request_id_with_a_purchase_and_a_teardown_pending_chooses_neither():
    items = [pending("run-1", kind="purchase"), pending("td-1", at="2026-03-01T11:30:00+00:00")]
    found = answers.match("run-1", items, NOW)
    assert found.chosen is None and [answers.approval_id(i) for i in found.pending] == ["purchase:run-1", "teardown:td-1"]
    assert answers.match("purchase:run-1", items, NOW).chosen["execution_name"] == "run-1"
    assert answers.match("teardown:td-1", items, NOW).chosen["execution_name"] == "td-1"
    assert answers.match("td-1", items, NOW).chosen["execution_name"] == "td-1"
    assert answers.match("teardown:run-1", items, NOW).chosen is None  # the kind must match too


def test_with_the_purchase_answered_the_request_id_names_the_teardown_and_answered_ones_are_chosen_to_be_refused():
    items = [pending("run-1", kind="purchase", answered_at="x"), pending("td-1")]
    assert answers.match("run-1", items, NOW).chosen["execution_name"] == "td-1"
    both_done = [pending("run-1", kind="purchase", decided_at="x"), pending("td-1", decided_at="y", at="2026-03-01T11:59:00+00:00")]
    assert answers.match("run-1", both_done, NOW).chosen["execution_name"] == "td-1"  # the newest, refused by answer()
    assert answers.match("nobody", both_done, NOW) == answers.Match(chosen=None)


def test_a_teardown_of_everything_is_never_answered_by_a_request_id():
    everything = pending("td-all", request=None)
    found = answers.match("run-1", [everything], NOW)
    assert found.chosen is None and found.whole_deployment is everything
    assert answers.match("td-all", [everything], NOW).chosen is everything


def test_past_its_deadline_or_without_a_token_an_approval_is_not_pending():
    assert answers.is_pending(pending("t"), NOW)
    assert not answers.is_pending(pending("t", deadline=NOW.isoformat(timespec="seconds")), NOW)
    assert not answers.is_pending({k: v for k, v in pending("t").items() if k != "task_token"}, NOW)
    assert answers.split_id("purchase:a:b") == ("purchase", "a:b") and answers.split_id("other:x") == (None, "other:x")


@given(st.lists(st.tuples(st.sampled_from(["purchase", "teardown"]), st.booleans()), max_size=6))
def test_a_bare_request_id_never_chooses_when_more_than_one_approval_of_it_is_pending(shape):
    items = [pending(f"e{n}", kind=kind, **({} if open_ else {"decided_at": "x"})) for n, (kind, open_) in enumerate(shape)]
    found = answers.match("run-1", items, NOW)
    waiting = [i for i in items if answers.is_pending(i, NOW)]
    if len(waiting) > 1:
        assert found.chosen is None and len(found.pending) == len(waiting)
    elif waiting:
        assert found.chosen is waiting[0]


def test_covered_instances_name_the_oldest_pending_teardown_and_purchases_cover_nothing():
    items = [pending("td-new", ids=("i-1", "i-2"), at="2026-03-01T11:50:00+00:00"), pending("td-old", ids=("i-1",)),
             pending("run-1", kind="purchase"), pending("td-done", ids=("i-3",), decided_at="x")]
    covered = answers.covering(["i-1", "i-2", "i-3", "i-4"], items, NOW)
    assert {i: c["execution_name"] for i, c in covered.items()} == {"i-1": "td-old", "i-2": "td-new"}


def test_held_instances_are_refused_naming_the_pending_teardown_and_its_commands():
    asked = [TeardownInstance(instance_id=i, region="us-west-2", state="running") for i in ("i-1", "i-2")]
    kept, refused = teardown.hold_for_pending(asked, [], {"i-1": pending("td-old")})
    assert [i.instance_id for i in kept] == ["i-2"]
    [held] = refused
    assert held.reason == "awaiting-approval" and f"until {LATER}: gpufill approve teardown:td-old" in held.detail
    lines = render_teardown({"request_id": "td-2", "target": {"request_id": "run-1"}, "status": "NOTHING_TO_TERMINATE",
                             "refused": [held.model_dump(), {**held.model_dump(), "instance_id": "i-9"}]}, [])
    assert lines[-2].startswith("NOTHING_TO_TERMINATE: refused, 2 instance(s) already wait in another teardown's approval")
    assert lines[-1] == f"  {held.detail}"  # one line per pending teardown


def test_a_teardown_is_stale_when_every_instance_ended_or_lost_its_record():
    assert answers.all_gone(["i-1", "i-2"], {"i-1": {"terminated_at": "x"}, "i-2": {"state": "gone"}})
    assert answers.all_gone(["i-1"], {})
    assert not answers.all_gone(["i-1", "i-2"], {"i-1": {"state": "terminated"}, "i-2": {"state": "running"}})
    assert not answers.all_gone([], {})


# --- what an answer did, from the history ---------------------------------------------------------------


def entered(name):
    return {"type": "TaskStateEntered", "stateEnteredEventDetails": {"name": name}}


def exited(name, output):
    return {"type": "TaskStateExited", "stateExitedEventDetails": {"name": name, "output": json.dumps(output)}}


def succeeded(answer):
    return {"type": "TaskSucceeded", "taskSucceededEventDetails": {"output": json.dumps(answer)}}


YES = {"decision": "approved", "approver": "arn:aws:iam::1:user/ana"}


def test_the_answer_taken_is_read_from_the_latest_wait():
    wait = [entered("AwaitPurchaseApproval"), {"type": "TaskSubmitted"}]
    assert answers.answer_taken("purchase", wait, "RUNNING") == answers.Taking("waiting")
    assert answers.answer_taken("purchase", wait, "ABORTED") == answers.Taking("ended")
    assert answers.answer_taken("purchase", [], "RUNNING") == answers.Taking("not_asked")
    assert answers.answer_taken("purchase", [*wait, {"type": "TaskTimedOut"}], "RUNNING").taken == "timed_out"
    taken = answers.answer_taken("purchase", [*wait, succeeded(YES), exited("AwaitPurchaseApproval", {})], "RUNNING")
    assert taken == answers.Taking("answered", YES)
    assert answers.is_this_answer(taken, "approved", YES["approver"])
    assert not answers.is_this_answer(taken, "approved", "arn:aws:iam::1:user/bob")
    assert not answers.is_this_answer(taken, "rejected", YES["approver"])
    # A teardown's wait is another state: the purchase's answer says nothing about it.
    assert answers.answer_taken("teardown", [*wait, succeeded(YES)], "RUNNING").taken == "not_asked"


def test_a_purchase_is_bought_once_its_step_exited_and_not_bought_when_the_run_failed_before_it():
    block = {"capacity_reservation_id": "cr-1", "instance_count": 2, "instance_type": "p5.48xlarge",
             "availability_zone": "us-east-2a", "start": "s", "end": "e", "upfront_fee": 1500}
    bought = answers.effect("purchase", [exited("PurchaseCapacityBlock", {"block": {"reservation": block}})], "RUNNING", None)
    assert bought.done and bought.bought and "reservation cr-1, upfront $1,500.00" in bought.text
    going = answers.effect("purchase", [entered("PurchaseCapacityBlock")], "RUNNING", None)
    assert (going.done, going.text) == (False, "the Capacity Block is being bought")
    rejected = {"type": "ExecutionFailed", "executionFailedEventDetails": {"error": "PURCHASE_REJECTED"}}
    assert answers.effect("purchase", [rejected], "FAILED", None).bought is False
    unsure = answers.effect("purchase", [entered("PurchaseCapacityBlock")], "FAILED", None)
    assert unsure.done and unsure.bought is None and "check the account's Capacity Reservations" in unsure.text


def test_a_teardown_reports_the_instances_it_terminated():
    output = {"status": "TERMINATED", "terminated": [{"terminated": ["i-2", "i-1"], "already_ended": ["i-3"]}]}
    done = answers.effect("teardown", [], "SUCCEEDED", output)
    assert done.terminated == ["i-1", "i-2"] and done.text == "2 instance(s) terminated: i-1 i-2; 1 had already ended"
    assert answers.effect("teardown", [], "SUCCEEDED", {"status": "REJECTED"}).terminated == []
    assert not answers.effect("teardown", [entered("TerminateInstances")], "RUNNING", None).done


# --- answering when the reply is refused or lost ----------------------------------------------------------


class Sfn:
    """Step Functions as far as answer() reaches it: the answer fails with `error`; the execution
    reads as `history` (or fails to read)."""

    def __init__(self, error, history=None, status="RUNNING"):
        self.error, self.history, self.status, self.sent = error, history, status, []

    def send_task_success(self, **kwargs):
        self.sent.append(kwargs)
        raise self.error

    def describe_execution(self, executionArn):
        if self.history is None:
            raise ReadTimeoutError(endpoint_url="https://states")
        return {"status": self.status}

    def get_execution_history(self, **kwargs):
        return {"events": self.history}


def refused(code):
    return ClientError({"Error": {"Code": code, "Message": "no"}}, "SendTaskSuccess")


def test_a_refused_answer_that_did_not_arrive_gives_the_claim_back(table):  # noqa: F811
    table.put_item(Item=pending("td-1"))
    waiting = [entered("AwaitTeardownApproval"), {"type": "TaskSubmitted"}]
    sfn = Sfn(refused("AccessDeniedException"), waiting)
    with pytest.raises(approve.NotDelivered, match=r"did not take the answer to teardown:td-1 \(AccessDeniedException\)"):
        approve.answer("td-1", "approved", approver="ana", reason=None, sfn=sfn, table=table, now=NOW, sleep=lambda s: None)
    assert "answered_at" not in table_item(table, approval_key("td-1"))  # answerable again


def test_a_refusal_with_the_execution_unreadable_still_gives_the_claim_back(table):  # noqa: F811
    table.put_item(Item=pending("td-1"))
    with pytest.raises(approve.NotDelivered, match="refused the answer to teardown:td-1 .AccessDeniedException."):
        approve.answer("td-1", "approved", approver="ana", reason=None, sfn=Sfn(refused("AccessDeniedException")),
                       table=table, now=NOW, sleep=lambda s: None)
    assert "answered_at" not in table_item(table, approval_key("td-1"))


def test_a_lost_reply_with_the_execution_unreadable_keeps_the_claim_and_says_to_check(table):  # noqa: F811
    table.put_item(Item=pending("td-1"))
    sfn = Sfn(ReadTimeoutError(endpoint_url="https://states"), history=None)
    with pytest.raises(approve.AnswerUnknown, match="the answer may have arrived. Check with `gpufill watch td-1`"):
        approve.answer("td-1", "approved", approver="ana", reason=None, sfn=sfn, table=table, now=NOW, sleep=lambda s: None)
    assert table_item(table, approval_key("td-1"))["answered_by"] == "ana"  # nobody answers it twice meanwhile


def test_a_token_closed_by_another_answer_is_refused_saying_what_that_answer_did(table):  # noqa: F811
    table.put_item(Item=pending("td-1"))
    other = {"decision": "rejected", "approver": "bob"}
    history = [entered("AwaitTeardownApproval"), {"type": "TaskSubmitted"}, succeeded(other)]
    sfn = Sfn(refused("TaskTimedOut"), history, status="SUCCEEDED")
    with pytest.raises(approve.AlreadyDecided, match="already been answered 'rejected' by bob"):
        approve.answer("td-1", "approved", approver="ana", reason=None, sfn=sfn, table=table, now=NOW, sleep=lambda s: None)
    assert "answered_at" not in table_item(table, approval_key("td-1"))


# --- the approval function's own reply lost: the CLI settles from the item and the history ----------------


def test_no_claim_on_the_item_means_nothing_was_sent(table):  # noqa: F811
    table.put_item(Item=pending("td-1"))
    item = table_item(table, approval_key("td-1"))
    with pytest.raises(approve.NotDelivered, match="records no answer to teardown:td-1: nothing was sent"):
        approve.settle_claimed(item, "no reply", decision="approved", sfn=Sfn(None, []), table=table, now=NOW)


def test_a_claim_of_another_decision_is_someone_elses_answer(table):  # noqa: F811
    table.put_item(Item=pending("td-1", answer="rejected", answered_by="bob", answered_at=NOW.isoformat(timespec="seconds")))
    item = table_item(table, approval_key("td-1"))
    with pytest.raises(approve.AlreadyDecided, match="already answered 'rejected' by bob"):
        approve.settle_claimed(item, "no reply", decision="approved", sfn=Sfn(None, []), table=table, now=NOW)


def test_a_claim_the_execution_took_is_reported_with_what_it_did(table):  # noqa: F811
    at = NOW.isoformat(timespec="seconds")
    table.put_item(Item=pending("td-1", answer="approved", answered_by="arn:aws:iam::1:user/ana", answered_at=at))
    item = table_item(table, approval_key("td-1"))
    mine = {"decision": "approved", "approver": "arn:aws:iam::1:user/ana"}
    history = [entered("AwaitTeardownApproval"), {"type": "TaskSubmitted"}, succeeded(mine)]
    done = approve.settle_claimed(item, "the approval function failed (502)", decision="approved",
                                  sfn=Sfn(None, history), table=table, now=NOW, settle_seconds=0, sleep=lambda s: None)
    assert (done.approver, done.settled_after, done.approval_id) == ("arn:aws:iam::1:user/ana", "the approval function failed (502)", "teardown:td-1")
    assert done.effect is not None


def test_a_claim_the_execution_never_took_is_given_back(table):  # noqa: F811
    at = NOW.isoformat(timespec="seconds")
    table.put_item(Item=pending("td-1", answer="approved", answered_by="ana", answered_at=at))
    item = table_item(table, approval_key("td-1"))
    waiting = [entered("AwaitTeardownApproval"), {"type": "TaskSubmitted"}]
    with pytest.raises(approve.NotDelivered, match="did not take the answer to teardown:td-1"):
        approve.settle_claimed(item, "no reply", decision="approved", sfn=Sfn(None, waiting), table=table, now=NOW,
                               settle_seconds=0, sleep=lambda s: None)
    assert "answered_at" not in table_item(table, approval_key("td-1"))  # answerable again


# --- the wait on a person, as `up` and `watch` print it --------------------------------------------------


def test_a_wait_on_a_purchase_approval_prints_who_until_when_and_the_commands():
    out = io.StringIO()
    progress = Progress(out)
    progress.execution = "run-1"
    progress.asking = lambda approval_id: {"who": "the subscribers of gpufill-approvals-dev (ana@example.com)",
                                           "approve": f"gpufill approve {approval_id} --region us-east-1 --reason '...'",
                                           "reject": f"gpufill reject {approval_id} --region us-east-1 --reason '...'"}
    progress.event({**entered("AwaitPurchaseApproval"), "type": "TaskStateEntered"})
    payload = {"Payload": {"pending": True, "deadline": LATER}}
    progress.event({"type": "TaskSubmitted", "taskSubmittedEventDetails": {"output": json.dumps(payload)}})
    progress.waiting("AwaitPurchaseApproval", NOW)
    text = out.getvalue()
    assert f"asked: the subscribers of gpufill-approvals-dev (ana@example.com); until {LATER}" in text
    assert text.count("approve: gpufill approve purchase:run-1 --region us-east-1") == 2
    assert "reject:  gpufill reject purchase:run-1" in text
    assert "still waiting for an answer to the purchase approval (gpufill approve|reject), since 12:00:00" in text
    assert "still waiting for AwaitPurchaseApproval" not in text
