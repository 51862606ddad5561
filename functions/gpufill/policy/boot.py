"""After a fill: which instances are up, which were lost before they ever ran, and how users reach them."""

from __future__ import annotations

import json

from gpufill.models.run import Instance, Run

MODEL_SERVER_PORT = 8000
LOST_STATES = frozenset({"terminated", "shutting-down"})
NOT_VISIBLE = "not-visible"  # what the EC2 adapter reports for an id DescribeInstances does not know yet
MAX_BOOT_ROUNDS = 20  # with the 15 s pause between rounds: about five minutes


def port_forward_command(region: str, instance_id: str, port: int = MODEL_SERVER_PORT) -> str:
    parameters = json.dumps({"portNumber": [str(port)], "localPortNumber": [str(port)]}, separators=(",", ":"))
    return (
        f"aws ssm start-session --region {region} --target {instance_id} "
        f"--document-name AWS-StartPortForwardingSession --parameters '{parameters}'"
    )


def hourly_cost(instances: list[Instance]) -> float:
    """What the instances cost by the hour: their prices, but nothing for an instance in a Capacity
    Block, whose whole price was its block's upfront fee (counted once, on the block)."""
    return round(sum(i.hourly_price or 0.0 for i in instances if i.capacity_block_fee is None), 4)


def settle(run: Run, seen: dict[str, dict]) -> Run:
    """Fold one round of DescribeInstances into the run.

    `seen` maps instance id -> {"state", "private_ip"}. Instances lost before running (a
    spot reclaim at launch) leave the fleet and count as not launched; an instance EC2 does
    not describe yet (NOT_VISIBLE: EC2 is eventually consistent) is still pending. The run
    waits another round while any instance is still pending, up to MAX_BOOT_ROUNDS.
    """
    kept: list[Instance] = []
    lost: list[Instance] = list(run.lost)
    for instance in run.instances:
        fact = seen.get(instance.instance_id, {})
        state = fact.get("state", instance.state)
        if state == NOT_VISIBLE:
            state = instance.state or "pending"
        updated = instance.model_copy(update={"state": state, "private_ip": fact.get("private_ip") or instance.private_ip})
        if updated.state in LOST_STATES:
            lost.append(updated)
        else:
            kept.append(updated)
    rounds = run.boot_rounds + 1
    pending = any(i.state != "running" for i in kept)
    return run.model_copy(
        update={
            "instances": kept,
            "lost": lost,
            "launched": len(kept),
            "remaining": run.remaining + (len(run.instances) - len(kept)),
            "hourly_cost": hourly_cost(kept),
            "boot_rounds": rounds,
            "next": "wait" if pending and rounds < MAX_BOOT_ROUNDS else "ready",
        }
    )
