"""Finding a deployed gpufill: the CloudFormation stack `gpufill-<env>` and its outputs.

Every AWS verb takes --env (default $GPUFILL_ENV, else dev), --region (default the AWS CLI's
configured region) and --endpoint-url (e.g. `gpufill local serve`'s endpoint).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlparse

from gpufill import constants
from gpufill.cli.common import Failed, UsageError

DEFAULT_ENV = "dev"
ENV_VARIABLE = "GPUFILL_ENV"
# A local endpoint (gpufill local serve, or any moto server) accepts any credentials; a
# machine without an AWS profile still needs some to sign requests with.
LOCAL_CREDENTIALS = {"aws_access_key_id": "gpufill-local", "aws_secret_access_key": "gpufill-local"}
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
POLL_SECONDS = 2.0
# How AWS names a region (us-east-1, ap-southeast-4, us-gov-west-1): a --region that is not
# shaped so is a typo, refused before any call is signed for it.
REGION_NAME = re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]+")


def add_deployment_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env", default=None, help=f"deployment env: the stack gpufill-ENV (default ${ENV_VARIABLE}, else {DEFAULT_ENV})"
    )
    parser.add_argument("--region", default=None, help="region of the deployment (default: the AWS CLI's region)")
    parser.add_argument(
        "--endpoint-url", default=None, metavar="URL", type=endpoint_url,
        help="send every AWS call here (e.g. gpufill local serve's endpoint)",
    )


def endpoint_url(text: str) -> str:
    """--endpoint-url as botocore needs it: http(s)://HOST[:PORT]. botocore's own complaint about a
    bare `127.0.0.1:4566` is a traceback, so the shape is checked while the arguments are read."""
    parsed = urlparse(text)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        hint = f"; did you mean http://{text}?" if "://" not in text and text else ""
        raise argparse.ArgumentTypeError(f"{text!r} is not an endpoint URL such as http://127.0.0.1:4566{hint}")
    try:
        parsed.port  # noqa: B018 -- reading it checks the port is a number in range
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} has no valid port (a number from 1 to 65535)") from None
    return text


def env_of(args: argparse.Namespace) -> str:
    return args.env or os.environ.get(ENV_VARIABLE) or DEFAULT_ENV


@dataclass
class Deployment:
    env: str
    region: str
    endpoint_url: str | None
    session: Any
    outputs: dict[str, str]

    @property
    def state_machine_arn(self) -> str:
        return self.outputs[constants.OUTPUT_STATE_MACHINE_ARN]

    @property
    def table_name(self) -> str:
        return self.outputs.get(constants.OUTPUT_INSTANCES_TABLE) or constants.instances_table_name(self.env)

    def client(self, service: str):
        return self.session.client(service, endpoint_url=self.endpoint_url)

    def table(self):
        return self.session.resource("dynamodb", endpoint_url=self.endpoint_url).Table(self.table_name)

    def execution_arn(self, execution: str) -> str:
        """An execution's ARN from its name (or the ARN itself)."""
        if execution.startswith("arn:"):
            return execution
        _, _, service, region, account, _, machine = self.state_machine_arn.split(":")
        return f"arn:aws:{service}:{region}:{account}:execution:{machine}:{execution}"


def session_for(region: str | None, endpoint_url: str | None):
    import boto3

    if region is not None and not REGION_NAME.fullmatch(region):
        raise UsageError(f"--region {region!r} is not a region name (like us-east-1)")
    session = boto3.Session(region_name=region or os.environ.get("AWS_REGION") or None)
    if session.region_name is None and endpoint_url and _is_loopback(endpoint_url):
        # `gpufill local serve` plays its deployment in the local engine's home region.
        session = boto3.Session(region_name=constants.LOCAL_HOME_REGION)
    if session.region_name is None:
        raise UsageError("no AWS region: pass --region, or set one with `aws configure` or $AWS_REGION")
    if endpoint_url and _is_loopback(endpoint_url) and session.get_credentials() is None:
        session = boto3.Session(region_name=session.region_name, **LOCAL_CREDENTIALS)
    return session


def _is_loopback(url: str) -> bool:
    return (urlparse(url).hostname or "") in LOOPBACK


def find(args: argparse.Namespace) -> Deployment:
    """The deployment named by --env/--region/--endpoint-url, from its stack outputs."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    env = env_of(args)
    session = session_for(args.region, args.endpoint_url)
    stack = constants.stack_name(env)
    where = f"in {session.region_name}" + (f" at {args.endpoint_url}" if args.endpoint_url else "")
    try:
        cfn = session.client("cloudformation", endpoint_url=args.endpoint_url)
        described = cfn.describe_stacks(StackName=stack)["Stacks"][0]
    except NoCredentialsError:
        raise Failed("no AWS credentials found: configure them (aws configure, AWS_PROFILE, SSO) and try again"
                     + local_hint(env, args.endpoint_url)) from None
    except ClientError as error:
        message = error.response.get("Error", {}).get("Message", str(error))
        if "does not exist" in message:
            raise Failed(
                f"no gpufill deployment {env!r} {where}: stack {stack} was not found. Deploy it "
                f"(npx cdk deploy --all -c env={env}) or name the right one with --env/--region"
                + local_hint(env, args.endpoint_url) + local_region_hint(args.endpoint_url)
            ) from None
        raise Failed(f"could not read stack {stack} {where}: {readable(message)}") from None
    except BotoCoreError as error:
        raise Failed(f"could not reach CloudFormation {where}: {readable(str(error))}") from None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
    if constants.OUTPUT_STATE_MACHINE_ARN not in outputs:
        raise Failed(
            f"stack {stack} {where} has no {constants.OUTPUT_STATE_MACHINE_ARN} output "
            f"(status {described.get('StackStatus')}); is the deployment complete?"
        )
    return Deployment(env=env, region=session.region_name, endpoint_url=args.endpoint_url, session=session, outputs=outputs)


def local_hint(env: str, endpoint_url: str | None) -> str:
    if env == "local" and not endpoint_url:
        return "; the local deployment is gpufill local serve's: add --endpoint-url with the endpoint it printed"
    return ""


def local_region_hint(endpoint_url: str | None) -> str:
    if endpoint_url and _is_loopback(endpoint_url):
        return f"; gpufill local serve's deployment is in {constants.LOCAL_HOME_REGION}"
    return ""


def readable(message: str) -> str:
    """An error message fit for one line: an endpoint's HTML error page becomes its status line."""
    if "<html" not in message.lower() and "<!doctype" not in message.lower():
        return message
    title = re.search(r"<title>(.*?)</title>", message, flags=re.S | re.I)
    status = title.group(1).strip() if title else "an HTML error page"
    return f"the endpoint answered {status} (its own log says why)"


def aws_errors(action: str) -> Callable:
    """Turns botocore's errors into one line naming what was being done (exit 1)."""

    def wrap(function: Callable) -> Callable:
        def run(*args, **kwargs):
            from botocore.exceptions import BotoCoreError, ClientError

            try:
                return function(*args, **kwargs)
            except ClientError as error:
                detail = error.response.get("Error", {})
                message = readable(str(detail.get("Message")))
                code = detail.get("Code")
                raise Failed(f"could not {action}: {message}" if message != detail.get("Message") else f"could not {action}: {code}: {message}") from None
            except BotoCoreError as error:
                raise Failed(f"could not {action}: {readable(str(error))}") from None

        return run

    return wrap


@aws_errors("start the execution")
def refuse_taken_name(deployment: Deployment, name: str, flags: str = "") -> None:
    """A --name another execution of this state machine already has: refused before the plan and
    the [y/N], which would otherwise end in StartExecution's ExecutionAlreadyExists."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        described = deployment.client("stepfunctions").describe_execution(executionArn=deployment.execution_arn(name))
    except (ClientError, BotoCoreError):  # none of that name (or no answer): StartExecution has the last word
        return
    raise UsageError(
        f"--name {name!r}: the execution {name} already exists ({described.get('status', 'unknown').lower()}); "
        f"choose another --name, or follow it with: gpufill watch {name}{flags}",
        [{"field": "--name", "problem": f"an execution named {name!r} already exists"}],
    )


def start_execution(deployment: Deployment, request: dict, name: str) -> str:
    """Start an execution of the deployment's state machine; its ARN."""
    sfn = deployment.client("stepfunctions")
    return sfn.start_execution(stateMachineArn=deployment.state_machine_arn, name=name, input=json.dumps(request))[
        "executionArn"
    ]


def history(sfn, arn: str, after: int = 0) -> list[dict]:
    """Every event of the execution with an id above `after`, oldest first."""
    events: list[dict] = []
    kwargs: dict[str, Any] = {}
    while True:
        page = sfn.get_execution_history(executionArn=arn, maxResults=1000, **kwargs)
        events.extend(e for e in page["events"] if e["id"] > after)
        if not page.get("nextToken"):
            return events
        kwargs["nextToken"] = page["nextToken"]


def wait_for_end(
    sfn,
    arn: str,
    on_event: Callable[[dict], None] | None = None,
    *,
    poll: float = POLL_SECONDS,
    on_quiet: Callable[[str | None, Any], None] | None = None,
    quiet_after: float = 60.0,
    until: Callable[[list[dict]], bool] | None = None,
    seen: list[dict] | None = None,
) -> tuple[dict, list[dict]]:
    """Polls until the execution ends (or `until(history)` holds), handing each new history event
    to `on_event`, and `on_quiet(state, since)` once per state when nothing happened for
    `quiet_after` seconds. Returns the last DescribeExecution and the history so far (`seen`,
    the events an earlier wait returned, plus the new ones)."""
    seen = list(seen or [])
    last_change = time.monotonic()
    quiet_reported: set[int] = set()
    while True:
        described = sfn.describe_execution(executionArn=arn)
        new = history(sfn, arn, after=seen[-1]["id"] if seen else 0)
        for event in new:
            if on_event:
                on_event(event)
        if new:
            seen.extend(new)
            last_change = time.monotonic()
        if described["status"] != "RUNNING":
            if described["status"] == "SUCCEEDED" and "output" not in described:
                time.sleep(min(poll, 0.2))  # the status can flip a moment before the output is stored
                continue
            return described, seen
        if until is not None and until(seen):
            return described, seen
        if on_quiet and seen and time.monotonic() - last_change > quiet_after and seen[-1]["id"] not in quiet_reported:
            quiet_reported.add(seen[-1]["id"])
            on_quiet(_current_state(seen), seen[-1]["timestamp"])
        time.sleep(poll)


def _current_state(events: list[dict]) -> str | None:
    for event in reversed(events):
        details = event.get("stateEnteredEventDetails")
        if details:
            return details.get("name")
    return None
