"""The progress lines of a run while it goes, one per meaningful step, built from its execution
history alone, so `simulate` (local engine), `run --watch`, `watch` and `up` (Step Functions on AWS)
print the same."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import TextIO

from gpufill.cli.execution import event_details, json_object, state_output, step_attempts
from gpufill.cli.render_labels import pool_label, run_blocks


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
            name = event_details(event, "stateEnteredEventDetails").get("name")
            self.entered = name
            if name not in QUIET_STATES | REPORTED_ON_EXIT | WAIT_STEPS and name not in ("LaunchBatch", "PrepareRegion", "RollBackGang", "RankFromWarmFacts"):
                self._line(f"  > {name}")
        elif kind == "MapStateStarted":
            length = event_details(event, "mapStateStartedEventDetails").get("length")
            if self.entered == "TerminateInstances":
                self._line(f"    terminating in {length} region(s) in parallel")
            elif self.entered == "FindCapacityBlocks":
                self._line(f"    asking {length} region(s) for Capacity Block offerings in parallel")
            else:
                self._line(f"    scoring {length} region(s) in parallel")
        elif kind == "TaskSubmitted" and self.entered in KIND_OF_APPROVAL_STATE:
            payload = (json_object(event_details(event, "taskSubmittedEventDetails").get("output")).get("Payload") or {})
            self.deadline = payload.get("deadline") if isinstance(payload, dict) else None
            if self.entered == "AwaitTeardownApproval":
                self._line("    approval requested on the approval topic; waiting for an answer")
            else:
                self._line("    purchase approval requested on the approval topic; nothing is bought until it is approved")
            self._ask(self.entered)
        elif kind.endswith("StateExited"):
            name = event_details(event, "stateExitedEventDetails").get("name")
            if name in REPORTED_ON_EXIT:
                self._teardown_exited(name, state_output(event))
            elif name in WAIT_STEPS:
                self._wait_exited(name, state_output(event))
            else:
                self._exited(name, state_output(event))

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
