"""`gpufill status [REQUEST_ID]`: the deployed state machine's status action, as a table."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from gpufill.cli import aws
from gpufill.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    check_name,
    check_request,
    fresh_name,
    print_json,
    program,
    say,
)
from gpufill.cli.render import ExecutionView, render_requests, render_status, render_summary
from gpufill.cli.runs import deployment_flags
from gpufill.policy import spend


def add_parser(verbs) -> None:
    status = verbs.add_parser(
        "status",
        help="what the deployment is paying for: one line per request, $/h now, spend so far, pending teardowns",
        description="Runs the status action (DescribeInstances in every region the deployment used, "
        "compared with its records) and prints one line per request that holds instances (its instances "
        "by state, $/h now, spend so far since launch), then the teardowns waiting for an answer and the "
        "commands that answer them.",
    )
    status.add_argument("request_id", nargs="?", default=None, help="only this request's instances")
    status.add_argument("--all", action="store_true", help="also the requests whose instances have all ended")
    status.add_argument("--instances", action="store_true", help="also the table of instances, one row each")
    status.add_argument("--json", action="store_true", help="print the status result as one JSON document")
    aws.add_deployment_options(status)
    status.set_defaults(handler=status_verb)


def status_verb(args: argparse.Namespace) -> int:
    if args.request_id is not None:
        check_name(args.request_id, "REQUEST_ID")
    request = {"action": "status"}
    if args.request_id:
        request["request_id"] = args.request_id
    check_request(request, "the status request")
    deployment = aws.find(args)
    arn = aws.start_execution(deployment, request, fresh_name("status"))
    view = _finish(deployment, arn)
    if view.status != "SUCCEEDED":
        if args.json:
            print_json(view.summary())
        else:
            print(render_summary(view))
        return EXIT_FAILED
    pending = pending_teardowns(deployment, args.request_id)
    purchases = [p for p in pending or [] if p.get("purchase")]
    pending = None if pending is None else [p for p in pending if not p.get("purchase")]
    every = spend.requests(view.output)
    waiting = {p["target"]["request_id"]: p["execution"] for p in pending or [] if p["target"].get("request_id")}
    # A teardown of the whole deployment waits for every request's instances.
    everything = next((p["execution"] for p in pending or [] if p["target"].get("all")), None)
    for entry in every:
        entry["teardown_waiting"] = waiting.get(entry["request_id"], everything if not entry["ended"] else None)
    # An ended request is history; one asked for by its id is shown whatever its state.
    shown = [r for r in every if args.all or args.request_id or not r["ended"]]
    hidden = len(every) - len(shown)
    answered = answered_approvals(deployment, args.request_id)
    if args.json:
        print_json({**view.output, "requests": shown, "ended_hidden": hidden, "pending_teardowns": pending,
                    "pending_purchases": purchases, "answered_approvals": answered})
        return EXIT_OK
    lines = render_requests(view.output, shown, hidden)
    if args.instances:
        lines += [""] + render_status(view.output)
    print("\n".join(lines + render_pending(pending) + render_purchases(purchases) + render_answered(answered)))
    return EXIT_OK


ANSWERED_SHOWN = 10  # the newest; --json lists every one the table still keeps


def answered_approvals(deployment: aws.Deployment, request_id: str | None = None) -> list[dict] | None:
    """Approvals a person answered, newest first: who (the ARN AWS authenticated at the approval
    function), when, what and why; only the request's when given one. None when unreadable."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        items = approval_items(deployment.table(), pending_only=False)
    except (BotoCoreError, ClientError):
        return None  # pending_teardowns has said why
    answered = []
    for item in items:
        if not item.get("answered_at") and item.get("decision") in (None, "expired"):
            continue
        target = target_of(item)
        if request_id is not None and target.get("request_id") != request_id:
            continue
        answered.append({
            "execution": item["execution_name"],
            "kind": "purchase" if item.get("approval_for") == "capacity-block-purchase" else "teardown",
            "target": target,
            "decision": item.get("decision") or item.get("answer"),
            "answered_by": item.get("answered_by") or item.get("approver"),
            "answered_at": item.get("answered_at") or item.get("decided_at"),
            "reason": item.get("answer_reason") or item.get("decided_reason"),
            "recorded": bool(item.get("decided_at")),
        })
    return sorted(answered, key=lambda a: a["answered_at"] or "", reverse=True)


def render_answered(answered: list[dict] | None) -> list[str]:
    if not answered:
        return []
    lines = ["", f"Answered approvals: {len(answered)} (who answered, as AWS authenticated them)"]
    for a in answered[:ANSWERED_SHOWN]:
        why = f" ({a['reason']})" if a.get("reason") else ""
        lines.append(f"  {a['execution']}  {a['kind']} {a['decision']} by {a['answered_by']} at {a['answered_at']}{why}")
    if len(answered) > ANSWERED_SHOWN:
        lines.append(f"  ... and {len(answered) - ANSWERED_SHOWN} older (--json lists them)")
    return lines


def pending_teardowns(deployment: aws.Deployment, request_id: str | None = None) -> list[dict] | None:
    """The teardowns waiting for a person's answer (their approval items), only the request's when
    given one; None when the table cannot be read (the status itself still stands)."""
    from botocore.exceptions import BotoCoreError, ClientError


    try:
        items = approval_items(deployment.table())
    except (BotoCoreError, ClientError) as error:
        say(f"pending teardowns unknown: could not read {deployment.table_name} ({aws.readable(str(error))})")
        return None
    pending = []
    who: str | None = None
    for item in items:
        if not is_pending(item):
            continue
        target = target_of(item)
        if request_id is not None and target.get("request_id") != request_id and not target.get("all"):
            continue
        name = item["execution_name"]
        who = who or _who_answers(deployment)
        pending.append({
            "execution": name,
            "target": target,
            "instance_count": len(item.get("instance_ids") or []),
            "requested_by": item.get("requested_by"),
            "requested_at": item.get("requested_at"),
            "deadline": item.get("deadline"),
            "who_answers": who,
            **answer_commands(name, deployment),
            # A Capacity Block purchase waiting for its approval (docs/capacity-blocks.md), not a teardown.
            **({"purchase": _purchase_of(item)} if item.get("approval_for") == "capacity-block-purchase" else {}),
        })
    return sorted(pending, key=lambda p: p["requested_at"] or "")


def answer_commands(name: str, deployment: aws.Deployment) -> dict[str, str]:
    """The commands that answer teardown `name`, as they can be pasted in this shell."""
    flags = deployment_flags(deployment)
    return {
        "approve": f"{program()} approve {name}{flags} --reason '...'",
        "reject": f"{program()} reject {name}{flags} --reason '...'",
    }


def is_pending(item: dict) -> bool:
    """Answered but not yet recorded by the workflow counts as answered; past its deadline, it has expired."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    return not (item.get("answered_at") or item.get("decided_at") or str(item.get("deadline", "")) <= now)


def approval_items(table, *, pending_only: bool = True) -> list[dict]:
    """The teardown approval items of the deployment's table (those still marked PENDING unless asked for all)."""
    from gpufill.constants import APPROVAL_KEY_PREFIX

    items: list[dict] = []
    kwargs: dict = {}
    condition = "begins_with(instance_id, :approval)"
    values = {":approval": APPROVAL_KEY_PREFIX}
    if pending_only:
        condition += " AND #status = :pending"
        values[":pending"] = "PENDING"
        kwargs["ExpressionAttributeNames"] = {"#status": "status"}
    while True:
        page = table.scan(FilterExpression=condition, ExpressionAttributeValues=values, **kwargs)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def target_of(item: dict) -> dict:
    try:
        target = json.loads(item.get("target") or "{}")
    except ValueError:
        return {}
    # Only what the teardown named: {"request_id": ...}, {"instance_ids": [...]} or {"all": true}.
    return {k: v for k, v in target.items() if v} if isinstance(target, dict) else {}


def _who_answers(deployment: aws.Deployment) -> str:
    """Whom the approval request reached: the approval topic's subscribers, when they can be listed."""
    from gpufill import constants

    topic = deployment.outputs.get(constants.OUTPUT_APPROVAL_TOPIC_ARN)
    if not topic:
        return "whoever the approval topic notifies"
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        listed = deployment.client("sns").list_subscriptions_by_topic(TopicArn=topic).get("Subscriptions", [])
        endpoints = [s["Endpoint"] for s in listed if s.get("Endpoint")]
    except (BotoCoreError, ClientError):  # listing needs sns:ListSubscriptionsByTopic, which an operator may lack
        endpoints = []
    name = topic.rsplit(":", 1)[-1]
    return f"the subscribers of {name} ({', '.join(endpoints)})" if endpoints else f"the subscribers of {name}"


def _purchase_of(item: dict) -> dict:
    try:
        return json.loads(item.get("purchase") or "{}")
    except ValueError:
        return {}


def render_purchases(purchases: list[dict]) -> list[str]:
    """Capacity Block purchases waiting for a person's answer, with the commands that answer them."""
    if not purchases:
        return []
    lines = ["", f"Pending Capacity Block purchases: {len(purchases)}, waiting for an answer (nothing is bought until one is approved)"]
    for p in purchases:
        block = p["purchase"]
        lines += [
            f"  {p['execution']}: request {p['target'].get('request_id', '?')} asks to buy {block.get('instance_count')} x "
            f"{block.get('instance_type')} in {block.get('availability_zone')} from {block.get('start')} to {block.get('end')}, "
            f"upfront ${float(block.get('upfront_fee', 0)):,.2f}; expires {p['deadline']}",
            f"    who answers: {p['who_answers']}",
            f"    {p['approve']}",
            f"    {p['reject']}",
        ]
    return lines


def render_pending(pending: list[dict] | None) -> list[str]:
    if not pending:
        return []
    lines = ["", f"Pending teardowns: {len(pending)}, waiting for an answer (nothing is terminated until one is approved)"]
    for p in pending:
        target = p["target"]
        what = (
            "the whole deployment" if target.get("all")
            else f"of request {target['request_id']}" if target.get("request_id")
            else "given by id"
        )
        lines += [
            f"  {p['execution']}: {p['instance_count']} instance(s), {what}, asked by {p['requested_by']} "
            f"at {p['requested_at']}; expires {p['deadline']}",
            f"    who answers: {p['who_answers']}",
            f"    {p['approve']}",
            f"    {p['reject']}",
        ]
    return lines


@aws.aws_errors("run the status action")
def _finish(deployment: aws.Deployment, arn: str) -> ExecutionView:
    described, history = aws.wait_for_end(deployment.client("stepfunctions"), arn, poll=aws.POLL_SECONDS)
    return ExecutionView.from_aws(described, history)
