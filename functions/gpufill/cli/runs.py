"""`gpufill run`, `watch` and `up`: start and follow executions of a deployed state machine."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from gpufill.cli import aws, confirm, ids, request_flags
from gpufill.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
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
from gpufill.cli.render_summary import render_summary


def add_parsers(verbs) -> None:
    run = verbs.add_parser(
        "run",
        help="start a run of the deployed state machine with REQUEST (on AWS)",
        description="Starts an execution with REQUEST as its input. The execution name is the request id "
        "(a fresh one made from the file name unless --name). --watch follows it to its end. A provisioning "
        "request first shows the deployment's plan for it (pools in rank order, expected $/h) and asks [y/N]; "
        "--yes skips both.",
    )
    run.add_argument("request", type=Path, nargs="?", default=None, help="request JSON (the execution input); optional with request flags")
    run.add_argument("--name", default=None, help="execution name = request id (1-80 of A-Za-z0-9-_)")
    run.add_argument("--watch", action="store_true", help="follow the run and print its summary; exit 1 if it fails")
    run.add_argument("--json", action="store_true", help="print one JSON document instead of progress lines")
    confirm.add_options(run)
    request_flags.add_request_options(run)
    aws.add_deployment_options(run)
    run.set_defaults(handler=run_verb)

    watch = verbs.add_parser(
        "watch",
        help="follow a run of the deployed state machine until it ends and print its summary",
        description="Prints the run's progress from its execution history, then the summary; exit 1 if it failed.",
    )
    watch.add_argument("execution", help="execution name (= request id) or ARN")
    watch.add_argument("--json", action="store_true", help="print one JSON document instead of progress lines")
    aws.add_deployment_options(watch)
    watch.set_defaults(handler=watch_verb)

    up = verbs.add_parser(
        "up",
        help="provision REQUEST, follow it until its instances run, and print how to connect",
        description="gpufill run REQUEST --watch (the plan and the [y/N] question first, unless --yes), "
        "then the gpufill connect command of each running instance.",
    )
    up.add_argument("request", type=Path, nargs="?", default=None, help="provisioning request JSON; optional with request flags")
    up.add_argument("--name", default=None, help="execution name = request id (1-80 of A-Za-z0-9-_)")
    up.add_argument("--json", action="store_true", help="print one JSON document instead of progress lines")
    confirm.add_options(up)
    request_flags.add_request_options(up)
    aws.add_deployment_options(up)
    up.set_defaults(handler=up_verb, watch=True)


def run_verb(args: argparse.Namespace) -> int:
    request, name, stem = _request(args)
    deployment = aws.find(args)
    if args.name:
        aws.refuse_taken_name(deployment, name, deployment_flags(deployment))
    declined = confirm.confirm(args, deployment, request, stem)
    if declined is not None:
        return declined
    arn = aws.start_execution(deployment, request, name)
    if not args.watch:
        if args.json:
            print_json({"execution": {"name": name, "arn": arn, "status": "RUNNING"}})
        else:
            print(f"started {name}\n  {arn}")
            print(f"Follow it: {program()} watch {name}{deployment_flags(deployment)}")
        return EXIT_OK
    view = follow(deployment, arn, header=f"gpufill run {_typed(args)}: {name} on {deployment.env}", quiet=args.json)
    return report(view, args.json)


def watch_verb(args: argparse.Namespace) -> int:
    deployment = aws.find(args)
    arn = deployment.execution_arn(_execution_name(deployment, args.execution))
    view = follow(deployment, arn, header=f"gpufill watch {arn.rsplit(':', 1)[-1]} on {deployment.env}", quiet=args.json)
    return report(view, args.json)


def up_verb(args: argparse.Namespace) -> int:
    request, name, stem = _request(args, refuse_json_first=False)
    action = request.get("action", "provision")
    if action != "provision":
        verb = {"plan": "run FILE --watch", "teardown": "teardown REQUEST_ID", "status": "status"}[action]
        raise UsageError(
            f"{_source(args)}: action: gpufill up provisions, and this request's action is {action!r}; "
            f"nothing was started. For it, use {program()} {verb}",
            [{"field": "action", "problem": f"gpufill up takes action 'provision' only, not {action!r}"}],
        )
    confirm.refuse_json_without_yes(args, request)
    deployment = aws.find(args)
    if args.name:
        aws.refuse_taken_name(deployment, name, deployment_flags(deployment))
    declined = confirm.confirm(args, deployment, request, stem)
    if declined is not None:
        return declined
    arn = aws.start_execution(deployment, request, name)
    view = follow(deployment, arn, header=f"gpufill up {_typed(args)}: {name} on {deployment.env}", quiet=args.json)
    code = report(view, args.json)
    running = [i for i in ((view.output or {}).get("instances") or []) if i.get("state", "running") == "running"]
    if not args.json and view.status == "SUCCEEDED" and running:
        print()
        # ready_timeout: the servers that answered come first, and the line says how many did.
        running.sort(key=lambda i: i.get("serving") is False)
        serving = sum(1 for i in running if i.get("serving"))
        answered = f", {serving} serving the model" if any("serving" in i for i in running) else ""
        print(f"{len(running)} instance(s) running{answered}. Reach a model server on localhost:8000 with:")
        for instance in running[:10]:
            print(f"  {program()} connect {instance['instance_id']}{deployment_flags(deployment)}")
        if len(running) > 10:
            print(f"  ... and {len(running) - 10} more ({program()} status {name}{deployment_flags(deployment)})")
        print(f"When done: {program()} teardown {name}{deployment_flags(deployment)}")
    return code


def _request(args: argparse.Namespace, *, refuse_json_first: bool = True) -> tuple[dict, str, str]:
    """The request (file and flags), its execution name and the stem names are made from; checked
    with the state machine's own model before anything is started."""
    request = request_flags.build(args, args.request)
    stem = args.request.stem if args.request is not None else args.verb
    name = check_name(args.name) if args.name else fresh_name(stem)
    check_request(request, _source(args), name=name)
    if refuse_json_first:
        confirm.refuse_json_without_yes(args, request)
    return request, name, stem


def _typed(args: argparse.Namespace) -> str:
    return str(args.request) if args.request is not None else "(from the flags)"


def _source(args: argparse.Namespace) -> str:
    if args.request is None:
        return "the request from the flags"
    return f"request file {args.request}" + (" with the flags" if request_flags.given(args) else "")


@aws.aws_errors("find the execution")
def _execution_name(deployment: aws.Deployment, given: str) -> str:
    return ids.execution_name(deployment, given)


@aws.aws_errors("follow the execution")
def follow(deployment: aws.Deployment, arn: str, *, header: str, quiet: bool) -> ExecutionView:
    sfn = deployment.client("stepfunctions")
    progress = None if quiet else Progress(sys.stdout)
    if progress:
        progress.header(header)
        progress.asking = asker(deployment)
    try:
        while True:
            if progress:
                progress.execution = arn.rsplit(":", 1)[-1]
            described, history = aws.wait_for_end(
                sfn,
                arn,
                progress.event if progress else None,
                on_quiet=progress.waiting if progress else None,
                poll=aws.POLL_SECONDS,
            )
            successor = continued_as(described)
            if successor is None:
                break
            # wait_for_capacity went on in a new execution of the same request: follow that one.
            if progress:
                progress.header(f"  continued as {successor}; following it")
            arn = deployment.execution_arn(successor)
    except KeyboardInterrupt:  # only the watching stops; the execution goes on in Step Functions
        say(f"stopped watching; the run goes on. Follow it again: {program()} watch {arn.rsplit(':', 1)[-1]}{deployment_flags(deployment)}")
        raise
    return ExecutionView.from_aws(described, history)


def continued_as(described: dict) -> str | None:
    """The execution a finished one handed its request to (wait_for_capacity's continue-as-new)."""
    if described.get("status") != "SUCCEEDED":
        return None
    try:
        output = json.loads(described.get("output") or "null")
    except ValueError:
        return None
    successor = output.get("continued_as") if isinstance(output, dict) and output.get("status") == "CONTINUED" else None
    return successor if isinstance(successor, str) else None


def report(view: ExecutionView, as_json: bool) -> int:
    if as_json:
        print_json(view.summary())
    else:
        print(render_summary(view))
    return EXIT_OK if view.status == "SUCCEEDED" else EXIT_FAILED


def deployment_flags(deployment: aws.Deployment) -> str:
    """The flags that name this deployment again in a printed command."""
    flags = []
    if deployment.env != aws.DEFAULT_ENV:
        flags += ["--env", deployment.env]
    flags += ["--region", deployment.region]
    if deployment.endpoint_url:
        flags += ["--endpoint-url", deployment.endpoint_url]
    return " " + shlex.join(flags)


def answer_commands(approval_id: str, deployment: aws.Deployment) -> dict[str, str]:
    """The commands that answer approval `approval_id` (KIND:EXECUTION), as they can be pasted in this shell."""
    flags = deployment_flags(deployment)
    return {
        "approve": f"{program()} approve {approval_id}{flags} --reason '...'",
        "reject": f"{program()} reject {approval_id}{flags} --reason '...'",
    }


def asker(deployment: aws.Deployment):
    """For a follow that may wait on a person: approval id -> who is asked and the commands that
    answer it (the topic's subscribers are listed once)."""
    who: list[str] = []

    def asking(approval_id: str) -> dict:
        if not who:
            who.append(who_answers(deployment))
        return {"who": who[0], **answer_commands(approval_id, deployment)}

    return asking


def who_answers(deployment: aws.Deployment) -> str:
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
