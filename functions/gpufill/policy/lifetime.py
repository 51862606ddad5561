"""The spend guard (request field `max_lifetime`): when a request expires, and what is scheduled then.

A request with `max_lifetime` expires at a fixed moment, set once when it is accepted. When its
provisioning run records its first instances, an EventBridge Scheduler one-time schedule is
created for that moment; at it, Scheduler starts the teardown of the request, which asks a
person, as every teardown does. While an approval waits, a rate schedule has the RemindApprovers
function publish it again every hour until its deadline, unless the approval was answered or its
run ended (reminder_ends), in which case the function deletes the schedule instead. Pure: names, expressions and inputs only (adapters/schedules.py
makes the calls).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta

from gpufill.constants import APPROVAL_REMINDER_SECONDS, TRIGGER_MAX_LIFETIME
from gpufill.models.teardown import Teardown

# EventBridge Scheduler: a schedule name is 1-64 characters of [0-9a-zA-Z-_.].
MAX_SCHEDULE_NAME = 64
_NOT_IN_SCHEDULE_NAME = re.compile(r"[^0-9A-Za-z_.-]")
# gpufill's own rule for execution names (the local engine enforces it): A-Za-z0-9-_, 1-80.
MAX_EXECUTION_NAME = 80
_NOT_IN_EXECUTION_NAME = re.compile(r"[^0-9A-Za-z_-]")
EXPIRY_SUFFIX = "-expired"
# The universal target Scheduler calls for the lifetime: Step Functions' StartExecution.
START_EXECUTION_TARGET = "arn:aws:scheduler:::aws-sdk:sfn:startExecution"
REQUESTED_BY = "gpufill spend guard (max_lifetime)"
# A launch recorded this close to the expiry, or after it, may be missed by the teardown the expiry
# starts (that teardown lists the request's instances once, from an index read a moment later):
# it asks again in a round of its own (late_round).
LATE_LAUNCH_SECONDS = 60
# An approved `"all": true` teardown deletes the lifetime schedules of at most this many requests
# (one call each, within the decision step's time); a schedule left behind starts a teardown that
# finds nothing and asks nobody (NOTHING_TO_TERMINATE).
MAX_SCHEDULES_ENDED = 100


def expires_at(accepted_at: datetime, max_lifetime_seconds: int) -> str:
    """The moment a request accepted at `accepted_at` expires (whole seconds, UTC, ISO 8601)."""
    moment = accepted_at.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=max_lifetime_seconds)
    return moment.isoformat()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _named(kind: str, identifier: str) -> str:
    """`<kind>-<id>` within Scheduler's name rules; an id that had to change or be cut gets a digest
    of the exact id, so two ids never share a schedule."""
    clean = _NOT_IN_SCHEDULE_NAME.sub("-", identifier)
    plain = f"{kind}-{clean}"
    if clean == identifier and len(plain) <= MAX_SCHEDULE_NAME:
        return plain
    room = MAX_SCHEDULE_NAME - len(kind) - 2 - 8
    return f"{kind}-{clean[:room]}-{_digest(identifier)}"


def late_round(expires_at: str, now: datetime, launch_token: str) -> str | None:
    """The round of the spend guard that covers a launch recorded at `now`: None for the request's
    own (its schedule comes due after the records are written, so its teardown lists them), else a
    round of this launch alone, asked a minute later. The request's own schedule may have run
    already and deleted itself: made again, it would start the teardown of the same name, which
    Step Functions refuses (ExecutionAlreadyExists) or answers with the one already asking, and
    the instances launched now would be in no teardown. A late round is named after the launch's
    client token, so a retried step (same token, same instances) makes the same round once and a
    second delivery of its schedule starts nothing new."""
    if now < datetime.fromisoformat(expires_at) - timedelta(seconds=LATE_LAUNCH_SECONDS):
        return None
    return _digest(launch_token)


# --- late rounds: one asking at a time per request ------------------------------------------
# A request's late rounds are numbered 1, 2, ... and kept on one item ("late#<request id>"):
# the current round, its phase, when its schedule is due, until when its approval may wait, and
# the launches (their late_round digests) it already holds. A round is "open" from its schedule's
# creation until its teardown lists the request's instances ("asked"), then "answered" once its
# approval is decided. A late launch joins the open round (the listing, after its records, will
# include it); a launch that finds the round already listed opens the next round, due once the
# listed one can no longer be waiting (its deadline; sooner when it is answered), so a request
# never has two late rounds asking at once, and every launch after the expiry is in one.
LATE_OPEN = "open"
LATE_ASKED = "asked"
LATE_ANSWERED = "answered"
# An open round whose teardown has not listed this long after its schedule was due was lost (its
# start failed for good, Scheduler gave up): a launch opens the next round instead of joining it.
LATE_ROUND_LOST_SECONDS = 15 * 60
_LATE_NAME = re.compile(r"-r(\d+)" + re.escape(EXPIRY_SUFFIX) + "$")


def late_step(item: dict | None, launch: str, now: datetime) -> dict:
    """What a late launch (digest `launch`, recorded at `now`) does with its request's late rounds,
    given their item (None: no late round yet):
    - {"do": "nothing"}: it is already in a round that listed it (a retried step);
    - {"do": "ensure", "round", "due"}: it opened the current round; its schedule is made again
      (a retried step: the schedule may never have been made);
    - {"do": "join", "round"}: the open round will list it;
    - {"do": "open", "round", "due", "expect"}: it opens the next round, due at `due`; the item
      must still be `expect` (round and phase) when it is written."""
    due_soon = (now + timedelta(seconds=LATE_LAUNCH_SECONDS)).astimezone(UTC).replace(microsecond=0)
    if item is None:
        return {"do": "open", "round": 1, "due": due_soon.isoformat(), "expect": None}
    number, phase = int(item["round"]), item["phase"]
    expect = {"round": number, "phase": phase}
    if launch in (item.get("launches") or ()):
        if phase == LATE_OPEN and item.get("opened_by") == launch:
            return {"do": "ensure", "round": number, "due": item["due"]}
        return {"do": "nothing"}
    if phase == LATE_OPEN:
        if now <= datetime.fromisoformat(item["due"]) + timedelta(seconds=LATE_ROUND_LOST_SECONDS):
            return {"do": "join", "round": number}
        return {"do": "open", "round": number + 1, "due": due_soon.isoformat(), "expect": expect}
    if phase == LATE_ASKED and item.get("until"):
        # The listed round may still be waiting for its answer: the next asks once it cannot be.
        later = datetime.fromisoformat(item["until"]) + timedelta(seconds=LATE_LAUNCH_SECONDS)
        return {"do": "open", "round": number + 1, "due": max(later, due_soon).isoformat(), "expect": expect}
    return {"do": "open", "round": number + 1, "due": due_soon.isoformat(), "expect": expect}


def late_round_of(request_id: str, execution_name: str) -> int | None:
    """The late round a teardown execution is (its name, expiry_execution_name), or None."""
    found = _LATE_NAME.search(execution_name)
    if found is None or expiry_execution_name(request_id, found.group(1)) != execution_name:
        return None
    return int(found.group(1))


def lifetime_schedule_name(request_id: str, late: str | None = None) -> str:
    """One per request (a retried step, a refill run or a continued execution finds it taken), and
    one per late round. A request id never holds a '.', so no request's name is another's round."""
    return _named("life", request_id if late is None else f"{request_id}.{late}")


def reminder_schedule_name(execution_name: str) -> str:
    return _named("remind", execution_name)


def expiry_execution_name(request_id: str, late: str | None = None) -> str:
    """The teardown the lifetime starts: one name per request (and per late round), so a repeated
    delivery by Scheduler (at least once) starts it once."""
    clean = _NOT_IN_EXECUTION_NAME.sub("-", request_id)
    if late is not None:
        room = MAX_EXECUTION_NAME - len(EXPIRY_SUFFIX) - len(late) - 2
        return f"{clean[:room]}-r{late}{EXPIRY_SUFFIX}"
    if clean == request_id and len(clean) + len(EXPIRY_SUFFIX) <= MAX_EXECUTION_NAME:
        return clean + EXPIRY_SUFFIX
    room = MAX_EXECUTION_NAME - len(EXPIRY_SUFFIX) - 9
    return f"{clean[:room]}-{_digest(request_id)}{EXPIRY_SUFFIX}"


def due_moment(expires_at: str, now: datetime) -> str:
    """When the lifetime's schedule runs: at the expiry, or a minute from now when the request
    already expired before its first launch (a long wait_for_capacity). Scheduler is not trusted to
    run a one-time schedule created for a moment already past."""
    earliest = (now + timedelta(minutes=1)).astimezone(UTC).replace(microsecond=0)
    return max(datetime.fromisoformat(expires_at), earliest).isoformat()


def at_expression(moment: str) -> str:
    """Scheduler's one-time expression, `at(yyyy-mm-ddThh:mm:ss)`, in UTC (the schedule's time zone)."""
    when = datetime.fromisoformat(moment).astimezone(UTC)
    return f"at({when.strftime('%Y-%m-%dT%H:%M:%S')})"


def teardown_request(request_id: str) -> dict:
    """The execution input the lifetime's schedule sends: the teardown of that request."""
    return {"action": "teardown", "request_id": request_id, "requested_by": REQUESTED_BY, "trigger": TRIGGER_MAX_LIFETIME}


def expiry_target_input(state_machine_arn: str, request_id: str, late: str | None = None) -> str:
    """The universal target's input: StartExecution's own parameters."""
    return json.dumps(
        {
            "StateMachineArn": state_machine_arn,
            "Name": expiry_execution_name(request_id, late),
            "Input": json.dumps(teardown_request(request_id), separators=(",", ":")),
        },
        separators=(",", ":"),
    )


def reminder_window(asked_at: datetime, deadline: datetime) -> tuple[datetime, datetime] | None:
    """(first reminder, last moment) of an approval's reminders, or None when its deadline comes
    before the first would."""
    first = asked_at + timedelta(seconds=APPROVAL_REMINDER_SECONDS)
    if first >= deadline:
        return None
    return first, deadline


def reminder_expression() -> str:
    hours, rest = divmod(APPROVAL_REMINDER_SECONDS, 3600)
    return f"rate({hours} hour{'s' if hours != 1 else ''})" if not rest else f"rate({APPROVAL_REMINDER_SECONDS // 60} minutes)"


def reminder_input(execution_name: str, subject: str, message: str) -> str:
    """The event the reminders' schedule sends the RemindApprovers function: which approval, and
    the reminder to publish while it waits."""
    return json.dumps({"execution_name": execution_name, "subject": subject, "message": message}, separators=(",", ":"))


# Why a reminder is not sent (and its schedule is deleted): the approval cannot be answered any more.
REMINDER_APPROVAL_GONE = "approval gone"
REMINDER_ANSWERED = "approval answered"
REMINDER_EXPIRED = "approval expired"
REMINDER_RUN_ENDED = "teardown run no longer running"


def reminder_ends(approval_item: dict | None, execution_status: str | None, now: datetime) -> str | None:
    """Why the reminder due `now` must not be sent, or None to send it. A reminder asks for an answer
    that only a waiting task token can take: none once the approval was decided (or claimed by an
    answer under way), past its deadline, or once its execution stopped, failed or was never there,
    even when the decision could not delete the schedule."""
    if approval_item is None:
        return REMINDER_APPROVAL_GONE
    if approval_item.get("decided_at") or approval_item.get("answered_at") or approval_item.get("status", "PENDING") != "PENDING":
        return REMINDER_ANSWERED
    deadline = approval_item.get("deadline")
    if deadline and now >= datetime.fromisoformat(deadline):
        return REMINDER_EXPIRED
    if execution_status != "RUNNING":
        return REMINDER_RUN_ENDED
    return None


def requests_ended(teardown: Teardown) -> list[str]:
    """The requests an approved teardown ends whole, whose lifetime schedules it deletes: the one it
    names, or with `all` those it holds. Instance ids given by hand may leave a request's other
    instances running, still under their guard."""
    if teardown.target.request_id is not None:
        return [teardown.target.request_id]
    if teardown.target.all:
        return sorted({owner for batch in teardown.regions for owner in batch.requests})[:MAX_SCHEDULES_ENDED]
    return []
