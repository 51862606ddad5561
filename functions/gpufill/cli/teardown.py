"""`gpufill teardown`: start a teardown of the deployment, show what it asks to terminate and how
to answer it; `gpufill approve|reject` answer it."""

from __future__ import annotations

import argparse
import getpass
import shlex
import sys

from gpufill import constants
from gpufill.cli import aws
from gpufill.cli.common import (
    EXIT_OK,
    Failed,
    UsageError,
    check_name,
    check_request,
    fresh_name,
    print_json,
    program,
    say,
)
from gpufill.cli.render import ExecutionView, Progress
from gpufill.cli.runs import deployment_flags, report
from gpufill.cli.status import answer_commands, approval_items, is_pending, target_of

AWAIT_APPROVAL = "AwaitTeardownApproval"


def add_parsers(verbs) -> None:
    teardown = verbs.add_parser(
        "teardown",
        help="terminate a request's instances, given ids, or every instance of the deployment, after approval",
        description="Starts a teardown. It finds the instances, publishes an approval request to the "
        "approval topic and waits for gpufill approve|reject. Without --wait, this prints what it asks "
        "to terminate and how to answer, and returns.",
    )
    target = teardown.add_mutually_exclusive_group(required=True)
    target.add_argument("request_id", nargs="?", default=None, help="the provisioning run (request id) to tear down")
    target.add_argument("--instances", nargs="+", metavar="ID", default=None, help="these instance ids")
    target.add_argument("--all", action="store_true", help="every live instance of this deployment")
    teardown.add_argument("--requested-by", default=None, metavar="WHO", help="who asks (default: your login name)")
    teardown.add_argument("--wait", action="store_true", help="follow the teardown until it ends (answered or expired)")
    teardown.add_argument("--json", action="store_true", help="print one JSON document")
    aws.add_deployment_options(teardown)
    teardown.set_defaults(handler=teardown_verb)

    for verb, decision in (("approve", "approved"), ("reject", "rejected")):
        answer = verbs.add_parser(
            verb,
            help=f"{verb} the pending teardown EXECUTION (or the pending teardown of a request id)",
            description=(
                f"Sends {{\"decision\": \"{decision}\"}} for EXECUTION's pending approval to the deployment's "
                "AnswerApproval function URL, signed with your credentials: the approver recorded is you, as AWS "
                "authenticated you. Refused, changing nothing, when it was already answered or has expired, or "
                "when you are not one of the deployment's approvers."
            ),
        )
        answer.add_argument(
            "execution",
            help="the teardown's execution name or ARN (the ARN also gives region and env), or the request id "
            "whose teardown waits for an answer",
        )
        # nargs: `--reason done with it` reads as a person types it; quoting works too.
        answer.add_argument("--reason", nargs="+", default=None, metavar="WORDS", help="why; recorded with the decision")
        answer.add_argument("--json", action="store_true", help="print the answer as one JSON document")
        answer.add_argument("--env", default=None, help="deployment env (default: from the ARN, $GPUFILL_ENV, else dev)")
        answer.add_argument("--region", default=None, help="region of the state machine (default: from the ARN, else AWS config)")
        answer.add_argument("--endpoint-url", default=None, metavar="URL", help="send every AWS call here")
        answer.set_defaults(handler=answer_verb, decision=decision)


def teardown_verb(args: argparse.Namespace) -> int:
    request: dict = {"action": "teardown", "requested_by": args.requested_by or _login()}
    if args.all:
        request["all"] = True
    elif args.instances:
        request["instance_ids"] = args.instances
    else:
        request["request_id"] = check_name(args.request_id, "REQUEST_ID")
    name = fresh_name("teardown-" + (args.request_id or ("all" if args.all else "instances")))
    check_request(request, "the teardown request")
    deployment = aws.find(args)
    if args.request_id:
        check_known_request(deployment, args.request_id)
    arn = aws.start_execution(deployment, request, name)
    progress = None if args.json else Progress(sys.stdout)
    if progress:
        progress.header(f"gpufill teardown {name} on {deployment.env}")
    described, history = _follow(deployment, arn, progress, until_asked=True)
    view = ExecutionView.from_aws(described, history)
    if view.status != "RUNNING":
        return report(view, args.json)
    asked = _asked(history)
    if args.json and not args.wait:
        print_json({"execution": {"name": name, "arn": arn, "status": "RUNNING"}, "asks": asked,
                    "answer_with": answer_commands(name, deployment)})
        return EXIT_OK
    if progress:
        print()
        print(f"Teardown {name} asks to terminate {len(asked)} instance(s):")
        for instance in asked:
            print(f"  {instance.get('instance_id')}  {instance.get('region', '-'):<15} {instance.get('instance_type') or '-'}")
        print("It waits for an answer (the approval topic's subscribers were told). Answer with:")
        commands = answer_commands(name, deployment)
        print(f"  {commands['approve']}")
        print(f"  {commands['reject']}")
        if not args.wait:
            print(f"Follow it: {program()} watch {name}{deployment_flags(deployment)}")
            return EXIT_OK
        print("Following it until it is answered or expires (Ctrl-C stops only the following):")
    described, history = _follow(deployment, arn, progress, until_asked=False, after=history)
    return report(ExecutionView.from_aws(described, history), args.json)


@aws.aws_errors("look the request up")
def check_known_request(deployment: aws.Deployment, request_id: str) -> None:
    """A request id nothing knows is a typo: said now, before a teardown that could only find nothing.
    Known means an execution of that name, or a record of the deployment that names it."""
    from botocore.exceptions import ClientError

    from gpufill import constants

    records = deployment.table().query(
        IndexName=constants.INSTANCES_BY_REQUEST_INDEX,
        KeyConditionExpression="request_id = :r",
        ExpressionAttributeValues={":r": request_id},
        Limit=1,
    )
    if records.get("Items"):
        return
    try:
        deployment.client("stepfunctions").describe_execution(executionArn=deployment.execution_arn(request_id))
        return
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ExecutionDoesNotExist":
            raise
    raise Failed(
        f"no request {request_id!r} is known to deployment {deployment.env!r} in {deployment.region}: no execution "
        f"of that name and no instance record names it; nothing was started. "
        f"{program()} status{deployment_flags(deployment)} lists the requests that hold instances"
    )


@aws.aws_errors("follow the teardown")
def _follow(deployment: aws.Deployment, arn: str, progress: Progress | None, *, until_asked: bool, after: list | None = None):
    return aws.wait_for_end(
        deployment.client("stepfunctions"),
        arn,
        progress.event if progress else None,
        on_quiet=progress.waiting if progress else None,
        poll=aws.POLL_SECONDS,
        until=_waiting_for_approval if until_asked else None,
        seen=after,
    )


def _entered(event: dict) -> str | None:
    return (event.get("stateEnteredEventDetails") or {}).get("name")


def _waiting_for_approval(history: list[dict]) -> bool:
    """The approval is pending once its task was submitted (the message is published then)."""
    inside = False
    for event in history:
        if _entered(event) == AWAIT_APPROVAL:
            inside = True
        elif inside and event["type"] == "TaskSubmitted":
            return True
    return False


def _asked(history: list[dict]) -> list[dict]:
    import json

    for event in history:
        details = event.get("stateExitedEventDetails") or {}
        if details.get("name") == "FindTeardownInstances":
            try:
                return (json.loads(details.get("output") or "{}").get("teardown") or {}).get("instances") or []
            except json.JSONDecodeError:
                return []
    return []


def _login() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 (no login name in some containers)
        return "unknown"


def answer_verb(args: argparse.Namespace) -> int:
    """gpufill approve|reject EXECUTION: find the pending approval, then answer it through the
    deployment's AnswerApproval function URL, which records the caller as AWS authenticated them."""
    from botocore.exceptions import BotoCoreError, ClientError

    from gpufill import approve

    try:
        ref = approve.parse_execution(args.execution)
    except approve.ApprovalError as error:
        raise UsageError(str(error)) from None
    env = args.env or ref.env or aws.env_of(args)
    session = aws.session_for(args.region or ref.region, args.endpoint_url)
    reason = " ".join(args.reason) if args.reason else None
    try:
        table = session.resource("dynamodb", endpoint_url=args.endpoint_url).Table(approve.table_name(env))
        execution = args.execution if ref.region else _teardown_of(ref.name, table)
        if execution != ref.name:
            ref = approve.ExecutionRef(name=execution)
            if not args.json:
                print(f"request {args.execution}: its pending teardown is {execution}")
        answered = _send_answer(args, env, session, ref.name, reason)
    except approve.ApprovalError as error:
        raise Failed(str(error)) from None
    except (BotoCoreError, ClientError) as error:
        raise Failed(
            f"could not answer {ref.name!r} (env {env}): {aws.readable(str(error))}" + aws.local_hint(env, args.endpoint_url) + aws.local_region_hint(args.endpoint_url)
        ) from None
    approver = answered["answered_by"]
    item = answered
    instance_ids = list(item.get("instance_ids") or [])
    flags = ([] if env == aws.DEFAULT_ENV else ["--env", env]) + ["--region", session.region_name]
    flags += ["--endpoint-url", args.endpoint_url] if args.endpoint_url else []
    follow = f"{program()} watch {ref.name} {shlex.join(flags)}"
    if args.json:
        print_json({
            "execution": ref.name,
            "decision": args.decision,
            "approver": approver,
            "answered_at": answered.get("answered_at"),
            "reason": reason,
            "instance_ids": instance_ids,
            "follow": follow,
        })
        return EXIT_OK
    if item.get("approval_for") == "capacity-block-purchase":  # a Capacity Block purchase, not a teardown
        outcome = "will now be bought" if args.decision == "approved" else "is not bought"
        print(f"{args.decision} the Capacity Block purchase of {ref.name} as {approver}: the block {outcome}.")
        print(f"Follow it: {follow}")
        return EXIT_OK
    outcome = "will now be terminated" if args.decision == "approved" else "stay as they are"
    print(f"{args.decision} teardown {ref.name} as {approver}: its {len(instance_ids)} instance(s) {outcome}.")
    print(f"Follow it: {follow}")
    return EXIT_OK


def _send_answer(args: argparse.Namespace, env: str, session, name: str, reason: str | None) -> dict:
    """Answer through the deployment's AnswerApproval function URL, signed with the caller's own
    credentials: the function records the caller as AWS authenticated them. Its reply, or Failed."""
    from botocore.exceptions import BotoCoreError

    from gpufill.cli import approval_url

    deployment = aws.find(argparse.Namespace(env=env, region=session.region_name, endpoint_url=args.endpoint_url))
    try:
        url = approval_url.url_of(deployment.outputs)
    except approval_url.NoAnswerUrl:
        raise Failed(
            f"stack {deployment.env} has no {constants.OUTPUT_ANSWER_APPROVAL_URL} output: it was deployed before "
            "approvals were answered through their function; deploy it again (npx cdk deploy --all)"
        ) from None
    answer = {"approval": name, "decision": args.decision, "reason": reason}
    try:
        reply = approval_url.send(deployment.session, url, answer)
    except BotoCoreError as error:  # sent, but no reply: the function may have answered
        return _settled(deployment, name, f"no reply from the approval function ({aws.readable(str(error))})")
    if reply.status >= 500:  # the function failed or timed out, perhaps after it answered
        return _settled(deployment, name, f"the approval function failed ({reply.status}: {reply.body.get('message') or reply.body.get('Message')})")
    if reply.refused_by_aws:
        who = _caller(deployment.session, args.endpoint_url)
        raise Failed(
            f"AWS refused {who} the approval function of deployment {env} ({url}): only principals with its "
            f"approver policy ({constants.approver_policy_name(env)}, stack output "
            f"{constants.OUTPUT_APPROVER_POLICY_ARN}) may answer; nothing changed"
        )
    if reply.status != 200:
        raise Failed(str(reply.body.get("message") or reply.body))
    return reply.body


def _settled(deployment, name: str, what: str) -> dict:
    """The answer's fate when its reply was lost: the approval item says whether the function
    claimed it (a claim always precedes SendTaskSuccess; the function's timeout is below the
    request's, so no claim can come later). Never reports an answer that was not made."""
    from gpufill.adapters import approvals

    item = approvals.get(name, deployment.table()) or {}
    if item.get("answered_at"):
        recorded = ("the run recorded it" if item.get("decided_at") else
                    f"the run has not recorded it yet: `{program()} watch {name}` shows whether it arrived")
        say(f"{what}; the approval item records the answer by {item.get('answered_by')} at {item['answered_at']} ({recorded})")
        return {"answered_by": item.get("answered_by"), "answered_at": item.get("answered_at"),
                "approval_for": item.get("approval_for") or "teardown", "instance_ids": list(item.get("instance_ids") or []),
                "decision": item.get("answer"), "reason": item.get("answer_reason")}
    raise Failed(f"{what}; the approval item records no answer: nothing was sent and nothing changed. Run the command again")


def _teardown_of(answered: str, table) -> str:
    """`answered` when a teardown approval is on record under it; else the execution of the teardown
    waiting for an answer about request `answered` (gpufill approve REQUEST_ID)."""
    from gpufill.adapters import approvals

    if approvals.get(answered, table) is not None:
        return answered
    about = [i for i in approval_items(table, pending_only=False) if target_of(i).get("request_id") == answered]
    waiting = [i for i in about if is_pending(i)]
    if len(waiting) > 1:
        listed = ", ".join(sorted(i["execution_name"] for i in waiting))
        raise Failed(f"request {answered!r} has {len(waiting)} teardowns waiting for an answer ({listed}); "
                     "answer one by its execution name; nothing changed")
    if waiting:
        return waiting[0]["execution_name"]
    everything = sorted(i["execution_name"] for i in approval_items(table) if is_pending(i) and target_of(i).get("all"))
    if everything:
        # It would end every instance of the deployment, not only this request's: never answered by a request id.
        raise Failed(
            f"request {answered!r} has no teardown of its own waiting; {everything[0]} (every instance of the deployment) "
            "waits for an answer: answer it by its name, as it ends more than this request; nothing changed"
        )
    if about:  # answered, decided or expired: approve.answer says which, naming the latest
        return max(about, key=lambda i: str(i.get("requested_at", "")))["execution_name"]
    raise Failed(
        f"no teardown approval is on record for {answered!r}, neither as a teardown's execution name nor as the "
        "request a teardown is about: check the name, the region and --env (each deployment has its own table); "
        "nothing changed"
    )


def _caller(session, endpoint_url: str | None) -> str:
    """Who answers: the caller's IAM identity, else the login name."""
    try:
        return session.client("sts", endpoint_url=endpoint_url).get_caller_identity()["Arn"]
    except Exception:  # noqa: BLE001 (no credentials for STS still leaves a name worth recording)
        return _login()
