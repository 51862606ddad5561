"""AwaitTeardownApproval's Lambda: park the task token in the table and ask a person on the approval topic.

The state machine then waits (waitForTaskToken) until `gpufill approve|reject`, or
`aws stepfunctions send-task-success`, answers with the token, or the approval times out.
"""

from __future__ import annotations

from datetime import UTC, datetime

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import approvals, clock, schedules
from gpufill.handlers.events import ApprovalRequestEvent
from gpufill.handlers.observability import approval_not_published, logger, metrics, tracer, transient_aws_errors
from gpufill.policy import approval, lifetime


@logger.inject_lambda_context(correlation_id_path="execution_name")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=ApprovalRequestEvent)
    requested_at = _when(step.entered_at)
    deadline = approval.deadline(requested_at, step.approval_timeout_seconds)
    # Reminders come from EventBridge Scheduler, not from this execution: the wait keeps its one
    # task token (so the commands in the first message stay valid) and costs no history events;
    # the schedule ends itself at the deadline, and the decision deletes it sooner. Made before
    # the token can be answered (it is on the item and in the message once they exist), so a
    # decision always finds it to delete. Counted from now: a retried step may be well past the
    # state's entry time.
    window = lifetime.reminder_window(clock.now(), deadline)
    if window is not None:
        again_subject, again_body = approval.reminder(
            step.teardown, execution_arn=step.execution_arn, task_token=step.task_token, expires=deadline
        )
        schedules.schedule_reminders(step.execution_name, subject=again_subject, message=again_body, first=window[0], until=window[1])
    approvals.record_pending(
        execution_name=step.execution_name,
        execution_arn=step.execution_arn,
        task_token=step.task_token,
        teardown=step.teardown.model_dump(mode="json"),
        requested_at=requested_at,
        deadline=deadline,
    )
    subject, body = approval.message(
        step.teardown, execution_arn=step.execution_arn, task_token=step.task_token, expires=deadline
    )
    message_id, refused = approvals.ask(subject, body)
    if refused:
        approval_not_published(step.execution_name, refused)
        # Said on the item, so `gpufill status` tells whoever looks that nobody was told.
        if not approvals.record_notification(step.execution_name, sent=False, at=clock.now(), error=refused, by="approval request"):
            logger.warning("approval item not marked unnotified")
    logger.info(
        "teardown approval requested",
        extra={"instances": [i.instance_id for i in step.teardown.instances], "deadline": deadline.isoformat()},
    )
    metrics.add_metric(name="TeardownApprovalsRequested", unit="Count", value=1)
    # The state machine ignores this answer: the task ends when the token is answered.
    return {"pending": True, "deadline": deadline.isoformat(timespec="seconds"), "message_id": message_id}


def _when(timestamp: str) -> datetime:
    """$$.State.EnteredTime ("2026-01-02T03:04:05.678Z"); the Lambda's clock if it cannot be read."""
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return clock.now()
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
