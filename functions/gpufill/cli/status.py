"""`gpufill status [REQUEST_ID]`: the deployed state machine's status action, as a table."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from gpufill.cli import aws, ids
from gpufill.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    Failed,
    check_name,
    check_request,
    fresh_name,
    print_json,
    program,
    say,
)
from gpufill.cli.execution import ExecutionView
from gpufill.cli.render_status import render_requests, render_status, render_sweep
from gpufill.cli.render_summary import render_summary
from gpufill.cli.runs import answer_commands, who_answers
from gpufill.policy import answers, spend


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
    check_request({"action": "status", **({"request_id": args.request_id} if args.request_id else {})}, "the status request")
    deployment = aws.find(args)
    if args.request_id:
        args.request_id = _request_id(deployment, args.request_id)
    request = {"action": "status"}
    if args.request_id:
        request["request_id"] = args.request_id
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
    waiting = {p["target"]["request_id"]: p["approval_id"] for p in pending or [] if p["target"].get("request_id")}
    # A teardown of the whole deployment waits for every request's instances.
    everything = next((p["approval_id"] for p in pending or [] if p["target"].get("all")), None)
    for entry in every:
        entry["teardown_waiting"] = waiting.get(entry["request_id"], everything if not entry["ended"] else None)
    # A teardown of the whole deployment waits on every id, a mistyped one too: only an approval
    # naming this request shows it is known.
    own = [p for p in (pending or []) + purchases if p["target"].get("request_id") == args.request_id]
    if args.request_id and not every and not own:
        _known_or_fail(deployment, args.request_id)
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
    print("\n".join(lines + render_pending(pending) + render_purchases(purchases) + render_answered(answered)
                     + render_sweep(view.output.get("sweep"))))
    return EXIT_OK


ANSWERED_SHOWN = 10  # the newest; --json lists every one the table still keeps


def answered_approvals(deployment: aws.Deployment, request_id: str | None = None) -> list[dict] | None:
    """Approvals a person answered, newest first: who (the ARN AWS authenticated at the approval
    function), when, what and why; only the request's when given one. None when unreadable."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        from gpufill.adapters import approvals

        items = approvals.all_items(deployment.table(), pending_only=False)
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


def _known_or_fail(deployment: aws.Deployment, request_id: str) -> None:
    """A request id with no record, no pending approval and no execution is a typo or another
    deployment's: said so (exit 1) rather than shown as a request holding nothing."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        deployment.client("stepfunctions").describe_execution(executionArn=deployment.execution_arn(request_id))
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
            raise Failed(
                f"no request {request_id!r} is known to deployment {deployment.env}: no record and no execution of "
                f"that name. {program()} status lists the requests that hold instances (--all the ended ones too)"
            ) from None
    except BotoCoreError:  # unknown: the status shown stands
        return


def pending_teardowns(deployment: aws.Deployment, request_id: str | None = None) -> list[dict] | None:
    """The approvals waiting for a person's answer (teardowns and purchases), only the request's when
    given one; None when the table cannot be read (the status itself still stands). A teardown whose
    instances have all ended asks nothing any more: it is left out (answering it says "nothing to do")."""
    from botocore.exceptions import BotoCoreError, ClientError

    from gpufill.adapters import approvals

    try:
        table = deployment.table()
        items = [i for i in approvals.all_items(table, pending_only=True) if is_pending(i)]
        teardowns = [i for i in items if answers.kind_of(i) == answers.TEARDOWN]
        records = approvals.records([x for i in teardowns for x in i.get("instance_ids") or []], table)
    except (BotoCoreError, ClientError) as error:
        say(f"pending approvals unknown: could not read {deployment.table_name} ({aws.readable(str(error))})")
        return None
    pending = []
    who: str | None = None
    for item in items:
        target = target_of(item)
        if request_id is not None and target.get("request_id") != request_id and not target.get("all"):
            continue
        if answers.kind_of(item) == answers.TEARDOWN and answers.all_gone(item.get("instance_ids") or [], records):
            continue
        name = item["execution_name"]
        who = who or who_answers(deployment)
        pending.append({
            "approval_id": answers.approval_id(item),
            "execution": name,
            "target": target,
            "instance_count": len(item.get("instance_ids") or []),
            "requested_by": item.get("requested_by"),
            "requested_at": item.get("requested_at"),
            "deadline": item.get("deadline"),
            "who_answers": who,
            **answer_commands(answers.approval_id(item), deployment),
            **notification_of(item),
            # A Capacity Block purchase waiting for its approval (docs/capacity-blocks.md), not a teardown.
            **({"purchase": _purchase_of(item)} if answers.kind_of(item) == answers.PURCHASE else {}),
        })
    return sorted(pending, key=lambda p: p["requested_at"] or "")


def notification_of(item: dict) -> dict:
    """Whether the approvers were told, when the item says (older items say nothing): the approval
    request the topic refused, and the reminder that got through after it."""
    if not item.get("notification"):
        return {}
    return {"notification": {"status": item["notification"], "at": item.get("notification_at"),
                             "by": item.get("notification_by"), "error": item.get("notification_error")}}


def notification_lines(p: dict) -> list[str]:
    """One line when the approvers may not know: nobody was told, or only a reminder told them."""
    told = p.get("notification")
    if told is None:
        return []
    if told["status"] == "failed":
        return [f"    approvers were not notified (the approval topic refused the {told['by']} at {told['at']}: "
                f"{told['error']}): answer with {p['approve']}"]
    return [f"    approvers were told by a {told['by']} at {told['at']} (the approval request itself was not delivered)"]


def is_pending(item: dict) -> bool:
    """Answered but not yet recorded by the workflow counts as answered; past its deadline, it has expired."""
    return answers.is_pending(item, datetime.now(UTC))


def target_of(item: dict) -> dict:
    return answers.target_of(item)


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
            f"  {p['approval_id']}: request {p['target'].get('request_id', '?')} asks to buy {block.get('instance_count')} x "
            f"{block.get('instance_type')} in {block.get('availability_zone')} from {block.get('start')} to {block.get('end')}, "
            f"upfront ${float(block.get('upfront_fee', 0)):,.2f}; expires {p['deadline']}",
            *notification_lines(p),
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
            f"  {p['approval_id']}: {p['instance_count']} instance(s), {what}, asked by {p['requested_by']} "
            f"at {p['requested_at']}; expires {p['deadline']}",
            *notification_lines(p),
            f"    who answers: {p['who_answers']}",
            f"    {p['approve']}",
            f"    {p['reject']}",
        ]
    return lines


@aws.aws_errors("look the request up")
def _request_id(deployment: aws.Deployment, given: str) -> str:
    return ids.request_id(deployment, given)


@aws.aws_errors("run the status action")
def _finish(deployment: aws.Deployment, arn: str) -> ExecutionView:
    described, history = aws.wait_for_end(deployment.client("stepfunctions"), arn, poll=aws.POLL_SECONDS)
    return ExecutionView.from_aws(described, history)
