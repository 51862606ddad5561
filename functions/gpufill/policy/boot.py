"""After a fill: which instances are up, which were lost before they ever ran, and how users reach them."""

from __future__ import annotations

import json

from gpufill.constants import MAX_LISTED_CONNECT_COMMANDS
from gpufill.models.run import Instance, Run

MODEL_SERVER_PORT = 8000
LOST_STATES = frozenset({"terminated", "shutting-down"})
MAX_BOOT_ROUNDS = 20  # with the 15 s pause between rounds: about five minutes


def port_forward_command(region: str, instance_id: str, port: int = MODEL_SERVER_PORT) -> str:
    parameters = json.dumps({"portNumber": [str(port)], "localPortNumber": [str(port)]}, separators=(",", ":"))
    return (
        f"aws ssm start-session --region {region} --target {instance_id} "
        f"--document-name AWS-StartPortForwardingSession --parameters '{parameters}'"
    )


def settle(run: Run, seen: dict[str, dict]) -> Run:
    """Fold one round of DescribeInstances into the run.

    `seen` maps instance id -> {"state", "private_ip"}. Instances lost before running (a
    spot reclaim at launch) leave the fleet and count as not launched; the run waits
    another round while any instance is still pending, up to MAX_BOOT_ROUNDS.
    """
    kept: list[Instance] = []
    lost: list[Instance] = list(run.lost)
    for instance in run.instances:
        fact = seen.get(instance.instance_id, {})
        updated = instance.model_copy(
            update={"state": fact.get("state", instance.state), "private_ip": fact.get("private_ip", instance.private_ip)}
        )
        if updated.state in LOST_STATES:
            lost.append(updated.model_copy(update={"connect": None}))
        else:
            kept.append(updated)
    if len(kept) <= MAX_LISTED_CONNECT_COMMANDS:
        kept = [i.model_copy(update={"connect": port_forward_command(i.region, i.instance_id)}) for i in kept]
    rounds = run.boot_rounds + 1
    pending = any(i.state != "running" for i in kept)
    return run.model_copy(
        update={
            "instances": kept,
            "lost": lost,
            "launched": len(kept),
            "remaining": run.remaining + (len(run.instances) - len(kept)),
            "hourly_cost": round(sum(i.hourly_price or 0.0 for i in kept), 4),
            "boot_rounds": rounds,
            "connect_template": port_forward_command("REGION", "INSTANCE_ID"),
            "next": "wait" if pending and rounds < MAX_BOOT_ROUNDS else "ready",
        }
    )
