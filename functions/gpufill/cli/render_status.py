"""`gpufill status`: the managed instances, the requests and what they cost, and the sweep's last pass."""

from __future__ import annotations

from gpufill.cli.render_labels import block_of, market_label


REQUEST_COLUMN = 24  # the request column's least width; a longer id widens it, never is cut


def id_width(ids) -> int:
    return max([REQUEST_COLUMN, *(len(i) for i in ids)])


def render_status(result: dict) -> list[str]:
    # Request ids in full, however long: a person pastes them into teardown and approve.
    wide = id_width(i.get("request_id") or "-" for i in result.get("instances", []))
    lines = [
        f"Managed instances ({'request ' + result['filter']['request_id'] if (result.get('filter') or {}).get('request_id') else 'every request'}; "
        f"regions {', '.join(result.get('regions', []))})",
        f"  {'instance':<19}  {'request':<{wide}} {'zone':<16} {'type':<13} {'market':<9} {'state':<13} {'$/h':>8} {'hours':>6}  finding",
    ]
    # ready_timeout: where startup.sh got to on each instance, after its finding.
    blocks: dict[str, list] = {}  # a Capacity Block's instances: its fee is shown once, below the rows
    for i in result.get("instances", []):
        price = f"{i['hourly_price']:.4f}" if isinstance(i.get("hourly_price"), (int, float)) else "?"
        if block_of(i):
            price = "block"
            blocks.setdefault(block_of(i), []).append(i)
        hours = f"{i['hours_running']:.2f}" if isinstance(i.get("hours_running"), (int, float)) else "-"
        lines.append(
            f"  {i['instance_id']:<19}  {i.get('request_id') or '-':<{wide}} {i.get('availability_zone') or i['region']:<16} "
            f"{i.get('instance_type') or '-':<13} {market_label(i):<9} {i['state']:<13} {price:>8} {hours:>6}  {i['finding']}"
            + (f"  startup: {i['startup_step']}" if i.get("startup_step") else "")
            + (f"  expires: {i['expires_at']}" if i.get("expires_at") else "")  # max_lifetime
        )
    for block, held in blocks.items():
        lines.append(f"  Capacity Block {block}: ${held[0]['capacity_block_fee']:,.2f} paid upfront for its "
                     f"{len(held)} instance(s) shown (non-refundable; $/h 0 while it lasts)")
    counts = ", ".join(f"{n} {state}" for state, n in (result.get("counts") or {}).items()) or "none"
    if result.get("waiting"):
        lines += ["", f"Waiting: {result['waiting']}"]
    lines += [
        "",
        f"Counts: {counts}",
        f"Running: {result.get('running', 0)} instance(s), ${result.get('hourly_cost', 0):.4f}/h",
    ]
    if result.get("note"):
        lines.append(f"Note: {result['note']}")
    lines += _reconciled(result)
    replaced = [i for i in result.get("instances", []) if i.get("replaced_by")]
    if replaced:
        pairs = "; ".join(f"{i['instance_id']} -> {', '.join(i['replaced_by'])}" for i in replaced)
        lines.append(f"Replaced (EC2 reclaimed them; maintain refilled): {pairs}")
    return lines


def render_requests(result: dict, shown: list[dict], hidden: int) -> list[str]:
    """`gpufill status`: one line per request, what it is paying for now and has paid so far."""
    scope = f"request {result['filter']['request_id']}" if (result.get("filter") or {}).get("request_id") else "every request"
    lines = [f"Requests ({scope}; regions {', '.join(result.get('regions', [])) or 'none'})"]
    if not shown:
        lines.append("  none holds an instance" + (f" ({hidden} ended, shown with --all)" if hidden else ""))
    else:
        wide = id_width(r["request_id"] for r in shown)
        lines.append(f"  {'request':<{wide}} {'instances':<28} {'$/h now':>9} {'spent so far':>13}  first launch")
        for r in shown:
            counts = ", ".join(f"{n} {state}" for state, n in r["counts"].items()) or "none"
            mark = "~" if r["estimated"] else " "
            unknown = f"  ({r['price_unknown']} without a price)" if r["price_unknown"] else ""
            for block in r.get("capacity_blocks") or []:
                unknown += f"  Capacity Block {block['capacity_reservation_id']}: ${block['upfront_fee']:,.2f} paid upfront (non-refundable)"
            if r.get("teardown_waiting"):
                unknown += f"  teardown waiting for an answer: {r['teardown_waiting']}"
            lines.append(
                f"  {r['request_id']:<{wide}} {counts[:28]:<28} {mark}{r['hourly_cost']:>8.4f} {mark}{r['spent']:>12.4f}  "
                f"{r['first_launch'] or '-'}{unknown}"
            )
        if hidden:
            lines.append(f"  ({hidden} ended request(s) hidden; --all shows them)")
    total_rate = sum(r["hourly_cost"] for r in shown)
    total_spent = sum(r["spent"] for r in shown)
    lines += ["", f"Paying now: {result.get('running', 0)} running instance(s), ${total_rate:.4f}/h; "
                  f"spent so far by the requests shown: ${total_spent:.4f}"]
    if any(r["estimated"] for r in shown):
        lines.append("  ~ : counts an instance without a recorded price at the catalog's on-demand price (the most it costs)")
    if result.get("note"):
        lines.append(f"Note: {result['note']}")
    return lines + _findings(result)


def _findings(result: dict) -> list[str]:
    return ([f"Waiting: {result['waiting']}"] if result.get("waiting") else []) + _reconciled(result)


def _reconciled(result: dict) -> list[str]:
    """What the status run found in EC2 and the records that did not agree, and what it did about it."""
    lines = []
    if result.get("reconciled"):
        lines.append(f"Reconciled (found in EC2 without a record, recorded now): {', '.join(result['reconciled'])}")
    if result.get("unrecorded"):
        lines.append(f"Unrecorded (tagged for this deployment, no request-id tag): {', '.join(result['unrecorded'])}")
    if result.get("gone"):
        lines.append(f"Gone (recorded, no longer in EC2): {', '.join(result['gone'])}")
    return lines


def render_sweep(summary: dict | None) -> list[str]:
    """The sweep's last pass (docs/operations.md), under the status view."""
    if not summary:
        return []
    found = ", ".join(f"{n} {kind}" for kind, n in (summary.get("found") or {}).items() if n) or "nothing"
    lines = [
        "",
        f"Sweep: last pass {summary.get('at')}: found {found}; "
        f"{summary.get('running', 0)} running at ${summary.get('hourly_cost', 0):.4f}/h",
    ]
    for finding in summary.get("findings") or []:
        lines.append(f"  {finding['kind']}: {finding['message']}")
        lines.append(f"    {finding['command']}")
    return lines
