"""RecordApprovalDecision: write who decided what on the approval item, whichever route the answer came by.

Only {"decision": "approved"} approves; anything else sent with the token is a rejection.
With `expired` (the approval timed out) the decision is recorded as expired, and the approval
topic is told: nothing was terminated and the instances keep running. Either way the approval's
reminders end; an approved teardown of a request (or of everything) also ends the max_lifetime
schedule of each request it ends, so a later expiry asks nobody about instances already gone.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from gpufill.adapters import approvals, clock, schedules
from gpufill.handlers.events import ApprovalAnswerEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.models.teardown import ApprovalDecision
from gpufill.policy import approval, lifetime

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
    if step.teardown is not None and decided.decision == "expired":
        subject, body = approval.expired_notice(step.teardown, execution_name=step.execution_name, deadline=item.get("deadline"))
        approvals.publish(subject, body)
    logger.info("teardown decision", extra=decided.model_dump())
    metrics.add_metric(name=f"Teardown{decided.decision.capitalize()}", unit="Count", value=1)
    return decided.model_dump(mode="json")


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
