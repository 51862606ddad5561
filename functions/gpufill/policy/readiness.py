"""After the instances run: which model servers answer, which are still starting (and at which
step), whether to look again, and the verdict for each instance once the run stops looking.

startup.sh reports each step it reaches in the instance tag gpufill:startup-step ("serving" once
the model server answers, "failed: <step>" when it stops); `steps` is what DescribeInstances showed
of that tag this round. Pure: no AWS calls, time comes in as `now` (epoch seconds).
"""

from __future__ import annotations

import math

from gpufill.constants import READY_POLL_SECONDS, STARTUP_STEP_FAILED_PREFIX, STARTUP_STEP_SERVING
from gpufill.models.run import Instance, Run
from gpufill.policy.boot import NOT_VISIBLE

# An instance in one of these states will never serve: the idle watchdog powered it off, or AWS reclaimed it.
GONE_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
# What the run keeps of a reported step, in UTF-8 bytes. A tag value may hold 256 characters
# (up to 1 KiB in UTF-8), and the step is carried twice per instance (the step and the reason);
# 250 instances at 1 KiB would pass Step Functions' 256 KiB state limit (counted in UTF-8 bytes).
# At this bound 250 instances carry at most 250 x 2 x 120 B = 60 KB of steps. startup.sh's own
# steps are far shorter; only the instance's own wording (its failure text) is cut.
STEP_MAX_BYTES = 120
ELLIPSIS = "…"


def bounded_step(step: str | None, max_bytes: int = STEP_MAX_BYTES) -> str | None:
    """The step as reported, or its longest prefix that fits `max_bytes` of UTF-8 with "…"
    after it, cut at a character boundary (never inside a multi-byte character)."""
    if step is None or len(step.encode()) <= max_bytes:
        return step
    room = max_bytes - len(ELLIPSIS.encode())
    return step.encode()[:room].decode(errors="ignore") + ELLIPSIS


def iso_duration(seconds: int) -> str:
    """Seconds as the ISO 8601 duration a user writes: 1800 -> PT30M, 5400 -> PT1H30M, 0 -> PT0S."""
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    text = "".join(f"{n}{unit}" for n, unit in ((hours, "H"), (minutes, "M"), (secs, "S")) if n)
    return f"PT{text or '0S'}"


def is_serving(step: str | None) -> bool:
    return step == STARTUP_STEP_SERVING


def has_failed(step: str | None) -> bool:
    return step is not None and step.startswith(STARTUP_STEP_FAILED_PREFIX)


def settled(instance: Instance) -> bool:
    """Nothing more will change for this instance: it serves, its startup failed, or it is gone."""
    return is_serving(instance.startup_step) or has_failed(instance.startup_step) or instance.state in GONE_STATES


def not_serving_reason(instance: Instance, timeout_seconds: int) -> str:
    step = instance.startup_step
    if instance.state in GONE_STATES:
        where = f" at startup step '{step}'" if step else " before startup.sh reported a step"
        return f"the instance is {instance.state}{where}"
    if has_failed(step):
        return f"startup.sh stopped: {step} (its log: /var/log/gpufill-startup.log)"
    waited = iso_duration(timeout_seconds)
    if step is None:
        return f"no startup step reported within {waited} (startup.sh did not run, or could not tag the instance)"
    return f"still at startup step '{step}' when ready_timeout {waited} ran out"


def verdict(instance: Instance, timeout_seconds: int) -> Instance:
    if is_serving(instance.startup_step) and instance.state not in GONE_STATES:
        return instance.model_copy(update={"serving": True})
    return instance.model_copy(update={"serving": False, "serving_reason": not_serving_reason(instance, timeout_seconds)})


def check(run: Run, seen: dict[str, dict], *, now: float, timeout_seconds: int) -> Run:
    """Fold one round of DescribeInstances (instance id -> {"state", "startup_step"}) into the run.

    The deadline is fixed at the first round: ready_timeout counts from when every instance runs.
    The run looks again while an instance is unsettled and the deadline is ahead, pausing
    READY_POLL_SECONDS or just until the deadline; then every instance gets its verdict.
    """
    deadline = run.ready_deadline if run.ready_deadline is not None else now + timeout_seconds
    instances = []
    for instance in run.instances:
        fact = seen.get(instance.instance_id, {})
        instances.append(
            instance.model_copy(
                update={
                    # EC2 may briefly not describe an instance again; that says nothing new about it.
                    "state": instance.state if fact.get("state") in (None, NOT_VISIBLE) else fact["state"],
                    "startup_step": bounded_step(fact.get("startup_step")) or instance.startup_step,
                }
            )
        )
    left = deadline - now
    waiting = left > 0 and not all(settled(i) for i in instances)
    if not waiting:
        instances = [verdict(i, timeout_seconds) for i in instances]
    return run.model_copy(
        update={
            "instances": instances,
            "ready_deadline": deadline,
            "ready_rounds": run.ready_rounds + 1,
            "ready_pause": min(READY_POLL_SECONDS, math.ceil(left)) if waiting else None,
            "next": "wait" if waiting else "ready",
        }
    )


def serving_count(run: Run) -> int:
    return sum(1 for i in run.instances if i.serving)
