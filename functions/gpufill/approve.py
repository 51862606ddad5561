"""`gpufill approve|reject EXECUTION`: answer a pending teardown approval with its task token.

The same code answers on AWS and on the local engine (the engine hands in moto's clients).
Order matters: the answer is first claimed on the approval item with a condition (nobody
answered yet, no decision recorded), then sent with SendTaskSuccess. So a second answer,
or one after the deadline, is refused with a clear message and changes nothing; and when
Step Functions refuses the token (the task timed out or the execution is over), the claim
is taken back and the item says what really happened.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from botocore.exceptions import ClientError

from gpufill.adapters import approvals
from gpufill.constants import instances_table_name, state_machine_name
from gpufill.policy.approval import answer_json

Answer = Literal["approved", "rejected"]
EXECUTION_ARN_PARTS = 8  # arn:aws:states:REGION:ACCOUNT:execution:MACHINE:NAME


class ApprovalError(Exception):
    """Nothing was sent and nothing changed; the message says why and what to do."""


class NoPendingApproval(ApprovalError):
    pass


class AlreadyDecided(ApprovalError):
    pass


class ApprovalExpired(ApprovalError):
    pass


@dataclass(frozen=True)
class ExecutionRef:
    name: str
    region: str | None = None
    env: str | None = None


def parse_execution(ref: str) -> ExecutionRef:
    """An execution name, or its ARN (which also names the region and the deployment's env)."""
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


def answer(
    execution: str,
    decision: Answer,
    *,
    approver: str,
    reason: str | None,
    sfn,
    table,
    now: datetime | None = None,
) -> dict:
    """Send the decision for `execution`'s pending approval; returns the approval item as it was."""
    name = parse_execution(execution).name
    now = now or datetime.now(UTC)
    item = approvals.get(name, table)
    if item is None or "task_token" not in item:
        raise NoPendingApproval(
            f"no teardown approval is on record for execution {name!r}: check the name, the region and "
            "--env (each deployment has its own table); a teardown that matched nothing asks no approval"
        )
    refuse_if_settled(name, item, now)
    try:
        approvals.claim(name, answer=decision, answered_by=approver, reason=reason, at=now, table=table)
    except approvals.AlreadyAnswered:
        refuse_if_settled(name, approvals.get(name, table) or item, now)
        raise AlreadyDecided(f"execution {name!r} was answered at the same moment by someone else; nothing changed") from None
    try:
        sfn.send_task_success(taskToken=item["task_token"], output=answer_json(decision, approver, reason))
    except ClientError as error:
        approvals.release(name, at=now, table=table)
        code = error.response.get("Error", {}).get("Code", "")
        if code == "TaskTimedOut":
            raise ApprovalExpired(
                f"the approval of {name!r} timed out before this answer arrived (deadline {item.get('deadline')}); "
                f"{_unchanged(item)}"
            ) from None
        if code in ("InvalidToken", "TaskDoesNotExist"):
            raise NoPendingApproval(
                f"execution {name!r} is no longer waiting for an approval (it was stopped or has ended: "
                f"Step Functions answered {code}); nothing changed"
            ) from None
        raise
    return item


def refuse_if_settled(name: str, item: dict, now: datetime) -> None:
    """Raise when the approval was already decided, answered, or is past its deadline."""
    if item.get("decided_at"):
        if item.get("decision") == "expired":
            raise ApprovalExpired(
                f"the approval of {name!r} expired at {item.get('deadline')} without an answer; {_unchanged(item)}"
            )
        raise AlreadyDecided(
            f"execution {name!r} was already {item.get('decision')} by {item.get('approver')} at "
            f"{item.get('decided_at')}; nothing changed"
        )
    if item.get("answered_at"):
        raise AlreadyDecided(
            f"execution {name!r} was already answered {item.get('answer')!r} by {item.get('answered_by')} at "
            f"{item.get('answered_at')}; nothing changed"
        )
    deadline = item.get("deadline")
    if deadline and datetime.fromisoformat(deadline) <= now:
        raise ApprovalExpired(
            f"the approval of {name!r} expired at {deadline}; {_unchanged(item)}"
        )


def summary(item: dict) -> list[dict]:
    """The instances the approval was about, as recorded."""
    try:
        return json.loads(item.get("instances") or "[]")
    except json.JSONDecodeError:
        return []


def _unchanged(item: dict) -> str:
    """What an answer that came too late leaves as it was: a teardown's instances, or a purchase not made."""
    if item.get("approval_for") == "capacity-block-purchase":
        return "nothing was bought and nothing changed. Run the request again to be asked again."
    return "nothing was terminated and nothing changed. Start a new teardown to ask again."
