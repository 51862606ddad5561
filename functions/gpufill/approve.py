"""`gpufill approve|reject`: answer a pending approval (a teardown, or a Capacity Block purchase) with
its task token, and say what the answer did.

`answer` is the one place an answer is made, whichever route it takes (the CLI, or a deployed
function that answers for a person): it takes the clients and the approver as arguments.

Order matters: the answer is first claimed on the approval item with a condition (nobody answered
yet, no decision recorded), then sent with SendTaskSuccess. So a second answer, or one after the
deadline, is refused with a clear message (saying what the first answer did) and changes nothing.
When the reply to SendTaskSuccess is lost or refused (a transport error, or TaskTimedOut on
botocore's retry of a call that did arrive), nothing is assumed: the execution's history says
whether Step Functions took this answer, and what it did since (bought or not, terminated or not);
only an answer that did not arrive gives the claim back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal

from botocore.exceptions import BotoCoreError, ClientError

from gpufill.adapters import approvals
from gpufill.constants import instances_table_name, state_machine_name
from gpufill.policy import answers
from gpufill.policy.approval import answer_json

Answer = Literal["approved", "rejected"]
EXECUTION_ARN_PARTS = 8  # arn:aws:states:REGION:ACCOUNT:execution:MACHINE:NAME
# How long a lost reply is settled for: the answered execution needs seconds to record the decision
# and to buy a block or terminate instances; past this the report says what is known so far.
SETTLE_SECONDS = 60.0
SETTLE_POLL_SECONDS = 1.0  # the longest pause between reads; the first ones are shorter (FIRST_POLL_SECONDS, doubling)
FIRST_POLL_SECONDS = 0.05
# Codes that mean the token is closed: by this answer whose reply was lost, by another, or by the timeout.
CLOSED_TOKEN = ("TaskTimedOut", "InvalidToken", "TaskDoesNotExist")


class ApprovalError(Exception):
    """Nothing was sent and nothing changed; the message says why and what to do."""


class NoPendingApproval(ApprovalError):
    pass


class AlreadyDecided(ApprovalError):
    pass


class ApprovalExpired(ApprovalError):
    pass


class NotDelivered(ApprovalError):
    """Step Functions refused the answer and the approval still waits: answer again."""


class Ambiguous(ApprovalError):
    """A name that matches several pending approvals: they are listed, none is answered."""

    def __init__(self, message: str, items: list[dict]):
        super().__init__(message)
        self.items = items


class AnswerUnknown(Exception):
    """The reply was lost and the execution could not be read: the answer may have arrived."""


@dataclass(frozen=True)
class ExecutionRef:
    name: str
    region: str | None = None
    env: str | None = None


@dataclass(frozen=True)
class Answered:
    """An answer Step Functions took, and what it did so far."""

    approval_id: str
    kind: str
    execution_name: str
    decision: str
    approver: str
    reason: str | None
    item: dict
    effect: answers.Effect | None = None  # read from the execution when the reply was settled
    settled_after: str | None = None  # the error the reply met, when it was lost or refused
    nothing_to_do: bool = False  # a teardown whose instances had all ended already
    instance_ids: list[str] = field(default_factory=list)


def parse_execution(ref: str) -> ExecutionRef:
    """An execution name, an approval id (KIND:NAME), or an execution ARN (which also names the region
    and the deployment's env)."""
    parts = ref.split(":")
    if ref.startswith("arn:") and len(parts) == EXECUTION_ARN_PARTS and parts[5] == "execution":
        machine, name = parts[6], parts[7]
        prefix = state_machine_name("")
        env = machine[len(prefix) :] if machine.startswith(prefix) else None
        return ExecutionRef(name=name, region=parts[3], env=env)
    if ref.startswith("arn:"):
        raise ApprovalError(f"{ref!r} is not a Step Functions execution ARN (arn:aws:states:REGION:ACCOUNT:execution:MACHINE:NAME)")
    return ExecutionRef(name=ref)


def table_name(env: str) -> str:
    return instances_table_name(env)


def find(ref: str, table, now: datetime | None = None) -> dict:
    """The one approval item `ref` names: an ARN or an execution name (that execution's approval),
    an approval id (KIND:NAME), or a request id (its pending purchase or teardown). Raises Ambiguous
    when more pending approvals than one answer to it, NoPendingApproval when none is on record."""
    now = now or datetime.now(UTC)
    parsed = parse_execution(ref)
    if parsed.region:  # an ARN names one execution, which has at most one approval item
        item = approvals.get(parsed.name, table)
        if item is None or "task_token" not in item:
            raise NoPendingApproval(_none_on_record(parsed.name))
        return item
    found = answers.match(parsed.name, approvals.all_items(table), now)
    if found.pending:
        listed = "; ".join(f"{answers.approval_id(i)} ({describe(i)})" for i in found.pending)
        raise Ambiguous(f"{parsed.name!r} matches {len(found.pending)} pending approvals: {listed}. "
                        "Answer one by its approval id; nothing changed", list(found.pending))
    if found.whole_deployment is not None:
        raise AlreadyDecided(
            f"request {parsed.name!r} has no approval of its own waiting; {answers.approval_id(found.whole_deployment)} "
            "(every instance of the deployment) waits for an answer: answer it by its id, as it ends more than this "
            "request; nothing changed"
        )
    if found.chosen is None:
        raise NoPendingApproval(_none_on_record(parsed.name))
    return found.chosen


def describe(item: dict) -> str:
    """One line: what the approval asks."""
    if answers.kind_of(item) == answers.PURCHASE:
        block = _loads(item.get("purchase"))
        return (f"buy a Capacity Block for request {answers.target_of(item).get('request_id', '?')}: "
                f"{block.get('instance_count')} x {block.get('instance_type')} in {block.get('availability_zone')}, "
                f"upfront ${float(block.get('upfront_fee') or 0):,.2f}")
    target = answers.target_of(item)
    what = ("every instance of the deployment" if target.get("all")
            else f"of request {target['request_id']}" if target.get("request_id") else "given by id")
    return f"terminate {len(item.get('instance_ids') or [])} instance(s) {what}"


def answer(
    ref: str,
    decision: Answer,
    *,
    approver: str,
    reason: str | None,
    sfn,
    table,
    now: datetime | None = None,
    settle_seconds: float = SETTLE_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
    follow: bool = True,
) -> Answered:
    """Claim the approval `ref` names, send `decision`, and settle a lost or refused reply.
    `follow`: once a lost reply's answer is found taken, also wait (within settle_seconds) for what it
    did to be final; without it, what it did so far is returned at once (follow_effect goes on).

    Returns what Step Functions took; raises ApprovalError when nothing was sent and nothing changed,
    AnswerUnknown when the reply was lost and the execution cannot be read."""
    now = now or datetime.now(UTC)
    item = find(ref, table, now)
    name, kind = item["execution_name"], answers.kind_of(item)
    refuse_if_settled(name, item, now, sfn)
    ids = list(item.get("instance_ids") or [])
    gone = kind == answers.TEARDOWN and answers.all_gone(ids, approvals.records(ids, table))
    try:
        approvals.claim(name, answer=decision, answered_by=approver, reason=reason, at=now, table=table)
    except approvals.AlreadyAnswered:
        refuse_if_settled(name, approvals.get(name, table) or item, now, sfn)
        raise AlreadyDecided(f"{answers.approval_id(item)} was answered at the same moment by someone else; nothing changed") from None
    made = Answered(answers.approval_id(item), kind, name, decision, approver, reason, item, nothing_to_do=gone, instance_ids=ids)
    try:
        sfn.send_task_success(taskToken=item["task_token"], output=answer_json(decision, approver, reason))
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "") or "an error"
        # A closed token or a server error may hide an answer that was taken; any other 4xx is a refusal.
        server_side = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400) >= 500
        return _settle(made, code, code in CLOSED_TOKEN or server_side, sfn, table, now, settle_seconds, sleep, follow)
    except BotoCoreError as error:  # the reply was lost on the way (timeouts, connection reset)
        return _settle(made, type(error).__name__, True, sfn, table, now, settle_seconds, sleep, follow)
    return made


def settle_claimed(
    item: dict,
    error: str,
    *,
    decision: str,
    sfn,
    table,
    now: datetime | None = None,
    settle_seconds: float = SETTLE_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> Answered:
    """The fate of an answer made elsewhere (the AnswerApproval function) whose reply was lost: `item`
    is the approval as read after it. Nothing claimed means nothing was sent; a claim by someone else
    with another decision is someone else's answer; a claim of `decision` (the one just sent) is settled
    from the execution's history, as a lost SendTaskSuccess is, and reported with who AWS authenticated."""
    now = now or datetime.now(UTC)
    label = answers.approval_id(item)
    if not item.get("answered_at"):
        refuse_if_settled(item["execution_name"], item, now, sfn)  # expired meanwhile: said so
        raise NotDelivered(f"{error}; the approval item records no answer to {label}: nothing was sent and "
                           "nothing changed. Answer again")
    claimed_by = item.get("answered_by") or ""
    if item.get("answer") != decision:
        refuse_if_settled(item["execution_name"], item, now, sfn)  # another person's answer: said what it did
    kind = answers.kind_of(item)
    ids = list(item.get("instance_ids") or [])
    gone = kind == answers.TEARDOWN and answers.all_gone(ids, approvals.records(ids, table))
    made = Answered(label, kind, item["execution_name"], item.get("answer"), claimed_by, item.get("answer_reason"),
                    item, nothing_to_do=gone, instance_ids=ids)
    # The claim's own time: a claim Step Functions never took is given back (release matches on it).
    claimed_at = datetime.fromisoformat(item["answered_at"])
    return _settle(made, error, True, sfn, table, claimed_at, settle_seconds, sleep)


def follow_effect(
    made: Answered, sfn, *, settle_seconds: float = SETTLE_SECONDS, sleep: Callable[[float], None] = time.sleep
) -> Answered:
    """`made` with what its answer did once final (or so far, after settle_seconds), read from the
    execution's history: for an answer taken whose effect was still under way when it was reported."""
    if made.effect is None or made.effect.done:
        return made
    until = time.monotonic() + settle_seconds
    pauses = (min(SETTLE_POLL_SECONDS, FIRST_POLL_SECONDS * 2 ** min(n, 20)) for n in range(10**6))
    effect = made.effect
    while not effect.done and time.monotonic() < until:
        sleep(next(pauses))
        try:
            status, history, output = _read(sfn, made.item["execution_arn"])
        except (ClientError, BotoCoreError):
            break  # the answer was taken: what it did so far stands
        effect = answers.effect(made.kind, history, status, output)
    return replace(made, effect=effect)


def _settle(
    made: Answered, error: str, maybe_taken: bool, sfn, table, now: datetime, settle_seconds: float, sleep,
    follow: bool = True,
) -> Answered:
    """What Step Functions did with this answer, read from the execution: never guessed from `error`.
    `maybe_taken`: the error does not say the answer was refused (a closed token, a lost reply), so a
    history that still shows the wait is read again for a while before the answer counts as not sent."""
    item, kind = made.item, made.kind
    until = time.monotonic() + settle_seconds
    pauses = (min(SETTLE_POLL_SECONDS, FIRST_POLL_SECONDS * 2 ** min(n, 20)) for n in range(10**6))
    while True:
        try:
            status, history, output = _read(sfn, item["execution_arn"])
        except (ClientError, BotoCoreError) as failure:
            if not maybe_taken:  # refused outright: nothing was taken, whatever the history would say
                approvals.release(made.execution_name, at=now, table=table)
                raise NotDelivered(f"Step Functions refused the answer to {made.approval_id} ({error}); nothing "
                                   f"changed: answer again (its execution could not be read either: {failure})") from None
            raise AnswerUnknown(
                f"the reply to the answer of {made.approval_id} was lost ({error}) and its execution could not be read "
                f"({failure}): the answer may have arrived. Check with `gpufill watch {made.execution_name}` before "
                "answering again; the answer stays claimed on the approval so nobody answers it twice meanwhile"
            ) from None
        taking = answers.answer_taken(kind, history, status)
        if taking.taken == "waiting" and maybe_taken and time.monotonic() < until:
            sleep(next(pauses))  # the token is closed: its history shows why within moments
            continue
        break
    if answers.is_this_answer(taking, made.decision, made.approver):
        effect = answers.effect(kind, history, status, output)
        while follow and not effect.done and time.monotonic() < until:
            sleep(next(pauses))
            try:
                status, history, output = _read(sfn, item["execution_arn"])
            except (ClientError, BotoCoreError):
                break  # the answer was taken: what it did so far stands
            effect = answers.effect(kind, history, status, output)
        return replace(made, effect=effect, settled_after=error)
    approvals.release(made.execution_name, at=now, table=table)
    if taking.taken == "answered":
        other = taking.answer or {}
        effect = answers.effect(kind, history, status, output)
        raise AlreadyDecided(
            f"{made.approval_id} had already been answered {other.get('decision')!r} by {other.get('approver')} "
            f"(another route than this answer): {effect.text}; this answer changed nothing"
        )
    if taking.taken == "timed_out":
        raise ApprovalExpired(f"the approval {made.approval_id} timed out before this answer arrived "
                              f"(deadline {item.get('deadline')}); {_unchanged(item)}")
    if taking.taken in ("ended", "not_asked"):
        raise NoPendingApproval(f"execution {made.execution_name!r} is no longer waiting for an approval (it is "
                                f"{status}; Step Functions answered {error}); nothing changed")
    raise NotDelivered(f"Step Functions did not take the answer to {made.approval_id} ({error}); it still waits for an "
                       f"answer until {item.get('deadline')}; nothing changed: answer again")


def _read(sfn, arn: str) -> tuple[str, list[dict], dict | None]:
    described = sfn.describe_execution(executionArn=arn)
    events: list[dict] = []
    kwargs: dict = {}
    while True:
        page = sfn.get_execution_history(executionArn=arn, maxResults=1000, **kwargs)
        events.extend(page.get("events", []))
        if not page.get("nextToken"):
            break
        kwargs["nextToken"] = page["nextToken"]
    return described["status"], events, _loads(described.get("output"))


def first_effect(item: dict, sfn) -> str:
    """What the approval's first answer did, from its execution; '' when it cannot be read."""
    if sfn is None or not item.get("execution_arn"):
        return ""
    try:
        status, history, output = _read(sfn, item["execution_arn"])
    except (ClientError, BotoCoreError):
        return ""
    return answers.effect(answers.kind_of(item), history, status, output).text


def refuse_if_settled(name: str, item: dict, now: datetime, sfn=None) -> None:
    """Raise when the approval was already decided, answered, or is past its deadline; the message
    says what the first answer did."""
    label = answers.approval_id(item) if "execution_name" in item else name
    if item.get("decided_at"):
        if item.get("decision") == "expired":
            raise ApprovalExpired(
                f"the approval {label} expired at {item.get('deadline')} without an answer; {_unchanged(item)}"
            )
        did = first_effect(item, sfn)
        raise AlreadyDecided(
            f"{label} was already {item.get('decision')} by {item.get('approver')} at {item.get('decided_at')}"
            + (f": {did}" if did else "") + "; this answer changed nothing"
        )
    if item.get("answered_at"):
        did = first_effect(item, sfn)
        raise AlreadyDecided(
            f"{label} was already answered {item.get('answer')!r} by {item.get('answered_by')} at "
            f"{item.get('answered_at')}" + (f": {did}" if did else "") + "; this answer changed nothing"
        )
    deadline = item.get("deadline")
    if deadline and datetime.fromisoformat(deadline) <= now:
        raise ApprovalExpired(f"the approval {label} expired at {deadline}; {_unchanged(item)}")


def summary(item: dict) -> list[dict]:
    """The instances the approval was about, as recorded."""
    try:
        return json.loads(item.get("instances") or "[]")
    except json.JSONDecodeError:
        return []


def _none_on_record(name: str) -> str:
    return (
        f"no approval is on record for {name!r}, neither as an approval id, a teardown's or a run's execution name, "
        "nor as the request a purchase or a teardown is about: check the name, the region and --env (each deployment "
        "has its own table); a teardown that matched nothing asks no approval; nothing changed"
    )


def _loads(text) -> dict:
    try:
        value = json.loads(text or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _unchanged(item: dict) -> str:
    """What an answer that came too late leaves as it was: a teardown's instances, or a purchase not made."""
    if answers.kind_of(item) == answers.PURCHASE:
        return "nothing was bought and nothing changed. Run the request again to be asked again."
    return "nothing was terminated and nothing changed. Start a new teardown to ask again."
