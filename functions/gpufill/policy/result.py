"""What a finished run answers, and what a failed one says: complete, yet within Step Functions' limits."""

from __future__ import annotations

import json

from gpufill.constants import MAX_LISTED_CONNECT_COMMANDS
from gpufill.models.request import ResolvedRequest
from gpufill.models.run import Attempt, Run
from gpufill.policy import block_use
from gpufill.policy.boot import port_forward_command

# The result lists every instance; attempts beyond this many are summarised (the newest kept),
# so the output stays far below 256 KB at count 250 over 15 regions x 10 types.
MAX_RESULT_ATTEMPTS = 300
CAUSE_BUDGET = 30_000  # a Fail state's cause is capped at 32,768 characters


def time_to_fill(run: Run, now: float) -> float | None:
    """Seconds from the run's start to its end with instances (the dashboard's time to fill), or
    None: a run that holds none did not fill, and one started before this was kept knows no start."""
    if run.launched <= 0 or run.started_at is None:
        return None
    return round(max(0.0, now - run.started_at), 1)


def fill_result(request: ResolvedRequest, run: Run, attempts: list[Attempt], status: str) -> dict:
    instances = [i.model_dump(mode="json", exclude_none=True) for i in run.instances]
    if len(run.instances) <= MAX_LISTED_CONNECT_COMMANDS:
        for item in instances:
            item["connect"] = port_forward_command(item["region"], item["instance_id"])
    listed = attempts[-MAX_RESULT_ATTEMPTS:]
    result = {
        "request_id": request.owner_id,
        "status": status,
        "requested": request.count,
        "launched": run.launched,
        "instances": instances,
        "lost": [i.model_dump(mode="json", exclude_none=True) for i in run.lost],
        "attempts": [a.model_dump(mode="json", exclude_none=True) for a in listed],
        "attempts_total": len(attempts),
        "hourly_cost": run.hourly_cost,
        "connect_template": port_forward_command("REGION", "INSTANCE_ID"),
    }
    checked = [i for i in run.instances if i.serving is not None]
    if checked:  # ready_timeout: how many model servers answer (per instance: serving, serving_reason)
        result["instances_serving"] = sum(1 for i in checked if i.serving)
    if request.expires_at:  # max_lifetime: when the request's teardown asks for approval on its own
        result["expires_at"] = request.expires_at
    if request.refill is not None:  # a refill run answers for its request, and says what it replaced
        result["refill"] = {"run": request.request_id, **request.refill.model_dump(mode="json", exclude_none=True)}
    if run.capacity_block is not None:  # the block bought: EC2 ends its instances 30 minutes before its end
        result["capacity_block"] = block_use.summary(run.capacity_block)
    if len(attempts) > len(listed):
        result["attempts_note"] = f"the last {len(listed)} of {len(attempts)} attempts; `gpufill status` lists the instances"
    return result


def failure_cause(request_id: str | None, run: Run | None, recorded: list[dict], failure: dict) -> str:
    """PROVISIONING_FAILED's cause: what failed, every instance launched so far, and how to end them."""
    instances: dict[str, dict] = {}
    for item in recorded:
        instances[item["instance_id"]] = {k: item.get(k) for k in ("instance_id", "region", "availability_zone", "instance_type", "market")}
    for instance in run.instances if run else []:
        instances.setdefault(instance.instance_id, instance.model_dump(mode="json", exclude_none=True, include={"instance_id", "region", "availability_zone", "instance_type", "market"}))
    error = failure.get("Error") or "unknown error"
    cause = {
        "error": "PROVISIONING_FAILED",
        "message": f"A step failed after its retries ({error}). "
        + (f"{len(instances)} instance(s) launched so far keep running until torn down." if instances else "Nothing was launched."),
        "request_id": request_id,
        "failed_with": {"error": error, "cause": _short(failure.get("Cause"))},
        "launched": len(instances),
        "instances": list(instances.values()),
    }
    if instances and request_id:
        cause["teardown"] = {"action": "teardown", "request_id": request_id}
        cause["hint"] = "Start the teardown above (it asks for approval), or rerun the request; `gpufill status` shows them."
    text = json.dumps(cause, default=str)
    if len(text) > CAUSE_BUDGET:
        cause["instances"] = [i["instance_id"] for i in instances.values()]
        text = json.dumps(cause, default=str)
    return text


def _short(cause) -> str | None:
    if cause is None:
        return None
    text = cause if isinstance(cause, str) else json.dumps(cause)
    return text[:2000]
