"""The end of a teardown run: what it targeted, the approval's decision and what was terminated."""

from __future__ import annotations

from gpufill.cli.render_labels import price_per_hour


def render_teardown(result: dict, notifications: list[dict]) -> list[str]:
    target = result.get("target") or {}
    if target.get("all"):
        what = "every live instance of this deployment"
    elif target.get("request_id"):
        what = f"request {target['request_id']}"
    else:
        what = f"{len(target.get('instance_ids') or [])} instance id(s)"
    lines = [f"Teardown {result['request_id']} of {what}"]
    for i in result.get("instances", []):
        lines.append(
            f"  {i['instance_id']}  {i['region']:<15} {i.get('availability_zone') or '-':<16} "
            f"{i.get('instance_type') or '-':<13} {i.get('market') or '-':<9} {i['state']:<8} {price_per_hour(i.get('hourly_price'))}"
        )
    if result.get("note"):
        lines.append(f"Note: {result['note']}")
    if result.get("refused"):
        lines += ["Left alone (never terminated by this teardown)"]
        lines += [f"  {r['instance_id']}  {r['reason']}: {r['detail']}" for r in result["refused"]]
    for note in notifications:
        lines += ["", f"Published to the approval topic: {note['subject']}"]
        lines += [f"  | {line}" for line in note["message"].splitlines()]
    approval = result.get("approval")
    if approval:
        why = f" ({approval['reason']})" if approval.get("reason") else ""
        if approval["decision"] == "expired":
            lines += ["", f"Decision: expired at {approval['decided_at']}: no answer came before the deadline"]
        else:
            lines += ["", f"Decision: {approval['decision']} by {approval['approver']} at {approval['decided_at']}{why}"]
    for region in result.get("terminated", []):
        ended = ", ".join(region.get("terminated", [])) or "none"
        lines.append(f"  terminated in {region['region']}: {ended}")
        lines += [f"    skipped {r['instance_id']}: {r['reason']}: {r['detail']}" for r in region.get("skipped", [])]
    count = sum(r.get("terminated_count", 0) for r in result.get("terminated", []))
    lines.append("")
    waiting = [r for r in result.get("refused") or [] if r.get("reason") == "awaiting-approval"]
    if result["status"] == "NOTHING_TO_TERMINATE" and waiting:
        lines.append(f"NOTHING_TO_TERMINATE: refused, {len(waiting)} instance(s) already wait in another teardown's "
                     "approval (one question per instance); answer that one:")
        lines += [f"  {detail}" for detail in dict.fromkeys(r["detail"] for r in waiting)]  # one line per teardown
        return lines
    lines.append(
        {
            "TERMINATED": f"TERMINATED: {count} instance(s) terminated, ${result.get('hourly_cost', 0):.4f}/h no longer spent",
            "REJECTED": f"REJECTED: nothing terminated; {result.get('instance_count', 0)} instance(s) keep running",
            "EXPIRED": "EXPIRED: nobody answered before the approval timeout; nothing terminated",
            "NOTHING_TO_TERMINATE": "NOTHING_TO_TERMINATE: no instance matched; no approval was asked for",
        }.get(result["status"], result["status"])
    )
    return lines
