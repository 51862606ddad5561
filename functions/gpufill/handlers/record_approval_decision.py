"""RecordApprovalDecision: write who decided what on the approval item, whichever route the answer came by.

Only {"decision": "approved"} approves; anything else sent with the token is a rejection.
With `expired` (the approval timed out) the decision is recorded as expired, and the approval
topic is told: nothing was terminated and the instances keep running. Either way the approval's
reminders end; an approved teardown of a request (or of everything) also ends the max_lifetime
schedule of each request it ends, so a later expiry asks nobody about instances already gone. A
rejected or expired one ends nothing, so it gives back the maintenance it stopped: its own stop
mark goes, and once no other teardown of the request still marks it, the refills it held back
start again, so a request with `maintain` returns to its count.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from gpufill.adapters import approvals, clock, executions, late_rounds, schedules
from gpufill.handlers import refill_restarts
from gpufill.handlers.events import ApprovalAnswerEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.models.teardown import ApprovalDecision, Teardown
from gpufill.policy import approval, lifetime, refill

NOBODY = "nobody: no answer came before the deadline"


@logger.inject_lambda_context(correlation_id_path="execution_name")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=ApprovalAnswerEvent)
    if step.expired:
        decided = ApprovalDecision(decision="expired", approver=NOBODY, decided_at=_now())
    else:
        decision, answer, approver, reason = approval.decide(step.answer)
        decided = ApprovalDecision(
            decision=decision, answer_raw=answer, approver=approver, reason=reason, decided_at=_now()
        )
    item = approvals.record_decision(
        step.execution_name,
        decision=decided.decision,
        answer_raw=decided.answer_raw,
        approver=decided.approver,
        reason=decided.reason,
        decided_at=datetime.fromisoformat(decided.decided_at),
    )
    end_schedule(schedules.cancel_reminders, step.execution_name, kind="reminders")
    if step.teardown is not None and decided.decision == "approved":
        for request_id in lifetime.requests_ended(step.teardown):
            if end_schedule(schedules.cancel_expiry, request_id, kind="lifetime"):
                logger.info("lifetime schedule removed", extra={"request": request_id})
    if step.teardown is not None and step.teardown.trigger and step.execution_arn:
        next_late_round_sooner(step.teardown, execution_name=step.execution_name, state_machine=executions.state_machine_of(step.execution_arn))
    if step.teardown is not None and decided.decision in approval.ENDS_NOTHING and step.execution_arn:
        # An expiry changes nothing the person did not approve: for maintenance it is a rejection.
        note = approval.maintenance_note(restart_refills(
            step.teardown, by=step.teardown.request_id, state_machine=executions.state_machine_of(step.execution_arn)
        ))
        decided = decided.model_copy(update={"note": note})
    if step.teardown is not None and decided.decision == "expired":
        subject, body = approval.expired_notice(step.teardown, execution_name=step.execution_name, deadline=item.get("deadline"))
        approvals.publish(subject, body)
    logger.info("teardown decision", extra=decided.model_dump())
    metrics.add_metric(name=f"Teardown{decided.decision.capitalize()}", unit="Count", value=1)
    return decided.model_dump(mode="json", exclude=set() if decided.note else {"note"})


def next_late_round_sooner(teardown: Teardown, *, execution_name: str, state_machine: str) -> None:
    """A late round of the spend guard is answered: a round a later launch opened behind it (due
    at this one's deadline) comes due in a minute, since this one no longer asks. Never fails the
    decision: left as it is, that round still asks at this one's deadline."""
    request_id = teardown.target.request_id
    number = lifetime.late_round_of(request_id, execution_name) if request_id else None
    if number is None:
        return
    try:
        if late_rounds.mark_answered(request_id, number=number):
            return
        behind = late_rounds.read(request_id)
        if behind and int(behind["round"]) > number and behind["phase"] == lifetime.LATE_OPEN:
            schedules.move_expiry(request_id, clock.iso_now(), state_machine, str(behind["round"]))
            logger.info("next late round moved sooner", extra={"late_round": behind["round"]})
    except (ClientError, BotoCoreError) as error:
        logger.warning("next late round not moved", extra={"error": str(error)})


def restart_refills(teardown: Teardown, *, by: str, state_machine: str) -> dict[str, list[str] | str]:
    """A rejected or expired teardown ends nothing, so the requests it stopped keep their
    maintenance: the one it names and those whose instances it listed (refill_restarts.give_back).
    Answers per request: the refill runs started, or the teardowns still stopping it (by name)."""
    owners = refill.requests_to_resume(teardown.target.request_id, [o for b in teardown.regions for o in b.requests])
    return refill_restarts.give_back(owners, by=by, state_machine=state_machine)


def end_schedule(cancel: Callable[[str], bool], name: str, *, kind: str) -> bool:
    """Delete a schedule the decision makes needless, never failing the decision for it: an approved
    teardown must go on to terminate. One left behind ends on its own: reminders at the approval's
    deadline (each names an approval already answered, which `gpufill approve` says), a lifetime
    schedule in a teardown that finds nothing left and asks nobody."""
    try:
        return cancel(name)
    except (ClientError, BotoCoreError) as error:
        logger.warning("schedule not deleted", extra={"kind": kind, "for": name, "error": str(error)})
        metrics.add_metric(name="SchedulesNotDeleted", unit="Count", value=1)
        return False


def _now() -> str:
    return clock.iso_now()
