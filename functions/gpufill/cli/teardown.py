"""`gpufill teardown`: start a teardown of the deployment, show what it asks to terminate and how
to answer it; `gpufill approve|reject` answer it."""

from __future__ import annotations

import argparse
import getpass
import shlex
import sys

from gpufill import constants
from gpufill.cli import aws, ids
from gpufill.cli.common import (
    EXIT_FAILED,
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
from gpufill.cli.execution import ExecutionView
from gpufill.cli.render_progress import Progress
from gpufill.cli.runs import answer_commands, asker, deployment_flags, report

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
            help=f"{verb} a pending approval (a teardown, or a Capacity Block purchase)",
            description=(
                f"Sends {{\"decision\": \"{decision}\"}} for the one pending approval REF names to the "
                "deployment's AnswerApproval function URL, signed with your credentials: the approver recorded is "
                "you, as AWS authenticated you. Then says what the answer did; a lost reply is settled from the "
                "approval item and the execution's history. Refused, changing nothing, when it was already answered "
                "or has expired, when you are not one of the deployment's approvers, or when a request id matches "
                "more than one pending approval (they are listed, exit 2)."
            ),
        )
        answer.add_argument(
            "execution",
            help="the approval id (purchase:NAME or teardown:NAME, as status prints it), the teardown's or run's "
            "execution name or ARN (the ARN also gives region and env), or a request id",
        )
        # nargs: `--reason done with it` reads as a person types it; quoting works too.
        answer.add_argument("--reason", nargs="+", default=None, metavar="WORDS", help="why; recorded with the decision")
        answer.add_argument("--json", action="store_true", help="print the answer as one JSON document")
        answer.add_argument("--env", default=None, help="deployment env (default: from the ARN, $GPUFILL_ENV, else dev)")
        answer.add_argument("--region", default=None, help="region of the state machine (default: from the ARN, else AWS config)")
        answer.add_argument("--endpoint-url", default=None, metavar="URL", type=aws.endpoint_url, help="send every AWS call here")
        answer.set_defaults(handler=answer_verb, decision=decision)


def teardown_verb(args: argparse.Namespace) -> int:
    request: dict = {"action": "teardown", "requested_by": args.requested_by or _login()}
    if args.all:
        request["all"] = True
    elif args.instances:
        request["instance_ids"] = args.instances
    else:
        request["request_id"] = check_name(args.request_id, "REQUEST_ID")
    if not all(ids.INSTANCE_ID_START.fullmatch(i) for i in args.instances or []):
        check_request(request, "the teardown request")  # what no prefix can mend is refused before any AWS call
    deployment = aws.find(args)
    if args.request_id:
        request["request_id"] = args.request_id = _resolved(ids.request_id, deployment, args.request_id)
    elif args.instances:
        request["instance_ids"] = _resolved(ids.instance_ids, deployment, args.instances)
    check_request(request, "the teardown request")
    name = fresh_name("teardown-" + (args.request_id or ("all" if args.all else "instances")))
    if args.request_id:
        check_known_request(deployment, args.request_id)
    arn = aws.start_execution(deployment, request, name)
    progress = None if args.json else Progress(sys.stdout)
    if progress:
        progress.header(f"gpufill teardown {name} on {deployment.env}")
    described, history = _follow(deployment, arn, progress, until_asked=True)
    view = ExecutionView.from_aws(described, history)
    if view.status != "RUNNING":
        code = report(view, args.json)
        # Refused: every instance already waits in another teardown's approval (render says which).
        held = [r for r in (view.output or {}).get("refused") or [] if r.get("reason") == "awaiting-approval"]
        return EXIT_FAILED if code == EXIT_OK and held and not (view.output or {}).get("instances") else code
    asked = _asked(history)
    if args.json and not args.wait:
        print_json({"execution": {"name": name, "arn": arn, "status": "RUNNING"}, "asks": asked,
                    "answer_with": answer_commands(f"teardown:{name}", deployment)})
        return EXIT_OK
    if progress:
        print()
        print(f"Teardown {name} asks to terminate {len(asked)} instance(s):")
        for instance in asked:
            print(f"  {instance.get('instance_id')}  {instance.get('region', '-'):<15} {instance.get('instance_type') or '-'}")
        commands = asker(deployment)(f"teardown:{name}")
        print(f"It waits for an answer from {commands['who']} until {_deadline(history) or 'its deadline'} "
              "(then it expires and nothing is terminated). Answer with:")
        print(f"  {commands['approve']}")
        print(f"  {commands['reject']}")
        if not args.wait:
            print(f"Follow it: {program()} watch {name}{deployment_flags(deployment)}")
            return EXIT_OK
        print("Following it until it is answered or expires (Ctrl-C stops only the following):")
    described, history = _follow(deployment, arn, progress, until_asked=False, after=history)
    return report(ExecutionView.from_aws(described, history), args.json)


@aws.aws_errors("look the ids up")
def _resolved(resolve, deployment: aws.Deployment, given):
    return resolve(deployment, given)


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
    if progress and not until_asked:  # the first wait ends as the approval is asked: printed once, below
        progress.asking, progress.execution = asker(deployment), arn.rsplit(":", 1)[-1]
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


def _deadline(history: list[dict]) -> str | None:
    """The approval's deadline, as AwaitTeardownApproval returned it when it asked."""
    import json

    for event in reversed(history):
        if event["type"] == "TaskSubmitted":
            try:
                payload = json.loads((event.get("taskSubmittedEventDetails") or {}).get("output") or "{}").get("Payload")
            except (json.JSONDecodeError, AttributeError):
                return None
            return payload.get("deadline") if isinstance(payload, dict) else None
    return None


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
    """gpufill approve|reject REF: find the one approval REF names (from the table), answer it through
    the deployment's AnswerApproval function URL, which records the caller as AWS authenticated them,
    and say what the answer did."""
    from botocore.exceptions import BotoCoreError, ClientError

    from gpufill import approve

    try:
        ref = approve.parse_execution(args.execution)
    except approve.ApprovalError as error:
        raise UsageError(str(error)) from None
    env = args.env or ref.env or aws.env_of(args)
    session = aws.session_for(args.region or ref.region, args.endpoint_url)
    reason = " ".join(args.reason) if args.reason else None
    flags = ([] if env == aws.DEFAULT_ENV else ["--env", env]) + ["--region", session.region_name]
    flags += ["--endpoint-url", args.endpoint_url] if args.endpoint_url else []
    name = ref.name
    try:
        table = session.resource("dynamodb", endpoint_url=args.endpoint_url).Table(approve.table_name(env))
        sfn = session.client("stepfunctions", endpoint_url=args.endpoint_url)
        item = _find_approval(args.execution, table)
        name = item["execution_name"]
        approve.refuse_if_settled(name, item, _now(), sfn)  # answered or expired: said here, nothing sent
        done, answered_at = _send_answer(args, env, session, item, reason, sfn=sfn, table=table)
    except approve.Ambiguous as error:
        raise UsageError(_ambiguous(args.execution, error.items, args.decision, flags)) from None
    except (approve.ApprovalError, approve.AnswerUnknown) as error:
        raise Failed(str(error)) from None
    except (BotoCoreError, ClientError) as error:
        raise Failed(
            f"could not answer {name!r} (env {env}): {aws.readable(str(error))}" + aws.local_hint(env, args.endpoint_url) + aws.local_region_hint(args.endpoint_url)
        ) from None
    follow = f"{program()} watch {done.execution_name} {shlex.join(flags)}"
    if args.json:
        print_json({
            "approval_id": done.approval_id,
            "kind": done.kind,
            "execution": done.execution_name,
            "decision": done.decision,
            "approver": done.approver,
            "answered_at": answered_at,
            "reason": done.reason,
            "instance_ids": done.instance_ids,
            "nothing_to_do": done.nothing_to_do,
            "settled_after": done.settled_after,
            "effect": done.effect.text if done.effect else None,
            "bought": done.effect.bought if done.effect else None,
            "terminated": done.effect.terminated if done.effect else None,
            "follow": follow,
        })
        return EXIT_OK
    for line in answered_lines(done, follow):
        print(line)
    return EXIT_OK


def _find_approval(given: str, table) -> dict:
    """The approval `given` names exactly (approve.find), else the one whose id, execution name or
    request `given` is a unique start of (ids.approval_ref)."""
    from gpufill import approve
    from gpufill.adapters import approvals

    try:
        return approve.find(given, table)
    # AlreadyDecided from find: nothing has the name, and a teardown of the whole deployment waits.
    except (approve.NoPendingApproval, approve.AlreadyDecided):
        if approve.parse_execution(given).region:  # an ARN is whole or wrong
            raise
        resolved = ids.approval_ref(given, approvals.all_items(table), _now())
        if resolved is None:
            raise
        return approve.find(resolved, table)


def answered_lines(done, follow: str) -> list[str]:
    """What an answer did, as the person who gave it reads it."""
    lines = []
    if done.settled_after:
        lines.append(f"The reply to this answer was lost ({done.settled_after}); the execution shows Step Functions took it.")
    if done.effect:  # settled: what happened, not what will
        what = "the Capacity Block purchase of" if done.kind == "purchase" else "teardown"
        lines.append(f"{done.decision} {what} {done.execution_name} as {done.approver}.")
    elif done.kind == "purchase":
        outcome = "will now be bought" if done.decision == "approved" else "is not bought"
        lines.append(f"{done.decision} the Capacity Block purchase of {done.execution_name} as {done.approver}: the block {outcome}.")
    elif done.nothing_to_do:
        lines.append(f"nothing to do: all {len(done.instance_ids)} instance(s) of teardown {done.execution_name} had already "
                     f"ended; {done.decision} only closes its approval.")
    else:
        outcome = "will now be terminated" if done.decision == "approved" else "stay as they are"
        lines.append(f"{done.decision} teardown {done.execution_name} as {done.approver}: its "
                     f"{len(done.instance_ids)} instance(s) {outcome}.")
    if done.effect:
        lines.append(("So far: " if not done.effect.done else "What it did: ") + done.effect.text + ".")
    lines.append(f"Follow it: {follow}")
    return lines


def _now():
    from gpufill.adapters import clock

    return clock.now()


def _send_answer(args: argparse.Namespace, env: str, session, item: dict, reason: str | None, *, sfn, table):
    """Answer `item` through the deployment's AnswerApproval function URL, signed with the caller's own
    credentials: the function records the caller as AWS authenticated them. What the function's answer
    did (approve.Answered) and when it was made; a lost or failed reply is settled (_settled); else Failed."""
    from botocore.exceptions import BotoCoreError

    from gpufill import approve
    from gpufill.cli import approval_url
    from gpufill.policy import answers

    deployment = aws.find(argparse.Namespace(env=env, region=session.region_name, endpoint_url=args.endpoint_url))
    try:
        url = approval_url.url_of(deployment.outputs)
    except approval_url.NoAnswerUrl:
        raise Failed(
            f"stack {deployment.env} has no {constants.OUTPUT_ANSWER_APPROVAL_URL} output: it was deployed before "
            "approvals were answered through their function; deploy it again (npx cdk deploy --all)"
        ) from None
    label = answers.approval_id(item)
    answer = {"approval": label, "decision": args.decision, "reason": reason}
    try:
        reply = approval_url.send(deployment.session, url, answer)
    except BotoCoreError as error:  # sent, but no reply: the function may have answered
        return _settled(item, args.decision, f"no reply from the approval function ({aws.readable(str(error))})", sfn, table)
    if reply.status >= 500:  # the function failed or timed out, perhaps after it answered
        what = reply.body.get("message") or reply.body.get("Message")
        return _settled(item, args.decision, f"the approval function failed ({reply.status}: {what})", sfn, table)
    if reply.refused_by_aws:
        who = _caller(deployment.session, args.endpoint_url)
        raise Failed(
            f"AWS refused {who} the approval function of deployment {env} ({url}): only principals with its "
            f"approver policy ({constants.approver_policy_name(env)}, stack output "
            f"{constants.OUTPUT_APPROVER_POLICY_ARN}) may answer; nothing changed"
        )
    if reply.status == 409 and reply.body.get("choices"):  # the approvals changed since they were read
        raise approve.Ambiguous(str(reply.body.get("message")), [_choice(c) for c in reply.body["choices"]])
    if reply.status != 200:
        raise Failed(str(reply.body.get("message") or reply.body))
    # Taken after a lost SendTaskSuccess reply, still under way: what it did, once final (up to a minute).
    return approve.follow_effect(_from_reply(reply.body, item), sfn), reply.body.get("answered_at")


def _from_reply(body: dict, item: dict):
    """The function's 200 reply as approve.Answered, so it prints as an answer made here would."""
    from gpufill import approve
    from gpufill.policy import answers

    effect = body.get("effect")
    return approve.Answered(
        approval_id=body.get("approval_id") or answers.approval_id(item),
        kind=body.get("kind") or answers.kind_of(item),
        execution_name=body.get("execution") or item["execution_name"],
        decision=body.get("decision"),
        approver=body.get("approver") or body.get("answered_by"),
        reason=body.get("reason"),
        item=item,
        effect=answers.Effect(**effect) if isinstance(effect, dict) else None,
        settled_after=body.get("settled_after"),
        nothing_to_do=bool(body.get("nothing_to_do")),
        instance_ids=list(body.get("instance_ids") or []),
    )


def _choice(choice: dict) -> dict:
    """A choice the function listed, shaped as an approval item for _ambiguous."""
    kind, _, name = str(choice.get("approval_id") or "").partition(":")
    return {"execution_name": name, "approval_for": "capacity-block-purchase" if kind == "purchase" else "teardown",
            "deadline": choice.get("deadline"), "asks": choice.get("asks")}


def _settled(item: dict, decision: str, what: str, sfn, table):
    """The answer's fate when the function's reply was lost or failed: the approval item says whether
    the function claimed it (a claim always precedes SendTaskSuccess; the function's timeout is below
    the request's, so no claim can come later), and the execution's history whether Step Functions took
    it and what it did since. Never reports an answer that was not made."""
    from gpufill import approve
    from gpufill.adapters import approvals

    now = approvals.get(item["execution_name"], table) or item
    # No claim was there when the command checked, just before it sent: a claim of the same decision is
    # this answer's (the function records the ARN AWS authenticated, which the command cannot know).
    done = approve.settle_claimed(now, what, decision=decision, sfn=sfn, table=table)
    recorded = "the run recorded it" if now.get("decided_at") else "Step Functions took it"
    say(f"{what}; the approval item records the answer by {now.get('answered_by')} at {now.get('answered_at')} ({recorded})")
    return done, now.get("answered_at")


def _ambiguous(given: str, items: list[dict], decision: str, flags: list[str]) -> str:
    """Several approvals wait under one name: each with the exact command that answers it alone."""
    from gpufill import approve
    from gpufill.policy import answers

    verb = "approve" if decision == "approved" else "reject"
    lines = [f"{given!r} matches {len(items)} pending approvals; nothing changed. Answer one by its approval id:"]
    for item in items:
        asks = item.get("asks") or approve.describe(item)  # "asks": as the approval function listed it
        lines.append(f"  {answers.approval_id(item)}: {asks}; expires {item.get('deadline')}")
        lines.append(f"    {program()} {verb} {answers.approval_id(item)} {shlex.join(flags)}")
    return "\n".join(lines)


def _caller(session, endpoint_url: str | None) -> str:
    """Who answers: the caller's IAM identity, else the login name."""
    try:
        return session.client("sts", endpoint_url=endpoint_url).get_caller_identity()["Arn"]
    except Exception:  # noqa: BLE001 (no credentials for STS still leaves a name worth recording)
        return _login()
