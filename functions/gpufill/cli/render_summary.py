"""The summary of a finished run (its regions, attempts, instances and end, or why it failed), built
from its execution alone, so `simulate`, `run --watch`, `watch` and `up` print the same."""

from __future__ import annotations

import json
from typing import Any

from gpufill.cli.execution import plans_from, tries_waited
from gpufill.cli.render_labels import block_of, market_label, run_blocks
from gpufill.cli.render_status import render_status
from gpufill.cli.render_teardown import render_teardown
from gpufill.constants import PURCHASE_FAILED


def render_regions(plan: dict) -> list[str]:
    lines = [f"Ranked regions ({plan.get('market')} market, {plan.get('scoring', 'classic')} scoring)"]
    lines.append(f"  {'rank':<4} {'score':>5}  {'region':<15} {'type':<13} {'spot $/h':>8}  {'AZs':>3}  {'tier':>4}  points")
    for s in plan.get("regions", []):
        if s.get("dropped"):
            lines.append(f"  {'-':<4} {'-':>5}  {s['region']:<15} {s['instance_type']:<13} dropped: {s['dropped']}")
            continue
        points = " + ".join(f"{name} {value}" for name, value in s.get("points", {}).items())
        tier = "?" if s.get("advisor_tier") is None else s["advisor_tier"]
        lines.append(
            f"  {s['rank']:<4} {s['score']:>5}  {s['region']:<15} {s['instance_type']:<13} {s['spot_price']:>8.4f}  "
            f"{s['az_count']:>3}  {tier:>4}  {points}"
        )
    return lines


def render_attempts(attempts: list[dict], blocks: frozenset[str] = frozenset()) -> list[str]:
    lines = ["Attempts", f"  {'#':>3}  {'market':<9} {'zone':<16} {'type':<13} {'batch':>5} {'got':>4}  outcome"]
    for n, a in enumerate(attempts, 1):
        reason = f" ({a['reason']})" if a.get("reason") else ""
        lines.append(
            f"  {n:>3}  {market_label(a, blocks):<9} {a['availability_zone']:<16} {a['instance_type']:<13} "
            f"{a['batch']:>5} {a['launched']:>4}  {a['outcome']}{reason}"
        )
    return lines


def pool_tried(p: dict) -> str:
    """One pool of a cause (what it launched or why not), or a group of them when the cause ran long."""
    if "pool" not in p:
        return f"{p['pools']} ({p['zones_tried']} AZs)"
    return f"{p['pool']} ({'launched ' + str(p['launched']) if p.get('launched') else p['outcome']})"


def render_summary(execution: Any) -> str:
    lines: list[str] = [""]
    plans = plans_from(execution.history)
    if plans:
        lines += render_regions(plans[0]) + [""]
    result = execution.output if execution.status == "SUCCEEDED" else None
    cause = execution.cause if isinstance(execution.cause, dict) else {}
    attempts = (result or {}).get("attempts") or cause.get("attempts")
    blocks = run_blocks(result) | run_blocks(cause)
    if isinstance(attempts, list) and attempts:
        lines += render_attempts(attempts, blocks) + [""]
    if result and result.get("action") == "teardown":
        lines += render_teardown(result, getattr(execution, "notifications", None) or [])
    elif result and result.get("action") == "status":
        lines += render_status(result)
    elif result and result.get("status") == "CONTINUED":
        lines.append(
            f"CONTINUED as {result['continued_as']}: {result['launched']} of {result['requested']} launched so far, "
            f"{result['tries']} tries, waiting until {result['deadline']}"
        )
    elif result and result.get("status") == "WAIT_ENDED":
        lines.append(f"WAIT_ENDED: {result['reason']}; {result['launched']} of {result['requested']} launched, after {result['tries']} tries")
    elif result and result.get("status") == "REFILL_STOPPED":
        lines.append(f"REFILL_STOPPED: {result['reason']}")
    elif result and result.get("status") == "PLANNED":
        lines.append(f"Plan: {len(result.get('pools', []))} pool(s) in order; nothing launched.")
    elif result:
        if result.get("refill"):
            refill = result["refill"]
            lines.append(
                f"Refill of request {refill['request_id']}: replaces {', '.join(refill['replaces'])} "
                f"(reclaimed from {refill.get('reclaimed_pool') or 'an unknown pool'}, tried last)"
            )
        lines.append("Instances")
        for i in result.get("instances", []):
            price = f"${i['hourly_price']:.4f}/h" if i.get("hourly_price") is not None else "price unknown"
            if block_of(i, blocks):  # paid upfront with its block: the fee is shown once, on the block's line
                price = f"in {block_of(i, blocks)}"
            lines.append(
                f"  {i['instance_id']}  {i['availability_zone']:<16} {i['instance_type']:<13} {market_label(i, blocks):<9} {price}"
                + serving_note(i)
            )
        for i in result.get("lost", []):
            lines.append(f"  {i['instance_id']}  {i['availability_zone']:<16} lost before it ran ({i.get('state')})")
        # The example is a server that answers when the run checked (ready_timeout).
        reachable = sorted((i for i in result.get("instances", []) if i.get("connect")), key=lambda i: i.get("serving") is False)
        if reachable:
            lines.append(f"Reach the model server (port 8000) through SSM, e.g. {reachable[0]['instance_id']}:")
            lines.append(f"  {reachable[0]['connect']}")
        lines.append("")
        waited = tries_waited(execution.history)
        if waited:
            lines.append(f"Waited for capacity: filled at try {waited}")
        serving = f", {result['instances_serving']} serving" if "instances_serving" in result else ""
        lines.append(
            f"{result['status']}: {result['launched']} of {result['requested']} launched, "
            f"${result['hourly_cost']:.4f}/h in all{serving}"
        )
        if result.get("expires_at"):  # max_lifetime
            lines.append(f"Expires at {result['expires_at']}: its teardown then asks for approval on its own")
        if result.get("capacity_block"):  # a bought block: named at every end, with what was paid
            block = result["capacity_block"]
            fee = f"${block['upfront_fee']:,.2f} paid" if isinstance(block.get("upfront_fee"), int | float) else "paid"
            lines.append(
                f"Capacity Block {block.get('capacity_reservation_id')} in {block.get('availability_zone')}, "
                f"{block.get('start')} to {block.get('end')}: {fee} upfront, not refundable"
            )
    else:
        lines.append(f"FAILED with {execution.error}")
        if cause:
            lines.append(f"  {cause.get('message', '')}")
            for field in cause.get("fields", []):
                lines.append(f"  - {field['field']}: {field['problem']}")
            if execution.error == PURCHASE_FAILED and cause.get("capacity_block"):
                b = cause["capacity_block"]
                lines.append(f"  block: {b['capacity_reservation_id']} in {b['availability_zone']}, {b['start']} to {b['end']}, "
                             f"${b['upfront_fee']:,.2f}, payment failed")
            if execution.error == NO_CAPACITY_BLOCK:
                lines += render_offerings(cause)
            if execution.error == "CAPACITY_WAIT_EXPIRED" and cause.get("instances"):
                lines.append(f"  kept ({len(cause['instances'])} running):")
                lines += [f"    {i['instance_id']}  {i['pool']}" for i in cause["instances"]]
            if cause.get("pools_tried"):
                tried = ", ".join(
                    pool_tried(p) for p in cause["pools_tried"] if isinstance(p, dict)
                )
                lines.append(f"  pools tried: {tried}")
            if "rolled_back_count" in cause:
                lines.append(f"  rolled back: {cause['rolled_back_count']} instance(s), nothing left running")
            if cause.get("hint"):
                lines.append(f"  hint: {cause['hint']}")
        elif execution.cause:
            lines.append(f"  {execution.cause}")
    m = getattr(execution, "metrics", None)
    if m:  # the local engine counts what a run cost; on AWS, CloudWatch does
        lines.append(
            f"Metrics: {m['state_transitions']} state transitions, {m['lambda_invocations']} Lambda invocations, "
            f"EC2 calls {json.dumps(m['ec2_calls'])}, modelled time {m['modelled_seconds']:.1f} s"
        )
    return "\n".join(lines)


NO_CAPACITY_BLOCK = "NO_CAPACITY_BLOCK"


OFFERINGS_SHOWN = 10  # a NO_CAPACITY_BLOCK cause's offerings in text; --json has every one the cause lists


def render_offerings(cause: dict) -> list[str]:
    """NO_CAPACITY_BLOCK's offerings, each with why it was refused, and the regions that did not answer
    (whose offerings nobody saw)."""
    offered = [o for o in cause.get("offered") or [] if isinstance(o, dict)]
    lines = []
    for o in offered[:OFFERINGS_SHOWN]:
        fee = f"${o['upfront_fee']:,.2f}" if isinstance(o.get("upfront_fee"), int | float) else "fee unknown"
        lines.append(
            f"  - {fee:>11}  {o.get('instance_count', '?')} x {o.get('instance_type', '?')} in {o.get('availability_zone', '?')}, "
            f"{o.get('start', '?')} to {o.get('end', '?')}: {o.get('why_not') or 'not picked'}"
        )
    more = len(offered) - len(lines) + int(cause.get("offered_not_listed") or 0)
    if more > 0:
        lines.append(f"  ... and {more} more (see --json)")
    silent = cause.get("regions_not_answering") or {}
    if isinstance(silent, dict) and silent:
        lines.append("  regions that did not answer (their offerings are not counted): "
                     + "; ".join(f"{region} ({error})" for region, error in sorted(silent.items())))
    return lines


def serving_note(instance: dict) -> str:
    """ready_timeout's verdict on one instance, after its price; nothing when it was not checked."""
    if instance.get("serving") is None:
        return ""
    return "  serving" if instance["serving"] else f"  not serving: {instance.get('serving_reason')}"


def render_reclaims(reclaims: list[dict]) -> list[str]:
    """What EC2 took away while modelled time passed (the market's `interruptions`)."""
    lines = []
    for r in reclaims:
        if r.get("instance_id"):
            lines.append(f"  t={r['at_seconds']:.0f} s  EC2 reclaims instance {r['instance']} ({r['instance_id']}, "
                         f"{r['market']} in {r['region']}): {r['note']}")
        else:
            lines.append(f"  t={r['at_seconds']:.0f} s  instance {r['instance']}: {r['note']}")
    return lines or ["  nothing was reclaimed"]
