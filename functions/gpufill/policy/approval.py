"""The human approval in front of a teardown: what counts as a yes, when it expires, what the request says.

No AWS calls here: the handler records and publishes what these functions build.
"""

from __future__ import annotations

import json
import shlex
from datetime import datetime, timedelta
from typing import Any

from gpufill.constants import APPROVED, TRIGGER_MAX_LIFETIME
from gpufill.models.teardown import Decision, Teardown

MAX_TEXT = 500  # approver and reason are free text from a person; keep the record small
LISTED_INSTANCES = 50  # an email stays readable; the full list is in the execution input and the table
# SNS refuses a subject of 100 characters or more; an execution name alone may be 80.
MAX_SUBJECT = 99
# Only the AnswerApproval function's role (and an administrator) holds states:SendTaskSuccess, and
# the approver this route records is whatever was typed: the message says so.
BREAK_GLASS = "Break-glass, for an administrator allowed states:SendTaskSuccess (records the approver as typed)"
ELLIPSIS = "..."
# The decisions that end nothing: a teardown rejected, or one nobody answered in time (an expiry
# changes nothing a person did not approve), gives back the maintenance it stopped.
ENDS_NOTHING = frozenset({"rejected", "expired"})


def decide(answer: Any) -> tuple[Decision, str | None, str, str | None]:
    """(decision, answer exactly as sent, approver, reason). Only {"decision": "approved"} approves:
    any other value, shape or spelling is a rejection, so nothing is terminated by accident.

    The answer is kept byte for byte (not stripped): a record that said "approved" for an
    answer of "approved " would hide why the teardown was rejected."""
    fields = answer if isinstance(answer, dict) else {}
    raw = fields.get("decision")
    decision: Decision = "approved" if raw == APPROVED else "rejected"
    approver = _text(fields.get("approver")) or "unknown (no approver in the answer)"
    return decision, raw_answer(answer), approver, _text(fields.get("reason"))


def raw_answer(answer: Any) -> str | None:
    """The decision exactly as sent: the `decision` string itself (never trimmed), any other
    decision value as JSON, None when the answer carries no decision at all."""
    raw = answer.get("decision") if isinstance(answer, dict) else None
    if raw is None:
        return None
    sent = raw if isinstance(raw, str) else json.dumps(raw)
    return sent[:MAX_TEXT]


def deadline(entered_at: datetime, timeout_seconds: int) -> datetime:
    return entered_at + timedelta(seconds=timeout_seconds)


def execution_region(execution_arn: str) -> str:
    """arn:aws:states:REGION:ACCOUNT:execution:MACHINE:NAME -> REGION."""
    parts = execution_arn.split(":")
    return parts[3] if len(parts) > 3 else ""


def answer_json(decision: str, approver: str, reason: str | None = None) -> str:
    body = {"decision": decision, "approver": approver}
    if reason:
        body["reason"] = reason
    return json.dumps(body, separators=(",", ":"))


def commands(execution_arn: str, task_token: str) -> dict[str, str]:
    """The exact commands that answer this approval, with gpufill or with the AWS CLI alone."""
    region = execution_region(execution_arn)
    raw = (
        f"aws stepfunctions send-task-success --region {region} --task-token {shlex.quote(task_token)} "
        f"--task-output {shlex.quote(answer_json(APPROVED, 'YOUR-NAME'))}"
    )
    return {
        "approve": f"gpufill approve {execution_arn}",
        "reject": f"gpufill reject {execution_arn} --reason 'WHY'",
        "approve_with_aws_cli": raw,
    }


def message(
    teardown: Teardown, *, execution_arn: str, task_token: str, expires: datetime
) -> tuple[str, str]:
    """(subject, body) of the approval request published to the approval topic."""
    # instance_count covers every instance; the listed ones are at most TEARDOWN_LISTED_INSTANCES.
    count = max(teardown.instance_count, len(teardown.instances))
    subject = subject_line(count, teardown.request_id)
    if teardown.target.all:
        what = "EVERY live instance of this deployment, of every request"
    elif teardown.target.request_id:
        what = f"every instance of request {teardown.target.request_id}"
    else:
        what = f"{len(teardown.target.instance_ids or [])} instance id(s) given by hand"
    lines = [*_why(teardown)]
    lines += [
        f"gpufill teardown {teardown.request_id} asks to terminate {count} instance(s): {what}.",
        f"Asked by: {teardown.requested_by or 'not given (requested_by was not set)'}",
        f"Costing now: ${teardown.hourly_cost:.4f}/h" + (" (prices of unrecorded instances unknown)" if any(not i.recorded for i in teardown.instances) else ""),
        f"This approval expires at {expires.isoformat(timespec='seconds')}; after that nothing is terminated.",
        "",
        "Instances:",
    ]
    for i in teardown.instances[:LISTED_INSTANCES]:
        price = f"${i.hourly_price:.4f}/h" if i.hourly_price is not None else "price unknown"
        lines.append(
            f"  {i.instance_id}  {i.region:<15} {i.availability_zone or '-':<16} {i.instance_type or '-':<13} "
            f"{i.market or '-':<9} {i.state:<8} {price}  launched {i.launched_at or '?'}"
        )
    if count > min(LISTED_INSTANCES, len(teardown.instances)):
        lines.append(f"  ... and {count - min(LISTED_INSTANCES, len(teardown.instances))} more (see the execution input and the instances table)")
    if teardown.refused:
        lines += ["", "Left alone (gpufill will not terminate these):"]
        lines += [f"  {r.instance_id}  {r.reason}: {r.detail}" for r in teardown.refused[:LISTED_INSTANCES]]
    found = commands(execution_arn, task_token)
    lines += [
        "",
        "To approve:",
        f"  {found['approve']}",
        "To reject:",
        f"  {found['reject']}",
        "",
        BREAK_GLASS + " (any decision other than exactly \"approved\" is a rejection):",
        f"  {found['approve_with_aws_cli']}",
    ]
    return subject, "\n".join(lines)


def _why(teardown: Teardown) -> list[str]:
    if teardown.trigger != TRIGGER_MAX_LIFETIME:
        return []
    when = f" at {teardown.expired_at}" if teardown.expired_at else ""
    return [
        f"The max_lifetime of request {teardown.target.request_id} passed{when}: gpufill's spend guard asks to end it.",
        "Nothing is terminated unless you approve; until the deadline below this is sent again every hour.",
        "",
    ]


def reminder(teardown: Teardown, *, execution_arn: str, task_token: str, expires: datetime) -> tuple[str, str]:
    """The approval request again, short (a schedule's input holds at most 8,192 characters, and
    the first message listed the instances): what waits, what it costs, the commands."""
    count = max(teardown.instance_count, len(teardown.instances))
    head = "gpufill reminder: approve terminating "
    subject = subject_line(count, teardown.request_id).replace("gpufill: approve terminating ", head, 1)
    if len(subject) > MAX_SUBJECT:
        subject = subject[: MAX_SUBJECT - len(ELLIPSIS) - 1] + ELLIPSIS + ")"
    found = commands(execution_arn, task_token)
    lines = [
        *_why(teardown),
        f"REMINDER: teardown {teardown.request_id} still waits for an answer; nothing is terminated until one comes.",
        f"{count} instance(s) keep running, ${teardown.hourly_cost:.4f}/h. The approval expires at "
        f"{expires.isoformat(timespec='seconds')}.",
        "",
        "To approve:",
        f"  {found['approve']}",
        "To reject:",
        f"  {found['reject']}",
        BREAK_GLASS + ":",
        f"  {found['approve_with_aws_cli']}",
    ]
    return subject, "\n".join(lines)


def expired_notice(teardown: Teardown, *, execution_name: str, deadline: str | None) -> tuple[str, str]:
    """Published when an approval expires: nothing was terminated and the instances still cost money."""
    count = max(teardown.instance_count, len(teardown.instances))
    head = "gpufill: approval expired, instances still running ("
    room = MAX_SUBJECT - len(head) - 1
    name = execution_name if len(execution_name) <= room else execution_name[: room - len(ELLIPSIS)] + ELLIPSIS
    again = (
        f"gpufill teardown {teardown.target.request_id}" if teardown.target.request_id
        else "gpufill teardown --all" if teardown.target.all
        else "gpufill teardown --instances " + " ".join(teardown.target.instance_ids or [])
    )
    lines = [
        f"Nobody answered the approval of teardown {execution_name}"
        + (f" before its deadline ({deadline})" if deadline else " before its deadline") + ".",
        f"Nothing was terminated: {count} instance(s) keep running, ${teardown.hourly_cost:.4f}/h.",
        *( [f"It was asked by the spend guard: the max_lifetime of request {teardown.target.request_id} had passed."]
           if teardown.trigger == TRIGGER_MAX_LIFETIME else [] ),
        "",
        "To ask again:",
        f"  {again}",
    ]
    return f"{head}{name})", "\n".join(lines)


def maintenance_note(outcome: dict[str, list[str] | str]) -> str | None:
    """What giving back a teardown's maintenance did, per request, for the run's output: the
    refills started again, or the teardowns that still keep the request's refills stopped."""
    said = []
    for request_id, what in sorted(outcome.items()):
        if isinstance(what, str):
            said.append(f"request {request_id} stays without refills while teardown(s) {what} stop it")
        elif what:
            said.append(f"request {request_id} is maintained again; refill(s) started again: {', '.join(what)}")
        else:
            said.append(f"request {request_id} is maintained again")
    return "; ".join(said) or None


def subject_line(count: int, execution_name: str) -> str:
    """Fewer than 100 characters whatever the execution name: the name is cut with an ellipsis."""
    head = f"gpufill: approve terminating {count} instance(s)? ("
    room = MAX_SUBJECT - len(head) - 1
    name = execution_name if len(execution_name) <= room else execution_name[: room - len(ELLIPSIS)] + ELLIPSIS
    return f"{head}{name})"


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value)
    return text.strip()[:MAX_TEXT] or None
