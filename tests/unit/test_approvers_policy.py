"""Who may answer an approval (policy/approvers.py) and AnswerApproval's own work
(handlers/answer_approval.py): the caller is the ARN AWS put in the function URL's event; the
`approvers` patterns and `separate_approver` refuse before anything is claimed or sent, and bad
input is one 400 naming the field. AWS and gpufill.approve are replaced by recorders."""

import base64
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufill import approve
from gpufill.adapters import clock
from gpufill.constants import ENV_APPROVERS, ENV_SEPARATE_APPROVER
from gpufill.handlers import answer_approval
from gpufill.handlers.observability import metrics
from gpufill.policy import approvers

ACCOUNT = "123456789012"
ANA = f"arn:aws:iam::{ACCOUNT}:user/ana"
SSO_BEA = f"arn:aws:sts::{ACCOUNT}:assumed-role/AWSReservedSSO_Approvers_0a1b/bea@example.com"
NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)


def event(body, caller: str | None = ANA, *, encoded: bool = False) -> dict:
    text = body if isinstance(body, str) else json.dumps(body)
    context = {"authorizer": {"iam": {"userArn": caller, "accountId": ACCOUNT}}} if caller else {}
    if encoded:
        text = base64.b64encode(text.encode()).decode()
    return {"version": "2.0", "requestContext": context, "body": text, "isBase64Encoded": encoded}


# --- the policy --------------------------------------------------------------------------------


@pytest.mark.parametrize("arn, patterns, allowed", [
    (ANA, (ANA,), True),
    (ANA, (f"arn:aws:iam::{ACCOUNT}:user/*",), True),
    (ANA, (f"arn:aws:iam::{ACCOUNT}:user/bo?",), False),
    (ANA, (f"arn:aws:iam::{ACCOUNT}:user/an?",), True),
    (ANA, (f"arn:aws:iam::{ACCOUNT}:role/*",), False),
    (ANA, ("arn:aws:iam::999999999999:user/ana",), False),
    # A role session matches a pattern of its role, and one of the session itself.
    (SSO_BEA, (f"arn:aws:iam::{ACCOUNT}:role/AWSReservedSSO_Approvers_*",), True),
    (SSO_BEA, (f"arn:aws:sts::{ACCOUNT}:assumed-role/*/bea@example.com",), True),
    (SSO_BEA, (f"arn:aws:sts::{ACCOUNT}:assumed-role/*/ana@example.com",), False),
    # Brackets are literal in IAM, not a character class.
    (f"arn:aws:iam::{ACCOUNT}:user/a", (f"arn:aws:iam::{ACCOUNT}:user/[ab]",), False),
    (ANA, (), False),
])
def test_may_answer_matches_as_iam_does(arn, patterns, allowed):
    assert approvers.may_answer(arn, patterns) is allowed


def test_the_default_lets_the_accounts_principals_answer_and_no_other_account():
    default = approvers.default_approvers(ACCOUNT)
    assert approvers.may_answer(ANA, default) and approvers.may_answer(SSO_BEA, default)
    assert not approvers.may_answer("arn:aws:iam::999999999999:user/ana", default)


@given(st.text(min_size=1, max_size=30))
def test_a_pattern_without_wildcards_matches_only_itself(name):
    arn = f"arn:aws:iam::{ACCOUNT}:user/{name}"
    literal = arn.replace("*", "").replace("?", "")
    assert approvers.may_answer(literal, (literal,))
    assert not approvers.may_answer(literal + "x", (literal,))


@pytest.mark.parametrize("value, parsed", [
    (None, ()), ("", ()), ([], ()),
    (f'["{ANA}"]', (ANA,)),
    (f"{ANA}, arn:aws:iam::{ACCOUNT}:role/*", (ANA, f"arn:aws:iam::{ACCOUNT}:role/*")),
    ([SSO_BEA], (SSO_BEA,)),
])
def test_the_approvers_setting_reads_json_a_list_or_commas(value, parsed):
    assert approvers.parse_approvers(value) == parsed


@pytest.mark.parametrize("value, says", [
    ("[1]", "list of IAM ARN patterns"),
    ('["ana"]', "'ana' is not an IAM ARN pattern"),
    ('["arn:aws:s3:::bucket"]', "is not an IAM ARN pattern"),
    ("[not json", "not a JSON list"),
    ({"a": 1}, "list of IAM ARN patterns"),
    ([ANA] * 51, "at most 50"),
])
def test_a_bad_approvers_setting_names_the_field(value, says):
    with pytest.raises(approvers.BadApprovers, match="approvers: ") as raised:
        approvers.parse_approvers(value)
    assert says in str(raised.value)


def test_same_principal_is_the_exact_arn():
    assert approvers.same_principal(ANA, ANA) and approvers.same_principal(SSO_BEA, SSO_BEA)
    assert not approvers.same_principal(SSO_BEA, SSO_BEA.replace("bea@", "ana@"))
    assert not approvers.same_principal(None, ANA) and not approvers.same_principal("", "")


@pytest.mark.parametrize("body, field", [
    ("", "body"), ("[1]", "body"), ("{not json", "body"),
    ({"decision": "approved"}, "approval"), ({"approval": " ", "decision": "approved"}, "approval"),
    ({"approval": "td", "decision": "yes"}, "decision"), ({"approval": "td"}, "decision"),
    ({"approval": "td", "decision": "approved", "reason": 5}, "reason"),
    ({"approval": "td", "decision": "approved", "reason": "x" * 501}, "reason"),
])
def test_a_bad_answer_names_the_field(body, field):
    with pytest.raises(approvers.BadAnswer, match=f"^{field}: "):
        approvers.parse_answer(event(body))


def test_the_limits_are_inclusive_and_a_bad_base64_body_is_named():
    assert approvers.parse_answer(event({"approval": "td", "decision": "approved", "reason": "x" * 500})).reason == "x" * 500
    assert approvers.parse_answer(event({"approval": "td", "decision": "approved"})).reason is None
    assert len(approvers.parse_approvers([ANA] * 50)) == 50
    broken = {**event({}), "body": "%%%not base64", "isBase64Encoded": True}
    with pytest.raises(approvers.BadAnswer, match="^body: not valid base64-encoded UTF-8$"):
        approvers.parse_answer(broken)
    with pytest.raises(approvers.BadAnswer, match=r'^body: send a JSON object \{"approval": NAME'):
        approvers.parse_answer(event("[1]"))


def test_an_answer_is_read_plain_or_base64_and_the_reason_trimmed():
    body = {"approval": " td-1 ", "decision": "rejected", "reason": "  still training "}
    for encoded in (False, True):
        asked = approvers.parse_answer(event(body, encoded=encoded))
        assert asked == approvers.AnswerRequest("td-1", "rejected", "still training")
    assert approvers.parse_answer(event({"approval": "td", "decision": "approved", "reason": " "})).reason is None
    assert approvers.caller_arn(event({}, caller=None)) is None
    assert approvers.caller_arn(event({}, caller="ana")) is None
    assert approvers.caller_arn(event({})) == ANA


# --- the handler -------------------------------------------------------------------------------


class Context:
    function_name = "AnswerApproval"
    function_version = "$LATEST"
    invoked_function_arn = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:gpufill-dev-AnswerApproval"
    memory_limit_in_mb = 256
    aws_request_id = "req"
    log_group_name = "/aws/lambda/AnswerApproval"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


@pytest.fixture
def answered(monkeypatch):
    """Every approve.answer call the handler made; the item it answers is a teardown of two instances,
    resolved (approve.find) from the approval, an execution name or a request id."""
    calls: list[dict] = []
    item = {"execution_name": "teardown-td-1", "instance_ids": ["i-1", "i-2"]}

    def find(ref, table, now):
        assert table is None and now == NOW
        return item

    def answer(execution, decision, *, approver, reason, sfn, table, now, settle_seconds, follow):
        assert sfn == ("client", "stepfunctions") and table is None  # the deployment's own table, from its environment
        # Settled inside the function's time; what the answer goes on to do is followed by the CLI.
        assert settle_seconds < Context().get_remaining_time_in_millis() / 1000 and follow is False
        calls.append({"execution": execution, "decision": decision, "approver": approver, "reason": reason, "now": now})
        return approve.Answered("teardown:teardown-td-1", "teardown", "teardown-td-1", decision, approver, reason, item,
                                instance_ids=["i-1", "i-2"])

    monkeypatch.setattr(approve, "find", find)
    monkeypatch.setattr(approve, "answer", answer)
    monkeypatch.setattr(answer_approval, "client", lambda service: ("client", service))
    monkeypatch.setattr(clock, "now", lambda: NOW)
    monkeypatch.delenv(ENV_APPROVERS, raising=False)
    monkeypatch.delenv(ENV_SEPARATE_APPROVER, raising=False)
    monkeypatch.setattr(metrics, "flush_metrics", lambda **_: None)
    return calls


def run(body, caller=ANA) -> tuple[int, dict]:
    reply = answer_approval.handler(event(body, caller), Context())
    return reply["statusCode"], json.loads(reply["body"])


ASKED = {"approval": "teardown-td-1", "decision": "approved", "reason": "done"}


def test_the_caller_aws_authenticated_is_the_approver(answered):
    reply = answer_approval.handler(event(ASKED), Context())
    assert reply["headers"] == {"Content-Type": "application/json"}
    status, body = run(ASKED)
    answered.pop()
    assert status == 200
    # The approval is answered by its id, whatever name it was asked by.
    assert answered == [{"execution": "teardown:teardown-td-1", "decision": "approved", "approver": ANA, "reason": "done", "now": NOW}]
    assert body == {"message": "answered", "approval_id": "teardown:teardown-td-1", "kind": "teardown",
                    "execution": "teardown-td-1", "decision": "approved", "approver": ANA, "answered_by": ANA,
                    "answered_at": "2026-12-04T12:00:00+00:00", "reason": "done", "approval_for": "teardown",
                    "instance_ids": ["i-1", "i-2"], "nothing_to_do": False, "settled_after": None, "effect": None}
    # Its log lines carry what the answer concerns, as every other function's carry the request.
    assert answer_approval.logger.get_correlation_id() == "teardown-td-1"


def test_no_identity_and_bad_input_change_nothing(answered):
    assert run(ASKED, caller=None) == (403, {
        "message": "the request carries no IAM identity: call the function URL with a SigV4-signed request"})
    status, body = run({"approval": "td", "decision": "yes"})
    assert status == 400 and body["message"].startswith("decision: ") and body["message"].endswith("nothing changed")
    assert answered == []


def test_a_caller_outside_the_approvers_patterns_is_refused(answered, monkeypatch):
    monkeypatch.setenv(ENV_APPROVERS, json.dumps([f"arn:aws:iam::{ACCOUNT}:role/AWSReservedSSO_Approvers_*"]))
    status, body = run(ASKED)
    assert (status, body["message"]) == (403, f"{ANA} is not one of this deployment's approvers "
                                          f"(arn:aws:iam::{ACCOUNT}:role/AWSReservedSSO_Approvers_*); nothing changed")
    assert run(ASKED, caller=SSO_BEA)[0] == 200
    assert [c["approver"] for c in answered] == [SSO_BEA]


def test_by_default_another_accounts_caller_is_refused(answered):
    assert run(ASKED, caller="arn:aws:iam::999999999999:user/ana")[0] == 403
    assert answered == []


def test_separate_approver_refuses_who_started_the_run(answered, monkeypatch):
    monkeypatch.setenv(ENV_SEPARATE_APPROVER, "true")
    owner: dict = {"arn": ANA}
    asked_about: list[str] = []
    monkeypatch.setattr(answer_approval.run_owner, "started_by", lambda approval: asked_about.append(approval) or owner["arn"])
    status, body = run(ASKED)
    assert asked_about == ["teardown-td-1"]
    assert (status, body["message"]) == (403, f"separate_approver is on: {ANA} started 'teardown-td-1' and may not "
                                          "answer it; another approver must; nothing changed")
    owner["arn"] = None  # CloudTrail has not recorded the start yet: refused, never waved through
    status, body = run(ASKED)
    assert status == 403 and "try again shortly" in body["message"]
    owner["arn"] = SSO_BEA
    assert run(ASKED)[0] == 200 and len(answered) == 1


@pytest.mark.parametrize("error, status", [
    (approve.AlreadyDecided("execution 'x' was already approved by ana; nothing changed"), 409),
    (approve.ApprovalExpired("expired"), 409),
    (approve.NoPendingApproval("none"), 409),
    (approve.NotDelivered("Step Functions did not take the answer; answer again"), 409),
    (approve.AnswerUnknown("the reply was lost and the execution could not be read"), 502),
])
def test_an_answer_gpufill_approve_refuses_is_a_409_with_its_message(monkeypatch, answered, error, status):
    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr(approve, "answer", refuse)
    reply_status, body = run(ASKED)
    assert reply_status == status and body["message"] == str(error)


def test_an_aws_failure_is_a_502_naming_the_approval(monkeypatch, answered):
    from botocore.exceptions import ClientError

    def fail(*args, **kwargs):
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "SendTaskSuccess")

    monkeypatch.setattr(approve, "answer", fail)
    status, body = run(ASKED)
    assert status == 502 and "'teardown-td-1'" in body["message"] and "ThrottlingException" in body["message"]


def test_a_name_matching_several_approvals_is_a_409_listing_them(monkeypatch, answered):
    items = [{"execution_name": "run-1", "approval_for": "capacity-block-purchase", "deadline": "2026-12-05T12:00:00+00:00",
              "purchase": json.dumps({"instance_count": 2, "instance_type": "p5.48xlarge", "availability_zone": "us-east-2b",
                                      "upfront_fee": 1390}), "target": json.dumps({"request_id": "run-1"})},
             {"execution_name": "teardown-run-1", "instance_ids": ["i-1"], "deadline": "2026-12-05T13:00:00+00:00",
              "target": json.dumps({"request_id": "run-1"})}]

    def ambiguous(*args, **kwargs):
        raise approve.Ambiguous("'run-1' matches 2 pending approvals", items)

    monkeypatch.setattr(approve, "find", ambiguous)
    status, body = run({"approval": "run-1", "decision": "approved"})
    assert status == 409 and body["message"] == "'run-1' matches 2 pending approvals"
    assert [c["approval_id"] for c in body["choices"]] == ["purchase:run-1", "teardown:teardown-run-1"]
    assert body["choices"][1] == {"approval_id": "teardown:teardown-run-1", "asks": "terminate 1 instance(s) of request run-1",
                                  "deadline": "2026-12-05T13:00:00+00:00"}
    assert answered == []
