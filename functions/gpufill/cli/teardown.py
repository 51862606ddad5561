"""`gpufill teardown`: start a teardown of the deployment, show what it asks to terminate and how
to answer it; `gpufill approve|reject` answer it."""

from __future__ import annotations

import argparse
import getpass
import sys

from gpufill.cli import aws
from gpufill.cli.common import EXIT_OK, Failed, UsageError, check_name, fresh_name, print_json
from gpufill.cli.render import ExecutionView, Progress
from gpufill.cli.runs import deployment_flags, report, start

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
            help=f"{verb} the pending teardown EXECUTION",
            description=(
                f"Sends {{\"decision\": \"{decision}\"}} with the task token of EXECUTION's pending approval "
                "(SendTaskSuccess). Refused, changing nothing, when it was already answered or has expired."
            ),
        )
        answer.add_argument("execution", help="the teardown's execution name or ARN (the ARN also gives region and env)")
        answer.add_argument("--reason", default=None, help="why; recorded with the decision")
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
    deployment = aws.find(args)
    arn = start(deployment, request, name)
    progress = None if args.json else Progress(sys.stdout)
    if progress:
        progress.header(f"gpufill teardown {name} on {deployment.env}")
    described, history = _follow(deployment, arn, progress, until_asked=not args.wait)
    view = ExecutionView.from_aws(described, history)
    if view.status != "RUNNING":
        return report(view, args.json)
    flags = deployment_flags(deployment)
    if args.json:
        print_json({"execution": {"name": name, "arn": arn, "status": "RUNNING"}, "asks": _asked(history)})
        return EXIT_OK
    asked = _asked(history)
    print()
    print(f"Teardown {name} asks to terminate {len(asked)} instance(s):")
    for instance in asked:
        print(f"  {instance.get('instance_id')}  {instance.get('region', '-'):<15} {instance.get('instance_type') or '-'}")
    print("It waits for an answer (the approval topic's subscribers were told). Answer with:")
    print(f"  gpufill approve {name}{flags} --reason '...'")
    print(f"  gpufill reject {name}{flags}")
    print(f"Follow it: gpufill watch {name}{flags}")
    return EXIT_OK


@aws.aws_errors("follow the teardown")
def _follow(deployment: aws.Deployment, arn: str, progress: Progress | None, *, until_asked: bool):
    return aws.wait_for_end(
        deployment.client("stepfunctions"),
        arn,
        progress.event if progress else None,
        on_quiet=progress.waiting if progress else None,
        poll=aws.POLL_SECONDS,
        until=_waiting_for_approval if until_asked else None,
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
    except Exception:  # no login name in some containers
        return "unknown"


def answer_verb(args: argparse.Namespace) -> int:
    """gpufill approve|reject EXECUTION: claim the pending approval, then SendTaskSuccess with the decision."""
    from botocore.exceptions import BotoCoreError, ClientError

    from gpufill import approve

    try:
        ref = approve.parse_execution(args.execution)
    except approve.ApprovalError as error:
        raise UsageError(str(error)) from None
    env = args.env or ref.env or aws.env_of(args)
    session = aws.session_for(args.region or ref.region, args.endpoint_url)
    try:
        table = session.resource("dynamodb", endpoint_url=args.endpoint_url).Table(approve.table_name(env))
        approver = _caller(session, args.endpoint_url)
        item = approve.answer(
            args.execution,
            args.decision,
            approver=approver,
            reason=args.reason,
            sfn=session.client("stepfunctions", endpoint_url=args.endpoint_url),
            table=table,
        )
    except approve.ApprovalError as error:
        raise Failed(str(error)) from None
    except (BotoCoreError, ClientError) as error:
        raise Failed(f"could not answer {ref.name!r} (env {env}): {error}" + aws.local_hint(env, args.endpoint_url)) from None
    count = len(item.get("instance_ids") or [])
    outcome = "will now be terminated" if args.decision == "approved" else "stay as they are"
    print(f"{args.decision} teardown {ref.name} as {approver}: its {count} instance(s) {outcome}.")
    endpoint = f" --endpoint-url {args.endpoint_url}" if args.endpoint_url else ""
    print(f"Follow it: gpufill watch {ref.name} --env {env} --region {session.region_name}{endpoint}")
    return EXIT_OK


def _caller(session, endpoint_url: str | None) -> str:
    """Who answers: the caller's IAM identity, else the login name."""
    try:
        return session.client("sts", endpoint_url=endpoint_url).get_caller_identity()["Arn"]
    except Exception:  # no credentials for STS still leaves a name worth recording
        return _login()
