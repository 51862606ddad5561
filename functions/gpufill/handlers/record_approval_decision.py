"""RecordApprovalDecision: write who decided what on the approval item, whichever route the answer came by.

Only {"decision": "approved"} approves; anything else sent with the token is a rejection.
With `expired` (the approval timed out) the decision is recorded as expired.
"""

from __future__ import annotations

from datetime import datetime

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import approvals, clock
from gpufill.handlers.events import ApprovalAnswerEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.models.teardown import ApprovalDecision
from gpufill.policy import approval

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
    approvals.record_decision(
        step.execution_name,
        decision=decided.decision,
        answer_raw=decided.answer_raw,
        approver=decided.approver,
        reason=decided.reason,
        decided_at=datetime.fromisoformat(decided.decided_at),
    )
    logger.info("teardown decision", extra=decided.model_dump())
    metrics.add_metric(name=f"Teardown{decided.decision.capitalize()}", unit="Count", value=1)
    return decided.model_dump(mode="json")


def _now() -> str:
    return clock.iso_now()
