"""Before `run` and `up` launch anything: the deployment's own plan action for the same request
(regions and pools in rank order, their prices), what it should cost, what happens if spot runs
out, and a [y/N] question. --yes skips the plan and the question; --json never asks."""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass, field

from gpufill import catalog
from gpufill.cli import aws
from gpufill.cli.common import EXIT_FAILED, Failed, UsageError, fresh_name, program, say
from gpufill.cli.execution import ExecutionView
from gpufill.cli.render_plan import render_plan_preview
from gpufill.cli.render_summary import render_summary
from gpufill.constants import DEFAULT_INSTANCE_TYPE

# What the plan action reads; anything else (tags, maintain, wait_for_capacity, max_lifetime…)
# belongs to the provisioning run only, and the plan action refuses some of it.
PLAN_FIELDS = (
    "instance_types", "instance_type", "count", "batch_max", "launch_mode", "market", "on_demand_strategy",
    "origin_region", "regions", "scoring", "placement", "all_or_nothing",
)


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--yes", "-y", action="store_true",
        help="start without showing the plan and asking (needed with --json, which never asks)",
    )


def needs_question(request: dict) -> bool:
    return request.get("action", "provision") == "provision"


def refuse_json_without_yes(args: argparse.Namespace, request: dict) -> None:
    """--json promises one document and no question on stdin: a provisioning run needs --yes then."""
    if args.json and not args.yes and needs_question(request):
        raise UsageError(
            "--json never asks before launching: add --yes to start without the plan and the question, "
            "or drop --json to see the plan and answer it; nothing was started"
        )


@dataclass
class Preview:
    """What the plan says the request will cost, in the order the fill will try its pools."""

    count: int
    market: str
    pools: list[dict]
    regions: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    expected_hourly: float | None = None
    highest_hourly: float | None = None
    if_spot_runs_out: str = ""
    # capacity_block: the purchase the run may make, at most its upper bound (None: it buys none).
    capacity_block: str | None = None


def preview(request: dict, plan: dict) -> Preview:
    market = request.get("market", "spot")
    # market capacity-block tries no spot or On-Demand pool: the block it buys is its only spend.
    planned = [] if market == "capacity-block" else plan.get("pools") or []
    pools = [p for p in planned if isinstance(p.get("price"), (int, float))]
    count = int(request.get("count", 1))
    result = Preview(count=count, market=market, pools=planned)
    result.regions = (list(request.get("regions") or []) if market == "capacity-block"
                      else list(dict.fromkeys(p["region"] for p in result.pools)))
    result.types = list(dict.fromkeys(p["instance_type"] for p in result.pools))
    if pools:
        result.expected_hourly = round(count * pools[0]["price"], 4)
        result.highest_hourly = round(count * max(p["price"] for p in pools), 4)
    result.if_spot_runs_out = spot_runs_out(request, result)
    result.capacity_block = block_purchase(request)
    if market == "spot-then-on-demand":
        fallback = _on_demand_highest(result.types or _types(request), request.get("regions") or result.regions)
        if fallback is not None:
            result.highest_hourly = max(result.highest_hourly or 0.0, round(count * fallback, 4))
    return result


def spot_runs_out(request: dict, shown: Preview) -> str:
    wait = (request.get("wait_for_capacity") or {}).get("deadline")
    waits = f"it waits up to {wait} for capacity (re-scoring and retrying), keeping what it launched; then " if wait else ""
    if request.get("all_or_nothing") and wait:
        return (
            f"each try that cannot launch all {shown.count} terminates what it launched itself, and the run waits up to "
            f"{wait} holding nothing (re-scoring and retrying); then it ends CAPACITY_WAIT_EXPIRED: all {shown.count} or none"
        )
    if request.get("all_or_nothing"):
        return f"{waits}it terminates what it launched itself and ends GANG_NOT_PLACED: all {shown.count} or none"
    if shown.market == "capacity-block":
        return "nothing is launched on spot or On-Demand: the run launches only into the block it buys (NO_CAPACITY_BLOCK if none fits)"
    if shown.market == "on-demand":
        return f"no spot is used; if on-demand capacity runs out, {waits}it keeps what it launched (PARTIAL, or ALL_ON_DEMAND_FAILED if none)"
    if shown.market == "spot-then-on-demand":
        strategy = request.get("on_demand_strategy", "cost")
        order = "cheapest on-demand region first" if strategy == "cost" else "lowest-latency region first"
        price = _on_demand_highest(shown.types or _types(request), request.get("regions") or shown.regions)
        each = f", up to ${price:.4f}/h each" if price is not None else ""
        return f"{waits}the rest is bought on-demand ({order}{each})"
    return f"{waits}it keeps what it launched (PARTIAL, or ALL_SPOT_EXHAUSTED if none); nothing is bought on-demand"


def block_purchase(request: dict) -> str | None:
    """What a request with `capacity_block` may buy: one block, at most max_upfront_usd, paid
    upfront whether or not it is used, bought only after a person approves (docs/capacity-blocks.md)."""
    block = request.get("capacity_block")
    if not block:
        return None
    when = ("instead of spot or On-Demand" if request.get("market") == "capacity-block"
            else "only if spot and On-Demand cannot fill")
    return (f"{when}, one block of {request.get('count', 1)} x {', '.join(_types(request))} for "
            f"{block.get('duration_hours')} h starting within {block.get('start_within')}: up to "
            f"${float(block.get('max_upfront_usd', 0)):,.2f} upfront, non-refundable, asked for approval before it is bought")


def _types(request: dict) -> list[str]:
    return list(request.get("instance_types") or [request.get("instance_type") or DEFAULT_INSTANCE_TYPE])


def _on_demand_highest(types: list[str], regions: list[str]) -> float | None:
    prices = [catalog.on_demand_price(t, r) for t in types for r in regions]
    known = [p for p in prices if p is not None]
    return max(known) if known else None


def plan_request(request: dict) -> dict:
    return {"action": "plan", **{k: v for k, v in request.items() if k in PLAN_FIELDS}}


def confirm(args: argparse.Namespace, deployment: aws.Deployment, request: dict, stem: str) -> int | None:
    """None when the run may start: --yes, a request that launches nothing, or a yes to the plan.
    Otherwise the exit code to end with (the plan failed, or the answer was no)."""
    if args.yes or not needs_question(request):
        return None
    name = fresh_name(f"plan-{stem}")
    arn = aws.start_execution(deployment, plan_request(request), name)
    try:
        view = _finish(deployment, arn)
    except KeyboardInterrupt:
        # The plan launches nothing, but its execution would run on unseen: stopped and said so.
        _stop_plan(deployment, arn, name)
        raise
    if view.status != "SUCCEEDED":
        print(render_summary(view))
        raise Failed(f"the plan for this request failed ({view.error}); nothing was started")
    shown = preview(request, view.output or {})
    for line in render_plan_preview(request, shown):
        print(line)
    if not shown.pools and not shown.capacity_block:
        raise Failed(f"the plan found no pool to try for this request{no_pool_reasons(view.output or {})}; "
                     "nothing was started. Try other --regions or instance types")
    if _answer("Start it? [y/N] ") in ("y", "yes"):
        return None
    again = shlex.join([*getattr(args, "argv", [args.verb]), "--yes"])
    say(f"nothing was started. To start it without the question: {program()} {again}")
    return EXIT_FAILED


def no_pool_reasons(plan: dict, listed: int = 6) -> str:
    """Why each region and type gave no pool, as the plan's scores say (`: us-east-1 p5.48xlarge:
    not offered in any AZ; ...`), or nothing when the plan gives no reason."""
    dropped = [f"{s['region']} {s['instance_type']}: {s['dropped']}" for s in plan.get("regions") or [] if s.get("dropped")]
    if not dropped:
        return ""
    more = f"; and {len(dropped) - listed} more" if len(dropped) > listed else ""
    return ": " + "; ".join(dropped[:listed]) + more


def _stop_plan(deployment: aws.Deployment, arn: str, name: str) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        deployment.client("stepfunctions").stop_execution(executionArn=arn, cause="gpufill up/run interrupted")
        say(f"interrupted: the plan execution {name} was stopped; nothing was started")
    except (BotoCoreError, ClientError) as error:
        say(f"interrupted: the plan execution {name} could not be stopped ({aws.readable(str(error))}); "
            "it launches nothing and ends by itself")


def _answer(question: str) -> str:
    print(question, end="", flush=True)
    line = sys.stdin.readline() if sys.stdin is not None else ""
    if not line:
        print()  # no answer (stdin closed): the question's line still ends
    return line.strip().lower()


@aws.aws_errors("plan the request")
def _finish(deployment: aws.Deployment, arn: str) -> ExecutionView:
    described, history = aws.wait_for_end(deployment.client("stepfunctions"), arn, poll=aws.POLL_SECONDS)
    return ExecutionView.from_aws(described, history)
