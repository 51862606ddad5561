"""Human-readable progress and summaries of a run, built from its execution history alone, so
`simulate` (local engine), `run --watch`, `watch` and `up` (Step Functions on AWS) print the same."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TextIO

from gpufill.constants import CAPACITY_BLOCK_TYPE, PURCHASE_FAILED


@dataclass
class ExecutionView:
    """What the summary needs of a finished execution, wherever it ran. `metrics` and
    `notifications` are known only on the local engine."""

    name: str
    arn: str
    status: str
    output: Any = None
    error: str | None = None
    cause: Any = None
    history: list[dict] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    notifications: list[dict] = field(default_factory=list)

    @classmethod
    def from_aws(cls, described: dict, history: list[dict]) -> ExecutionView:
        return cls(
            name=described["name"],
            arn=described["executionArn"],
            status=described["status"],
            output=_json(described.get("output")),
            error=described.get("error"),
            cause=_json(described.get("cause")),
            history=history,
        )

    def summary(self) -> dict:
        """The --json document of `run --watch`, `watch` and `up`: simulate's shape without metrics."""
        execution: dict[str, Any] = {"name": self.name, "arn": self.arn, "status": self.status}
        if self.status == "SUCCEEDED":
            execution["output"] = self.output
        else:
            execution["error"], execution["cause"] = self.error, self.cause
        return {"execution": execution}


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def step_attempts(run: dict) -> list[dict]:
    """The attempts one LaunchBatch step made: `step_attempts` when the run carries it, else the
    last of the run's `attempts` (the run state before step_attempts existed)."""
    if isinstance(run.get("step_attempts"), list):
        return run["step_attempts"]
    attempts = run.get("attempts")
    return attempts[-1:] if isinstance(attempts, list) else []

# Choices route on what a step already reported, so they print nothing (a test holds every Choice here).
QUIET_STATES = {
    "IsRequestValid", "IsContinuation", "WhichAction", "IsPlanOnly", "WhereNext", "WhatAfterThisMarket", "ScoreRegion",
    "AreInstancesRunning", "IsFulfilled", "AreFactsWarm", "UseWarmFacts",
}
# Teardown and status: choices stay quiet, and these report on exit, with what they found.
QUIET_STATES |= {"AnythingToTerminate", "IsTeardownApproved"}
# ready_timeout: the readiness loop reports on CheckServing's exit, when what it saw changed.
QUIET_STATES |= {"ShouldCheckServing", "CheckServing", "AreModelsServing", "PauseForServing"}
# A teardown that asked for approval ends in TeardownResult, its output: the summary prints it.
QUIET_STATES |= {"TeardownResult"}
REPORTED_ON_EXIT = {"FindTeardownInstances", "RecordApprovalDecision", "RecordApprovalExpiry", "TerminateRegionInstances"}
# wait_for_capacity: the loop's steps report on exit, with the wait, the next try and the deadline.
QUIET_STATES |= {"ShouldWaitAgain", "WhereToTryAgain", "PauseForCapacity", "IsHandedOver"}
WAIT_STEPS = {"PlanNextTry", "StartNextTry"}
# capacity_block: the choices route on what ChooseCapacityBlock and the decision reported.
QUIET_STATES |= {"WhatAfterTheBlockChoice", "IsPurchaseApproved", "IsBlockPaid", "PauseForPayment", "IsBlockLaunchStopped"}
REPORTED_ON_EXIT |= {"RecordPurchaseDecision", "RecordPurchaseExpiry"}
# A bought block tried again: TryBlockAgain's exit says when, or that the block is no longer usable.
QUIET_STATES |= {"IsBlockTriedAgain", "PauseForBlock"}


# The states that wait on a person, and what each approval is about.
KIND_OF_APPROVAL_STATE = {"AwaitTeardownApproval": "teardown", "AwaitPurchaseApproval": "purchase"}


def _json_or_empty(text: str | None) -> dict:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _details(event: dict, kind: str) -> dict:
    return event.get(kind) or {}


def _state_output(event: dict) -> dict:
    try:
        return json.loads(_details(event, "stateExitedEventDetails").get("output") or "{}")
    except json.JSONDecodeError:
        return {}


def pool_label(item: dict, blocks: frozenset[str] = frozenset()) -> str:
    return f"{market_label(item, blocks):<9} {item['availability_zone']:<16} {item['instance_type']}"


def market_label(item: dict, blocks: frozenset[str] = frozenset()) -> str:
    """An instance's or attempt's market as a person reads it: `capacity-block` for one in a Capacity
    Block (it carries its block's fee, or launched into one of `blocks`, the run's bought blocks),
    which EC2 bills as neither spot nor On-Demand, though the launch record says on-demand."""
    if block_of(item, blocks):
        return CAPACITY_BLOCK_TYPE
    return item.get("market") or "-"


def block_of(item: dict, blocks: frozenset[str] = frozenset()) -> str | None:
    """The Capacity Block `item` runs in (its reservation id), None when it is in none."""
    reservation = item.get("capacity_reservation_id")
    if reservation and (isinstance(item.get("capacity_block_fee"), int | float) or reservation in blocks):
        return reservation
    return None


def run_blocks(run: dict | None) -> frozenset[str]:
    """The Capacity Block a run bought, as a set for market_label."""
    block = (run or {}).get("capacity_block")
    reservation = block.get("capacity_reservation_id") if isinstance(block, dict) else None
    return frozenset([reservation]) if reservation else frozenset()


class Progress:
    """Prints one line per meaningful step while the run goes."""

    def __init__(self, out: TextIO):
        self.out = out
        self.plan: dict = {}
        self.entered: str | None = None  # the last state entered: a Map's start event does not name its state
        self.serving_seen = ""  # the last startup steps CheckServing reported, so a round that changed nothing is quiet
        # A wait on a person names who is asked and the commands that answer: `asking(approval_id)`
        # gives {"who", "approve", "reject"} for the execution being followed (`execution`).
        self.asking: Callable[[str], dict] | None = None
        self.execution: str | None = None
        self.deadline: str | None = None  # of the approval waited on now

    def header(self, text: str) -> None:
        self._line(text)

    def waiting(self, state: str | None, since: datetime) -> None:
        """A long wait: what is being waited for, and since when; for an approval, who answers and how."""
        if state in KIND_OF_APPROVAL_STATE:
            self._line(f"    still waiting for an answer to the {KIND_OF_APPROVAL_STATE[state]} approval (gpufill approve|reject), "
                       f"since {since:%H:%M:%S %Z}")
            self._ask(state)
            return
        what = {
            "PauseForCapacity": "the next try for capacity (wait_for_capacity)",
            "PauseForServing": "the model servers to answer (ready_timeout; checked once a minute)",
        }.get(state or "", f"{state or 'the next step'} to finish")
        self._line(f"    still waiting for {what}, since {since:%H:%M:%S %Z}")

    def _block_chosen(self, block: dict) -> None:
        offering = block.get("offering")
        if offering:
            self._line(f"    chosen: {offering['instance_count']} x {offering['instance_type']} in {offering['availability_zone']}, "
                       f"{offering['start']} to {offering['end']}, upfront ${offering['upfront_fee']:,.2f} "
                       f"(lowest fee of {block.get('offered')} offering(s))")
        else:
            self._line("    no offering fits")

    def event(self, event: dict) -> None:
        kind = event["type"]
        if kind.endswith("StateEntered"):
            name = _details(event, "stateEnteredEventDetails").get("name")
            self.entered = name
            if name not in QUIET_STATES | REPORTED_ON_EXIT | WAIT_STEPS and name not in ("LaunchBatch", "PrepareRegion", "RollBackGang", "RankFromWarmFacts"):
                self._line(f"  > {name}")
        elif kind == "MapStateStarted":
            length = _details(event, "mapStateStartedEventDetails").get("length")
            if self.entered == "TerminateInstances":
                self._line(f"    terminating in {length} region(s) in parallel")
            elif self.entered == "FindCapacityBlocks":
                self._line(f"    asking {length} region(s) for Capacity Block offerings in parallel")
            else:
                self._line(f"    scoring {length} region(s) in parallel")
        elif kind == "TaskSubmitted" and self.entered in KIND_OF_APPROVAL_STATE:
            payload = (_json_or_empty(_details(event, "taskSubmittedEventDetails").get("output")).get("Payload") or {})
            self.deadline = payload.get("deadline") if isinstance(payload, dict) else None
            if self.entered == "AwaitTeardownApproval":
                self._line("    approval requested on the approval topic; waiting for an answer")
            else:
                self._line("    purchase approval requested on the approval topic; nothing is bought until it is approved")
            self._ask(self.entered)
        elif kind.endswith("StateExited"):
            name = _details(event, "stateExitedEventDetails").get("name")
            if name in REPORTED_ON_EXIT:
                self._teardown_exited(name, _state_output(event))
            elif name in WAIT_STEPS:
                self._wait_exited(name, _state_output(event))
            else:
                self._exited(name, _state_output(event))

    def _ask(self, state: str) -> None:
        """Who is asked, until when, and the exact commands that answer (when the deployment is known)."""
        if self.asking is None or self.execution is None:
            return
        kind = KIND_OF_APPROVAL_STATE[state]
        found = self.asking(f"{kind}:{self.execution}")
        self._line(f"    asked: {found['who']}; until {self.deadline or 'its deadline'} (then it expires: "
                   + ("nothing is bought)" if kind == "purchase" else "nothing is terminated)"))
        self._line(f"    approve: {found['approve']}")
        self._line(f"    reject:  {found['reject']}")

    def _teardown_exited(self, name: str, state: dict) -> None:
        if name == "FindTeardownInstances":
            found = state.get("teardown") or {}
            self._line(
                f"  > FindTeardownInstances  {found.get('instance_count', 0)} to terminate, "
                f"{found.get('refused_count', 0)} left alone"
            )
        elif name in ("RecordApprovalDecision", "RecordApprovalExpiry", "RecordPurchaseDecision", "RecordPurchaseExpiry"):
            a = state.get("approval") or {}
            if a.get("decision") == "expired":
                self._line(f"  > {name}  expired: no answer came before the deadline")
            else:
                self._line(f"  > {name}  {a.get('decision')} by {a.get('approver')}")
        elif name == "TerminateRegionInstances":
            self._line(
                f"  > TerminateRegionInstances  {state.get('region')}: terminated {state.get('terminated_count', 0)}, "
                f"skipped {state.get('skipped_count', 0)}"
            )

    def _wait_exited(self, name: str, state: dict) -> None:
        run = state.get("run") or {}
        wait = run.get("wait") or {}
        move, tries = run.get("next"), wait.get("tries")
        if name == "PlanNextTry" and move == "expired":
            self._line(f"  > PlanNextTry    try {tries} came up short; the deadline {wait.get('deadline')} has passed")
        elif name == "PlanNextTry":
            then = "; then continues as a new execution" if move == "handover" else ""
            # all_or_nothing hands a short try back before waiting: "0 launched" alone would hide that.
            handed_back = (run.get("gang") or {}).get("rolled_back")
            held = (f"{handed_back} handed back so far, {run.get('launched', 0)} held" if handed_back
                    else f"{run.get('launched', 0)} launched so far")
            self._line(
                f"  > PlanNextTry    try {tries} came up short ({held}); "
                f"waiting {wait.get('delay_seconds')} s until {wait.get('next_try_at')} (deadline {wait.get('deadline')}){then}"
            )
        elif move == "stopped":
            self._line("  > StartNextTry   a teardown of this request was asked: the wait ends, nothing more is launched")
        elif move == "handover":
            self._line(f"  > StartNextTry   try {tries} goes on in execution {wait.get('successor')}")
        elif move == "rank":
            self._line(f"  > StartNextTry   try {tries}: ranking again by the facts it read, pools found full moments ago left out")
        else:
            self._line(f"  > StartNextTry   try {tries}: scoring and ranking again")

    def _plan_ranked(self, plan: dict, how: str = "", lead: str = "    ") -> None:
        self.plan = plan
        pools = plan.get("pools")
        count = len(pools) if isinstance(pools, list) else (pools or 0)
        self._line(f"{lead}{count} {plan.get('market')} pool(s) ranked{how}")

    def _exited(self, name: str | None, state: dict) -> None:
        run = state.get("run") or {}
        if name == "RankFromWarmFacts":  # one line on exit, as PrepareRegion's
            warm = state.get("warm") or {}
            if warm.get("warm") is True:
                self._plan_ranked(warm.get("plan") or {}, " from warm facts", "  > RankFromWarmFacts  ")
                launch = (warm.get("run") or {}).get("launch") or {}
                if (warm.get("run") or {}).get("next") == "launch" and launch:
                    self._line(f"    {launch['region']}: image {launch['image_id']}, root volume {launch['root_volume_gib']} GiB, "
                               f"{len(launch.get('subnets') or {})} subnet(s), from warm launch settings")
            else:
                asked = (state.get("request") or {}).get("facts") == "fresh"
                self._line("  > RankFromWarmFacts  " + ("fresh facts asked" if asked else "facts not warm") + ": scoring every region")
        elif name in ("RankPools", "RankKnownPools", "RankOnDemandPools"):
            self._plan_ranked(state.get("plan") or {})
        elif name == "ChooseCapacityBlock":
            self._block_chosen(state.get("block") or {})
        elif name == "TryBlockAgain":
            retry = (state.get("block") or {}).get("retry") or {}
            if retry.get("next") == "retry":
                self._line(f"    the block took {run.get('launched', 0)} of the count after {retry.get('tries')} launch(es): "
                           f"trying again in {retry.get('delay_seconds')} s")
            else:
                self._line(f"    the block is no longer usable after {retry.get('tries')} launch(es)")
        elif name in ("PurchaseCapacityBlock", "CheckBlockPayment"):
            held = (state.get("block") or {}).get("reservation") or {}
            paid = {"pending": " (payment pending)", "failed": " (payment failed)"}.get(held.get("payment"), "")
            self._line(f"    holding {held.get('capacity_reservation_id')} in {held.get('availability_zone')} "
                       f"from {held.get('start')} to {held.get('end')}{paid}")
        elif (name == "LaunchBatch" and (state.get("request") or {}).get("launch_mode") == "fleet" and step_attempts(run)
              and not run.get("capacity_block")):  # a Capacity Block is launched into with RunInstances
            # One CreateFleet over the region: what it asked for, then EC2's answer for each pool it used.
            attempts = step_attempts(run)
            got = sum(a["launched"] for a in attempts)
            self._line(f"  > {name:<14} CreateFleet in {attempts[0]['region']} for {attempts[0]['batch']}: launched {got}")
            for a in attempts:
                answer = f"launched {a['launched']}" if a["outcome"] == "launched" else f"{a['outcome']} ({a.get('reason')})"
                self._line(f"      {pool_label(a, run_blocks(run))}  -> {answer}")
        elif name in ("LaunchBatch", "PrepareRegion"):
            # One line per launch call the step made; PrepareRegion also says what it fixed.
            for a in step_attempts(run):
                answer = f"launched {a['launched']}" if a["outcome"] == "launched" else f"{a['outcome']} ({a.get('reason')})"
                self._line(f"  > {name:<14} {pool_label(a, run_blocks(run))}  batch {a['batch']:>3} -> {answer}")
            launch = run.get("launch") or {}
            if name == "PrepareRegion" and run.get("next") == "launch" and launch:
                self._line(
                    f"  > PrepareRegion  {launch['region']}: image {launch['image_id']}, "
                    f"root volume {launch['root_volume_gib']} GiB, {len(launch.get('subnets', {}))} subnet(s)"
                )
            elif name == "PrepareRegion" and run.get("next") == "exhausted":
                self._line("  > PrepareRegion  no pool left in this market")
        elif name == "RollBackGang":
            self._line(f"  > RollBackGang   {rollback_line(run, self.rolled_back)}")
            self.rolled_back = (run.get("gang") or {}).get("rolled_back", 0)
        elif name == "CheckServing":
            self._serving(run)

    def _serving(self, run: dict) -> None:
        instances = run.get("instances") or []
        if run.get("next") == "wait":
            steps = Counter(i.get("startup_step") or "no step reported yet" for i in instances)
            seen = ", ".join(f"{n} {step}" for step, n in steps.items())
            if seen != self.serving_seen:
                self.serving_seen = seen
                self._line(f"  > CheckServing   check {run.get('ready_rounds')}: {seen}")
            return
        serving = sum(1 for i in instances if i.get("serving"))
        self._line(f"  > CheckServing   {serving} of {len(instances)} model server(s) serving after {run.get('ready_rounds')} check(s)")

    def _line(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    rolled_back = 0  # instances rolled back by the RollBackGang steps shown so far


def rollback_line(run: dict, before: int) -> str:
    """What one RollBackGang step ended, and where the gang goes next."""
    gang = run.get("gang") or {}
    ended = gang.get("rolled_back", 0) - before
    where = (gang.get("excluded") or ["?"])[-1].split(":", 1)[-1] if run.get("next") != "not_placed" else None
    what = f"terminated {ended} instance(s) of this run" if ended else "nothing to terminate"
    if run.get("next") == "await_capacity":
        return f"{what}; this try could not complete, nothing is held while the run waits for capacity"
    if where is None:
        return f"{what}; no place is left for the whole gang"
    return f"{what}; the gang could not complete in {where}, trying elsewhere"


def plans_from(history: list[dict]) -> list[dict]:
    plans = []
    for event in history:
        if event["type"] == "TaskStateExited":
            name = _details(event, "stateExitedEventDetails").get("name")
            if name in ("RankPools", "RankKnownPools", "RankOnDemandPools"):
                plans.append(_state_output(event).get("plan") or {})
            elif name == "RankFromWarmFacts" and (_state_output(event).get("warm") or {}).get("warm") is True:
                plans.append(_state_output(event)["warm"].get("plan") or {})
    return plans


def tries_waited(history: list[dict]) -> int | None:
    """wait_for_capacity: the number of the try that ended the run (None if it never waited)."""
    tries = None
    for event in history:
        if event["type"] == "TaskStateExited" and _details(event, "stateExitedEventDetails").get("name") == "StartNextTry":
            tries = ((_state_output(event).get("run") or {}).get("wait") or {}).get("tries", tries)
    return tries


def render_regions(plan: dict) -> list[str]:
    lines = [f"Ranked regions ({plan.get('market')} market, {plan.get('scoring', 'classic')} scoring)"]
    lines.append(f"  {'rank':<4} {'score':>5}  {'region':<15} {'type':<13} {'spot $/h':>8}  {'AZs':>3}  {'tier':>4}  points")
    for s in plan.get("regions", []):
        if s.get("dropped"):
            lines.append(f"  {'-':<4} {'-':>5}  {s['region']:<15} {s['instance_type']:<13} dropped: {s['dropped']}")
            continue
        points = " + ".join(f"{name} {value}" for name, value in s.get("points", {}).items())
        tier = "?" if s.get("advisor_tier") is None else s["advisor_tier"]
        lines.append(
            f"  {s['rank']:<4} {s['score']:>5}  {s['region']:<15} {s['instance_type']:<13} {s['spot_price']:>8.4f}  "
            f"{s['az_count']:>3}  {tier:>4}  {points}"
        )
    return lines


def render_attempts(attempts: list[dict], blocks: frozenset[str] = frozenset()) -> list[str]:
    lines = ["Attempts", f"  {'#':>3}  {'market':<9} {'zone':<16} {'type':<13} {'batch':>5} {'got':>4}  outcome"]
    for n, a in enumerate(attempts, 1):
        reason = f" ({a['reason']})" if a.get("reason") else ""
        lines.append(
            f"  {n:>3}  {market_label(a, blocks):<9} {a['availability_zone']:<16} {a['instance_type']:<13} "
            f"{a['batch']:>5} {a['launched']:>4}  {a['outcome']}{reason}"
        )
    return lines


def pool_tried(p: dict) -> str:
    """One pool of a cause (what it launched or why not), or a group of them when the cause ran long."""
    if "pool" not in p:
        return f"{p['pools']} ({p['zones_tried']} AZs)"
    return f"{p['pool']} ({'launched ' + str(p['launched']) if p.get('launched') else p['outcome']})"


def render_summary(execution: Any) -> str:
    lines: list[str] = [""]
    plans = plans_from(execution.history)
    if plans:
        lines += render_regions(plans[0]) + [""]
    result = execution.output if execution.status == "SUCCEEDED" else None
    cause = execution.cause if isinstance(execution.cause, dict) else {}
    attempts = (result or {}).get("attempts") or cause.get("attempts")
    blocks = run_blocks(result) | run_blocks(cause)
    if isinstance(attempts, list) and attempts:
        lines += render_attempts(attempts, blocks) + [""]
    if result and result.get("action") == "teardown":
        lines += render_teardown(result, getattr(execution, "notifications", None) or [])
    elif result and result.get("action") == "status":
        lines += render_status(result)
    elif result and result.get("status") == "CONTINUED":
        lines.append(
            f"CONTINUED as {result['continued_as']}: {result['launched']} of {result['requested']} launched so far, "
            f"{result['tries']} tries, waiting until {result['deadline']}"
        )
    elif result and result.get("status") == "WAIT_ENDED":
        lines.append(f"WAIT_ENDED: {result['reason']}; {result['launched']} of {result['requested']} launched, after {result['tries']} tries")
    elif result and result.get("status") == "REFILL_STOPPED":
        lines.append(f"REFILL_STOPPED: {result['reason']}")
    elif result and result.get("status") == "PLANNED":
        lines.append(f"Plan: {len(result.get('pools', []))} pool(s) in order; nothing launched.")
    elif result:
        if result.get("refill"):
            refill = result["refill"]
            lines.append(
                f"Refill of request {refill['request_id']}: replaces {', '.join(refill['replaces'])} "
                f"(reclaimed from {refill.get('reclaimed_pool') or 'an unknown pool'}, tried last)"
            )
        lines.append("Instances")
        for i in result.get("instances", []):
            price = f"${i['hourly_price']:.4f}/h" if i.get("hourly_price") is not None else "price unknown"
            if block_of(i, blocks):  # paid upfront with its block: the fee is shown once, on the block's line
                price = f"in {block_of(i, blocks)}"
            lines.append(
                f"  {i['instance_id']}  {i['availability_zone']:<16} {i['instance_type']:<13} {market_label(i, blocks):<9} {price}"
                + serving_note(i)
            )
        for i in result.get("lost", []):
            lines.append(f"  {i['instance_id']}  {i['availability_zone']:<16} lost before it ran ({i.get('state')})")
        # The example is a server that answers when the run checked (ready_timeout).
        reachable = sorted((i for i in result.get("instances", []) if i.get("connect")), key=lambda i: i.get("serving") is False)
        if reachable:
            lines.append(f"Reach the model server (port 8000) through SSM, e.g. {reachable[0]['instance_id']}:")
            lines.append(f"  {reachable[0]['connect']}")
        lines.append("")
        waited = tries_waited(execution.history)
        if waited:
            lines.append(f"Waited for capacity: filled at try {waited}")
        serving = f", {result['instances_serving']} serving" if "instances_serving" in result else ""
        lines.append(
            f"{result['status']}: {result['launched']} of {result['requested']} launched, "
            f"${result['hourly_cost']:.4f}/h in all{serving}"
        )
        if result.get("expires_at"):  # max_lifetime
            lines.append(f"Expires at {result['expires_at']}: its teardown then asks for approval on its own")
        if result.get("capacity_block"):  # a bought block: named at every end, with what was paid
            block = result["capacity_block"]
            fee = f"${block['upfront_fee']:,.2f} paid" if isinstance(block.get("upfront_fee"), int | float) else "paid"
            lines.append(
                f"Capacity Block {block.get('capacity_reservation_id')} in {block.get('availability_zone')}, "
                f"{block.get('start')} to {block.get('end')}: {fee} upfront, not refundable"
            )
    else:
        lines.append(f"FAILED with {execution.error}")
        if cause:
            lines.append(f"  {cause.get('message', '')}")
            for field in cause.get("fields", []):
                lines.append(f"  - {field['field']}: {field['problem']}")
            if execution.error == PURCHASE_FAILED and cause.get("capacity_block"):
                b = cause["capacity_block"]
                lines.append(f"  block: {b['capacity_reservation_id']} in {b['availability_zone']}, {b['start']} to {b['end']}, "
                             f"${b['upfront_fee']:,.2f}, payment failed")
            if execution.error == NO_CAPACITY_BLOCK:
                lines += render_offerings(cause)
            if execution.error == "CAPACITY_WAIT_EXPIRED" and cause.get("instances"):
                lines.append(f"  kept ({len(cause['instances'])} running):")
                lines += [f"    {i['instance_id']}  {i['pool']}" for i in cause["instances"]]
            if cause.get("pools_tried"):
                tried = ", ".join(
                    pool_tried(p) for p in cause["pools_tried"] if isinstance(p, dict)
                )
                lines.append(f"  pools tried: {tried}")
            if "rolled_back_count" in cause:
                lines.append(f"  rolled back: {cause['rolled_back_count']} instance(s), nothing left running")
            if cause.get("hint"):
                lines.append(f"  hint: {cause['hint']}")
        elif execution.cause:
            lines.append(f"  {execution.cause}")
    m = getattr(execution, "metrics", None)
    if m:  # the local engine counts what a run cost; on AWS, CloudWatch does
        lines.append(
            f"Metrics: {m['state_transitions']} state transitions, {m['lambda_invocations']} Lambda invocations, "
            f"EC2 calls {json.dumps(m['ec2_calls'])}, modelled time {m['modelled_seconds']:.1f} s"
        )
    return "\n".join(lines)


NO_CAPACITY_BLOCK = "NO_CAPACITY_BLOCK"
OFFERINGS_SHOWN = 10  # a NO_CAPACITY_BLOCK cause's offerings in text; --json has every one the cause lists


def render_offerings(cause: dict) -> list[str]:
    """NO_CAPACITY_BLOCK's offerings, each with why it was refused, and the regions that did not answer
    (whose offerings nobody saw)."""
    offered = [o for o in cause.get("offered") or [] if isinstance(o, dict)]
    lines = []
    for o in offered[:OFFERINGS_SHOWN]:
        fee = f"${o['upfront_fee']:,.2f}" if isinstance(o.get("upfront_fee"), int | float) else "fee unknown"
        lines.append(
            f"  - {fee:>11}  {o.get('instance_count', '?')} x {o.get('instance_type', '?')} in {o.get('availability_zone', '?')}, "
            f"{o.get('start', '?')} to {o.get('end', '?')}: {o.get('why_not') or 'not picked'}"
        )
    more = len(offered) - len(lines) + int(cause.get("offered_not_listed") or 0)
    if more > 0:
        lines.append(f"  ... and {more} more (see --json)")
    silent = cause.get("regions_not_answering") or {}
    if isinstance(silent, dict) and silent:
        lines.append("  regions that did not answer (their offerings are not counted): "
                     + "; ".join(f"{region} ({error})" for region, error in sorted(silent.items())))
    return lines


def serving_note(instance: dict) -> str:
    """ready_timeout's verdict on one instance, after its price; nothing when it was not checked."""
    if instance.get("serving") is None:
        return ""
    return "  serving" if instance["serving"] else f"  not serving: {instance.get('serving_reason')}"


def render_reclaims(reclaims: list[dict]) -> list[str]:
    """What EC2 took away while modelled time passed (the market's `interruptions`)."""
    lines = []
    for r in reclaims:
        if r.get("instance_id"):
            lines.append(f"  t={r['at_seconds']:.0f} s  EC2 reclaims instance {r['instance']} ({r['instance_id']}, "
                         f"{r['market']} in {r['region']}): {r['note']}")
        else:
            lines.append(f"  t={r['at_seconds']:.0f} s  instance {r['instance']}: {r['note']}")
    return lines or ["  nothing was reclaimed"]


def _price(value: Any) -> str:
    return f"${value:.4f}/h" if isinstance(value, (int, float)) else "price unknown"


def render_teardown(result: dict, notifications: list[dict]) -> list[str]:
    target = result.get("target") or {}
    if target.get("all"):
        what = "every live instance of this deployment"
    elif target.get("request_id"):
        what = f"request {target['request_id']}"
    else:
        what = f"{len(target.get('instance_ids') or [])} instance id(s)"
    lines = [f"Teardown {result['request_id']} of {what}"]
    for i in result.get("instances", []):
        lines.append(
            f"  {i['instance_id']}  {i['region']:<15} {i.get('availability_zone') or '-':<16} "
            f"{i.get('instance_type') or '-':<13} {i.get('market') or '-':<9} {i['state']:<8} {_price(i.get('hourly_price'))}"
        )
    if result.get("note"):
        lines.append(f"Note: {result['note']}")
    if result.get("refused"):
        lines += ["Left alone (never terminated by this teardown)"]
        lines += [f"  {r['instance_id']}  {r['reason']}: {r['detail']}" for r in result["refused"]]
    for note in notifications:
        lines += ["", f"Published to the approval topic: {note['subject']}"]
        lines += [f"  | {line}" for line in note["message"].splitlines()]
    approval = result.get("approval")
    if approval:
        why = f" ({approval['reason']})" if approval.get("reason") else ""
        if approval["decision"] == "expired":
            lines += ["", f"Decision: expired at {approval['decided_at']}: no answer came before the deadline"]
        else:
            lines += ["", f"Decision: {approval['decision']} by {approval['approver']} at {approval['decided_at']}{why}"]
    for region in result.get("terminated", []):
        ended = ", ".join(region.get("terminated", [])) or "none"
        lines.append(f"  terminated in {region['region']}: {ended}")
        lines += [f"    skipped {r['instance_id']}: {r['reason']}: {r['detail']}" for r in region.get("skipped", [])]
    count = sum(r.get("terminated_count", 0) for r in result.get("terminated", []))
    lines.append("")
    waiting = [r for r in result.get("refused") or [] if r.get("reason") == "awaiting-approval"]
    if result["status"] == "NOTHING_TO_TERMINATE" and waiting:
        lines.append(f"NOTHING_TO_TERMINATE: refused, {len(waiting)} instance(s) already wait in another teardown's "
                     "approval (one question per instance); answer that one:")
        lines += [f"  {detail}" for detail in dict.fromkeys(r["detail"] for r in waiting)]  # one line per teardown
        return lines
    lines.append(
        {
            "TERMINATED": f"TERMINATED: {count} instance(s) terminated, ${result.get('hourly_cost', 0):.4f}/h no longer spent",
            "REJECTED": f"REJECTED: nothing terminated; {result.get('instance_count', 0)} instance(s) keep running",
            "EXPIRED": "EXPIRED: nobody answered before the approval timeout; nothing terminated",
            "NOTHING_TO_TERMINATE": "NOTHING_TO_TERMINATE: no instance matched; no approval was asked for",
        }.get(result["status"], result["status"])
    )
    return lines


def render_status(result: dict) -> list[str]:
    # Request ids in full, however long: a person pastes them into teardown and approve.
    wide = _id_width(i.get("request_id") or "-" for i in result.get("instances", []))
    lines = [
        f"Managed instances ({'request ' + result['filter']['request_id'] if (result.get('filter') or {}).get('request_id') else 'every request'}; "
        f"regions {', '.join(result.get('regions', []))})",
        f"  {'instance':<19}  {'request':<{wide}} {'zone':<16} {'type':<13} {'market':<9} {'state':<13} {'$/h':>8} {'hours':>6}  finding",
    ]
    # ready_timeout: where startup.sh got to on each instance, after its finding.
    blocks: dict[str, list] = {}  # a Capacity Block's instances: its fee is shown once, below the rows
    for i in result.get("instances", []):
        price = f"{i['hourly_price']:.4f}" if isinstance(i.get("hourly_price"), (int, float)) else "?"
        if block_of(i):
            price = "block"
            blocks.setdefault(block_of(i), []).append(i)
        hours = f"{i['hours_running']:.2f}" if isinstance(i.get("hours_running"), (int, float)) else "-"
        lines.append(
            f"  {i['instance_id']:<19}  {i.get('request_id') or '-':<{wide}} {i.get('availability_zone') or i['region']:<16} "
            f"{i.get('instance_type') or '-':<13} {market_label(i):<9} {i['state']:<13} {price:>8} {hours:>6}  {i['finding']}"
            + (f"  startup: {i['startup_step']}" if i.get("startup_step") else "")
            + (f"  expires: {i['expires_at']}" if i.get("expires_at") else "")  # max_lifetime
        )
    for block, held in blocks.items():
        lines.append(f"  Capacity Block {block}: ${held[0]['capacity_block_fee']:,.2f} paid upfront for its "
                     f"{len(held)} instance(s) shown (non-refundable; $/h 0 while it lasts)")
    counts = ", ".join(f"{n} {state}" for state, n in (result.get("counts") or {}).items()) or "none"
    if result.get("waiting"):
        lines += ["", f"Waiting: {result['waiting']}"]
    lines += [
        "",
        f"Counts: {counts}",
        f"Running: {result.get('running', 0)} instance(s), ${result.get('hourly_cost', 0):.4f}/h",
    ]
    if result.get("note"):
        lines.append(f"Note: {result['note']}")
    if result.get("reconciled"):
        lines.append(f"Reconciled (found in EC2 without a record, recorded now): {', '.join(result['reconciled'])}")
    if result.get("unrecorded"):
        lines.append(f"Unrecorded (tagged for this deployment, no request-id tag): {', '.join(result['unrecorded'])}")
    if result.get("gone"):
        lines.append(f"Gone (recorded, no longer in EC2): {', '.join(result['gone'])}")
    replaced = [i for i in result.get("instances", []) if i.get("replaced_by")]
    if replaced:
        pairs = "; ".join(f"{i['instance_id']} -> {', '.join(i['replaced_by'])}" for i in replaced)
        lines.append(f"Replaced (EC2 reclaimed them; maintain refilled): {pairs}")
    return lines


def render_plan_preview(request: dict, preview: Any) -> list[str]:
    """The plan `run` and `up` show before asking: what is bought, where first, what it costs."""
    from gpufill import catalog

    types = list(request.get("instance_types") or [request.get("instance_type") or "g6.xlarge"])
    carried = []
    for t in types:
        gpus, model = catalog.gpus(t), catalog.gpu_model(t)
        no_pool = "" if t in preview.types or preview.market == "capacity-block" else ", no pool in the plan"
        carried.append(f"{t} ({gpus} {model}{no_pool})" if gpus and model else t)
    lines = [
        "",
        f"Plan: {preview.count} instance(s), {preview.market} market, {request.get('launch_mode', 'fleet')} fill",
        f"  types in preference order: {', '.join(carried)}",
        f"  regions in rank order: {', '.join(preview.regions) or 'none'}",
        f"  pools in the order they are tried ({len(preview.pools)}):",
    ]
    for n, p in enumerate(preview.pools[:PREVIEW_POOLS], 1):
        lines.append(
            f"    {n:>2}  {p.get('availability_zone') or p['region']:<16} {p['instance_type']:<13} "
            f"{p.get('market', preview.market):<9} {_price(p.get('price'))}"
        )
    if len(preview.pools) > PREVIEW_POOLS:
        lines.append(f"    ... and {len(preview.pools) - PREVIEW_POOLS} more")
    if preview.expected_hourly is not None:
        lines.append(
            f"  expected: ${preview.expected_hourly:.4f}/h for {preview.count} instance(s) if the first pool has room; "
            f"up to ${preview.highest_hourly:.4f}/h"
        )
    elif not preview.capacity_block:
        lines.append("  expected: price unknown (the plan returned no priced pool)")
    lines.append(f"  if spot runs out: {preview.if_spot_runs_out}")
    if preview.capacity_block:
        lines.append(f"  Capacity Block: {preview.capacity_block}")
    return lines


PREVIEW_POOLS = 10
REQUEST_COLUMN = 24  # the request column's least width; a longer id widens it, never is cut


def _id_width(ids) -> int:
    return max([REQUEST_COLUMN, *(len(i) for i in ids)])


def render_requests(result: dict, shown: list[dict], hidden: int) -> list[str]:
    """`gpufill status`: one line per request, what it is paying for now and has paid so far."""
    scope = f"request {result['filter']['request_id']}" if (result.get("filter") or {}).get("request_id") else "every request"
    lines = [f"Requests ({scope}; regions {', '.join(result.get('regions', [])) or 'none'})"]
    if not shown:
        lines.append("  none holds an instance" + (f" ({hidden} ended, shown with --all)" if hidden else ""))
    else:
        wide = _id_width(r["request_id"] for r in shown)
        lines.append(f"  {'request':<{wide}} {'instances':<28} {'$/h now':>9} {'spent so far':>13}  first launch")
        for r in shown:
            counts = ", ".join(f"{n} {state}" for state, n in r["counts"].items()) or "none"
            mark = "~" if r["estimated"] else " "
            unknown = f"  ({r['price_unknown']} without a price)" if r["price_unknown"] else ""
            for block in r.get("capacity_blocks") or []:
                unknown += f"  Capacity Block {block['capacity_reservation_id']}: ${block['upfront_fee']:,.2f} paid upfront (non-refundable)"
            if r.get("teardown_waiting"):
                unknown += f"  teardown waiting for an answer: {r['teardown_waiting']}"
            lines.append(
                f"  {r['request_id']:<{wide}} {counts[:28]:<28} {mark}{r['hourly_cost']:>8.4f} {mark}{r['spent']:>12.4f}  "
                f"{r['first_launch'] or '-'}{unknown}"
            )
        if hidden:
            lines.append(f"  ({hidden} ended request(s) hidden; --all shows them)")
    total_rate = sum(r["hourly_cost"] for r in shown)
    total_spent = sum(r["spent"] for r in shown)
    lines += ["", f"Paying now: {result.get('running', 0)} running instance(s), ${total_rate:.4f}/h; "
                  f"spent so far by the requests shown: ${total_spent:.4f}"]
    if any(r["estimated"] for r in shown):
        lines.append("  ~ : counts an instance without a recorded price at the catalog's on-demand price (the most it costs)")
    if result.get("note"):
        lines.append(f"Note: {result['note']}")
    return lines + _findings(result)


def _findings(result: dict) -> list[str]:
    lines = []
    if result.get("waiting"):
        lines.append(f"Waiting: {result['waiting']}")
    if result.get("reconciled"):
        lines.append(f"Reconciled (found in EC2 without a record, recorded now): {', '.join(result['reconciled'])}")
    if result.get("unrecorded"):
        lines.append(f"Unrecorded (tagged for this deployment, no request-id tag): {', '.join(result['unrecorded'])}")
    if result.get("gone"):
        lines.append(f"Gone (recorded, no longer in EC2): {', '.join(result['gone'])}")
    return lines


def render_sweep(summary: dict | None) -> list[str]:
    """The sweep's last pass (docs/operations.md), under the status view."""
    if not summary:
        return []
    found = ", ".join(f"{n} {kind}" for kind, n in (summary.get("found") or {}).items() if n) or "nothing"
    lines = [
        "",
        f"Sweep: last pass {summary.get('at')}: found {found}; "
        f"{summary.get('running', 0)} running at ${summary.get('hourly_cost', 0):.4f}/h",
    ]
    for finding in summary.get("findings") or []:
        lines.append(f"  {finding['kind']}: {finding['message']}")
        lines.append(f"    {finding['command']}")
    return lines
