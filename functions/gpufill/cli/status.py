"""`gpufill status [REQUEST_ID]`: the deployed state machine's status action, as a table."""

from __future__ import annotations

import argparse

from gpufill.cli import aws
from gpufill.cli.common import EXIT_FAILED, EXIT_OK, check_name, fresh_name, print_json
from gpufill.cli.render import ExecutionView, render_status, render_summary
from gpufill.cli.runs import start


def add_parser(verbs) -> None:
    status = verbs.add_parser(
        "status",
        help="list the deployment's instances (all, or one request's) with state, price and findings",
        description="Runs the status action (DescribeInstances in every region the deployment used, "
        "compared with its records) and prints the table.",
    )
    status.add_argument("request_id", nargs="?", default=None, help="only this request's instances")
    status.add_argument("--json", action="store_true", help="print the status result as one JSON document")
    aws.add_deployment_options(status)
    status.set_defaults(handler=status_verb)


def status_verb(args: argparse.Namespace) -> int:
    if args.request_id is not None:
        check_name(args.request_id, "REQUEST_ID")
    request = {"action": "status"}
    if args.request_id:
        request["request_id"] = args.request_id
    deployment = aws.find(args)
    arn = start(deployment, request, fresh_name("status"))
    view = _finish(deployment, arn)
    if view.status != "SUCCEEDED":
        if args.json:
            print_json(view.summary())
        else:
            print(render_summary(view))
        return EXIT_FAILED
    if args.json:
        print_json(view.output)
    else:
        print("\n".join(render_status(view.output)))
    return EXIT_OK


@aws.aws_errors("run the status action")
def _finish(deployment: aws.Deployment, arn: str) -> ExecutionView:
    described, history = aws.wait_for_end(deployment.client("stepfunctions"), arn, poll=aws.POLL_SECONDS)
    return ExecutionView.from_aws(described, history)
