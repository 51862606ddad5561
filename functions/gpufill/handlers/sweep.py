"""Sweep: run by EventBridge Scheduler every `sweep_every` minutes, outside the state machine.

It reconciles EC2 with the records as the status view does (adapters.inventory), reads the end
of the active Capacity Blocks where a recorded block instance runs, asks policy.sweep what is
found, asks for one teardown per untracked, expired or block-ending group (each behind
the usual approval: the sweep terminates nothing), notifies each finding on the deployment's
topic at most once a day, keeps its summary for `gpufill status`, and publishes the gauges the
alarms and the dashboard read.
"""

from __future__ import annotations

import os

from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill import catalog
from gpufill.adapters import approvals, capacity_blocks, clock, executions, inventory, managed_instances, sweep_store
from gpufill.constants import (
    ENV_STATE_MACHINE_ARN,
    METRIC_ENDING_BLOCK_INSTANCES,
    METRIC_EXPIRED_INSTANCES,
    METRIC_HOURLY_COST,
    METRIC_PENDING_APPROVALS,
    METRIC_RUNNING_INSTANCES,
    METRIC_STALE_APPROVALS,
    METRIC_STALE_RUNS,
    METRIC_UNTRACKED_INSTANCES,
)
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.policy import sweep


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    now = clock.now()
    table = sweep_store.scan()
    found = inventory.gather(request_id=None, request_regions=[], everything=True, now=now, holdings=table.holdings)
    state_machine = os.environ[ENV_STATE_MACHINE_ARN]
    with managed_instances.retryable("looking up runs whose records say pending"):
        ran = {
            request_id: (executions.describe(state_machine, request_id) or {}).get("status")
            for request_id in sweep.requests_to_look_up(found.records)
        }
    block_ends = {}
    for region in sweep.block_regions(found.records, found.live, found.deployment):
        block_ends.update(capacity_blocks.active_ends(region))
    result = sweep.assess(
        records=found.records,
        live=found.live,
        reconciled=found.reconciled,
        deployment=found.deployment,
        approvals=[a for a in map(sweep.pending_approval, table.approvals) if a is not None],
        executions=ran,
        notified=table.notified,
        now=now,
        price=catalog.on_demand_price,
        block_ends=block_ends,
    )
    # The teardowns first: a notification names the teardown to approve, so it follows its start.
    for ask in result.teardowns:
        try:
            executions.start(ask.name, ask.execution_input())
        except executions.ExecutionNameTaken:
            # The name is the instances' own: an earlier pass asked to end the same instances under
            # another finding (its input names that one), so they are asked about once, not twice.
            logger.info("these instances were asked about already", extra={"execution": ask.name, "finding": ask.finding})
    for finding in result.notify:
        subject, body = sweep.notification(finding, found.deployment)
        approvals.publish(subject, body)
        sweep_store.mark_notified(finding.key, now)
    summary = result.summary()
    sweep_store.save_summary(summary)
    logger.info("sweep", extra={"found": summary["found"], "teardowns": summary["teardowns_asked"], "notified": summary["notified"]})
    counts = result.counts()
    metrics.add_metric(name=METRIC_RUNNING_INSTANCES, unit="Count", value=result.running)
    metrics.add_metric(name=METRIC_HOURLY_COST, unit="None", value=result.hourly_cost)
    metrics.add_metric(name=METRIC_PENDING_APPROVALS, unit="Count", value=result.pending_approvals)
    metrics.add_metric(name=METRIC_UNTRACKED_INSTANCES, unit="Count", value=counts["untracked"])
    metrics.add_metric(name=METRIC_EXPIRED_INSTANCES, unit="Count", value=counts["expired"])
    metrics.add_metric(name=METRIC_ENDING_BLOCK_INSTANCES, unit="Count", value=counts["block-ending"])
    metrics.add_metric(name=METRIC_STALE_APPROVALS, unit="Count", value=counts["approval-waiting"])
    metrics.add_metric(name=METRIC_STALE_RUNS, unit="Count", value=counts["run-ended"])
    return summary
