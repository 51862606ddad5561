"""`gpufill connect INSTANCE_ID`: forward a local port to the instance's model server over SSM."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

from gpufill import constants
from gpufill.cli import aws
from gpufill.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    Failed,
    UsageError,
    print_json,
    program,
)
from gpufill.policy.boot import port_forward_command

PLUGIN = "session-manager-plugin"
PLUGIN_INSTALL = (
    "https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html"
)
MODELS_PATH = "/v1/models"
READY_POLL_SECONDS = 5.0
STDERR_FD = 2


def add_parser(verbs) -> None:
    connect = verbs.add_parser(
        "connect",
        help="forward localhost:PORT to an instance's model server through SSM Session Manager",
        description="Runs the SSM port forward (needs the AWS CLI and the Session Manager plugin) and says "
        f"when http://localhost:PORT{MODELS_PATH} answers. Without the plugin, prints the command and how "
        "to install the plugin.",
    )
    connect.add_argument("instance_id", help="the instance (i-...)")
    connect.add_argument("--port", type=int, default=8000, help="local port, and the model server's port (default 8000)")
    connect.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (instance, region, port, url, the port-forward command) before forwarding; "
        "the forward's own output goes to stderr",
    )
    aws.add_deployment_options(connect)
    connect.set_defaults(handler=connect_verb)


def connect_verb(args: argparse.Namespace) -> int:
    if not args.instance_id.startswith("i-"):
        raise UsageError(f"INSTANCE_ID {args.instance_id!r} is not an instance id (i-...)")
    if not 1 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port number (1-65535)")
    deployment = aws.find(args)
    args.instance_id = _instance_id(deployment, args.instance_id)
    region = instance_region(deployment, args.instance_id)
    command = port_forward_command(region, args.instance_id, args.port)
    missing = [tool for tool in ("aws", PLUGIN) if shutil.which(tool) is None]
    if args.json:
        print_json({
            "instance_id": args.instance_id,
            "region": region,
            "port": args.port,
            "url": f"http://localhost:{args.port}{MODELS_PATH}",
            "command": command,
            "forwarding": not missing,
            "missing": missing,
            "install": PLUGIN_INSTALL if missing else None,
        })
        if missing:
            return EXIT_FAILED
    elif missing:
        what = "the AWS CLI and " if "aws" in missing else ""
        print(f"{what}the Session Manager plugin ({PLUGIN}) is not installed here; install it:")
        print(f"  {PLUGIN_INSTALL}")
        print(f"then run {program()} connect again, or the port forward itself:")
        print(f"  {command}")
        return EXIT_FAILED
    else:
        print(f"forwarding localhost:{args.port} to {args.instance_id} ({region}) port {args.port}; Ctrl-C ends it")
    # With --json the forward's own lines ("Starting session with SessionId ...") go to stderr.
    forward = subprocess.Popen(command, shell=True, stdout=STDERR_FD if args.json else None)  # gpufill's own command, quoted for a shell
    threading.Thread(target=_say_when_ready, args=(args.port, forward), daemon=True).start()
    try:
        return EXIT_OK if forward.wait() == 0 else EXIT_FAILED
    finally:
        if forward.poll() is None:
            forward.terminate()


def _say_when_ready(port: int, forward: subprocess.Popen) -> None:
    url = f"http://localhost:{port}{MODELS_PATH}"
    started = time.monotonic()
    while forward.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=3) as reply:
                if reply.status == 200:
                    print(f"model server answers: curl {url}", file=sys.stderr, flush=True)
                    return
        except OSError:
            pass
        if time.monotonic() - started > 60 and int(time.monotonic() - started) % 60 < READY_POLL_SECONDS:
            print(f"    {url} does not answer yet (the model may still be loading)", file=sys.stderr, flush=True)
        time.sleep(READY_POLL_SECONDS)


@aws.aws_errors("find the instance")
@aws.aws_errors("look the instance up")
def _instance_id(deployment: aws.Deployment, given: str) -> str:
    from gpufill.cli import ids

    return ids.instance_ids(deployment, [given])[0]


def instance_region(deployment: aws.Deployment, instance_id: str) -> str:
    """The instance's region, from the deployment's record of it."""
    item = deployment.table().get_item(Key={constants.INSTANCES_TABLE_KEY: instance_id}).get("Item")
    if not item or item.get("kind"):
        raise Failed(
            f"{instance_id} is not an instance of deployment {deployment.env!r} (no record in {deployment.table_name}); "
            f"{program()} status lists the ones it has"
        )
    return item["region"]
