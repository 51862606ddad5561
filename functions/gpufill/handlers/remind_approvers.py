"""RemindApprovers: the reminders' schedule invokes it every hour while a teardown approval waits.

It reads the approval item and its execution first (policy.lifetime.reminder_ends): while a
person can still answer, it publishes the reminder (and, when the approval request itself was
refused, records on the item that the approvers have now been told); once the approval was answered or expired,
or its execution stopped or ended, it sends nothing and deletes its own schedule. So reminders
stop even when the decision's DeleteSchedule failed or the teardown run was stopped before any
decision. A failed delete is logged and tried again at the next delivery.
"""

from __future__ import annotations

import os

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from gpufill.adapters import approvals, clock, executions, schedules
from gpufill.constants import ENV_STATE_MACHINE_ARN
from gpufill.handlers.events import ReminderEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.policy import lifetime


@logger.inject_lambda_context(correlation_id_path="execution_name")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=ReminderEvent)
    item = approvals.get(step.execution_name)
    run = executions.describe(os.environ[ENV_STATE_MACHINE_ARN], step.execution_name)
    ended = lifetime.reminder_ends(item, run["status"] if run else None, clock.now())
    if ended is not None:
        deleted = _end_reminders(step.execution_name)
        logger.info("reminder not sent", extra={"why": ended, "schedule_deleted": deleted})
        metrics.add_metric(name="RemindersStopped", unit="Count", value=1)
        return {"sent": False, "why": ended, "schedule_deleted": deleted}
    message_id = approvals.publish(step.subject, step.message)
    if item.get("notification") == approvals.NOTIFICATION_FAILED:
        # The approval request never reached the approvers: this reminder is the first that did.
        approvals.record_notification(step.execution_name, sent=True, at=clock.now(), by="reminder")
    logger.info("reminder sent", extra={"message_id": message_id})
    metrics.add_metric(name="RemindersSent", unit="Count", value=1)
    return {"sent": True, "message_id": message_id}


def _end_reminders(execution_name: str) -> bool:
    """Delete this approval's reminders; a failure is logged, never raised: Scheduler would only try
    the same delivery again, and the next one (within the hour, until the deadline) deletes it."""
    try:
        schedules.cancel_reminders(execution_name)
    except (ClientError, BotoCoreError) as error:
        logger.warning("reminder schedule not deleted", extra={"error": str(error)})
        metrics.add_metric(name="SchedulesNotDeleted", unit="Count", value=1)
        return False
    return True
