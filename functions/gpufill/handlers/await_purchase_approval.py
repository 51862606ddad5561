"""AwaitPurchaseApproval's Lambda: park the task token in the table and ask a person, on the
approval topic, to approve buying the chosen Capacity Block.

The same mechanism as a teardown's approval (the item "approval#<execution name>" with the token,
answered by `gpufill approve|reject` or send-task-success), so the same commands answer it.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import approvals, clock
from gpufill.handlers.events import PurchaseApprovalEvent
from gpufill.handlers.observability import approval_not_published, logger, metrics, tracer, transient_aws_errors
from gpufill.handlers.await_teardown_approval import _when
from gpufill.policy import approval
from gpufill.policy.capacity_blocks import purchase_message


@logger.inject_lambda_context(correlation_id_path="execution_name")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=PurchaseApprovalEvent)
    requested_at = _when(step.entered_at)
    deadline = approval.deadline(requested_at, step.approval_timeout_seconds)
    offering = step.block["offering"]
    approvals.record_pending_purchase(
        execution_name=step.execution_name,
        execution_arn=step.execution_arn,
        task_token=step.task_token,
        request_id=step.request.request_id,
        offering=offering,
        requested_at=requested_at,
        deadline=deadline,
    )
    subject, body = purchase_message(
        offering,
        request_id=step.request.request_id,
        commands=approval.commands(step.execution_arn, step.task_token),
        expires=deadline,
    )
    message_id, refused = approvals.ask(subject, body)
    if refused:
        approval_not_published(step.execution_name, refused)
        # Said on the item, so `gpufill status` tells whoever looks that nobody was told.
        if not approvals.record_notification(step.execution_name, sent=False, at=clock.now(), error=refused, by="approval request"):
            logger.warning("approval item not marked unnotified")
    logger.info("purchase approval requested", extra={"offering": offering, "deadline": deadline.isoformat()})
    metrics.add_metric(name="PurchaseApprovalsRequested", unit="Count", value=1)
    return {"pending": True, "deadline": deadline.isoformat(timespec="seconds"), "message_id": message_id}
