"""wait_for_capacity: when to try again, when to give up, when to continue as a new execution,
and what to tell the user (docs/request.md, `wait_for_capacity`).

A run whose market is exhausted short of `count` keeps what it launched (with all_or_nothing it
hands it all back first, policy/gang.py), waits and tries again: a try reuses the regions' facts
while they are younger than WAIT_FACTS_TTL_SECONDS, then reads them again. The waits grow from
the first delay, doubling after each try, up to the cap (by default 60 s, then 2 minutes; the
request's `first_delay`/`max_delay` or the deployment's settings change both),
each shortened by up to a quarter (jitter, so runs that ran dry together do not all come back in
the same second), and never past the deadline. The deadline and the backoff are fixed once, when
the request is accepted, and ride in the run into every continued execution.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timezone
from collections.abc import Mapping
from typing import Literal

from gpufill.constants import (
    CONTINUATION_SUFFIX,
    ENV_WAIT_FIRST_DELAY_SECONDS,
    ENV_WAIT_MAX_DELAY_SECONDS,
    WAIT_FACTS_TTL_SECONDS,
    WAIT_FIRST_DELAY_SECONDS,
    WAIT_HISTORY_BUDGET,
    WAIT_LONGEST_DELAY_SECONDS,
    WAIT_MAX_DELAY_SECONDS,
    WAIT_MIN_DELAY_SECONDS,
)
from gpufill.models.request import ResolvedRequest
from gpufill.models.run import Attempt, Run, Waiting
from gpufill.policy.block_use import ENDED_PHASE, TRYING_PHASE, ended_line, trying_line

# The share of a delay that jitter may take off: a delay lies in [3/4, 1] of its nominal value.
JITTER_SHARE = 0.25
# History events of one try, measured on the local engine (docs/state-machine.md): the wait
# loop's own states (WhatAfterThisMarket, PlanNextTry, ShouldWaitAgain, PauseForCapacity, StartNextTry,
# WhereToTryAgain), the ScoreRegions Map's frame and RankPools come to 29; each region adds 7 to score
# (a Map iteration) and at most 7 per market to prepare (PrepareRegion and WhereNext); each
# LaunchBatch step adds 7 and makes at least one attempt; spot-then-on-demand's second market
# adds RankOnDemandPools and another WhatAfterThisMarket (16 with headroom). So a try with R regions,
# M markets and A attempts has at most 29 + 16 (M - 1) + (7 + 7 M) R + 7 A events, before task
# retries (3 each), which WAIT_HISTORY_BUDGET leaves room for.
EVENTS_PER_TRY = 29
EVENTS_PER_MARKET = 16
EVENTS_TO_SCORE_A_REGION = 7
EVENTS_TO_PREPARE_A_REGION = 7
EVENTS_PER_ATTEMPT = 7
# Before the first try: the execution's start, ValidateRequest and WhichAction.
EVENTS_AT_START = 12
# Step Functions caps an execution name at 80 characters.
MAX_EXECUTION_NAME = 80
# A Fail state's cause is capped at 32,768 characters; keep headroom for the JSON framing.
CAUSE_BUDGET = 30_000


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class BadBackoffSetting(ValueError):
    """A deployment's backoff setting gpufill cannot use; the message names the variable."""


def deployment_backoff(environ: Mapping[str, str]) -> tuple[int, int]:
    """The deployment's first delay and cap (its function environment), else 60 s and 2 minutes."""
    found = []
    for name, default in ((ENV_WAIT_FIRST_DELAY_SECONDS, WAIT_FIRST_DELAY_SECONDS), (ENV_WAIT_MAX_DELAY_SECONDS, WAIT_MAX_DELAY_SECONDS)):
        text = (environ.get(name) or "").strip()
        if not text:
            found.append(default)
            continue
        if not text.isdigit() or not WAIT_MIN_DELAY_SECONDS <= int(text) <= WAIT_LONGEST_DELAY_SECONDS:
            raise BadBackoffSetting(
                f"{name} is {text!r}: give whole seconds from {WAIT_MIN_DELAY_SECONDS} to {WAIT_LONGEST_DELAY_SECONDS}"
            )
        found.append(int(text))
    return found[0], found[1]


def backoff(first: int | None, cap: int | None, deployment: tuple[int, int]) -> tuple[int, int]:
    """The request's first delay and cap where it set them, else the deployment's. A request that
    sets one alone keeps the pair ordered: a cap below the deployment's first delay is also the
    first delay, a first delay above the deployment's cap is also the cap."""
    if first is None and cap is None:
        first, cap = deployment
    elif first is None:
        first = min(deployment[0], cap)
    elif cap is None:
        cap = max(deployment[1], first)
    return first, max(first, cap)


def begin(seconds: int, now: float, first_delay: int = WAIT_FIRST_DELAY_SECONDS, max_delay: int = WAIT_MAX_DELAY_SECONDS) -> Waiting:
    """The first fill is try 1; the deadline counts from the moment the request was accepted."""
    deadline = now + seconds
    # The first try reads the facts right after the request is accepted: their age counts from then.
    return Waiting(
        deadline=iso(deadline), deadline_epoch=deadline, first_delay_seconds=first_delay, max_delay_seconds=max_delay,
        facts_read_at=now,
    )


def nominal_delay(tries: int, first: int = WAIT_FIRST_DELAY_SECONDS, cap: int = WAIT_MAX_DELAY_SECONDS) -> int:
    """The wait after `tries` tries: `first` after the first, doubling, at most `cap`."""
    doublings = min(max(tries, 1) - 1, 32)  # 10 s * 2**32 is past any cap already; bound the power
    return min(cap, first * 2**doublings)


def jitter(request_id: str, tries: int) -> float:
    """A number in [0, 1) fixed by the request and the try, so a retried step waits the same."""
    digest = hashlib.sha256(f"{request_id}#{tries}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def delay(tries: int, spread: float, first: int = WAIT_FIRST_DELAY_SECONDS, cap: int = WAIT_MAX_DELAY_SECONDS) -> int:
    """The nominal delay shortened by up to JITTER_SHARE of it (`spread` in [0, 1))."""
    nominal = nominal_delay(tries, first, cap)
    return nominal - math.floor(nominal * JITTER_SHARE * spread)


def try_events(regions: int, attempts: int, markets: int = 1) -> int:
    """A bound on the history events of one try over `regions` regions and `markets` markets
    making `attempts` launch calls."""
    return (
        EVENTS_PER_TRY
        + EVENTS_PER_MARKET * (markets - 1)
        + (EVENTS_TO_SCORE_A_REGION + EVENTS_TO_PREPARE_A_REGION * markets) * regions
        + EVENTS_PER_ATTEMPT * attempts
    )


def deadline_reached(wait: Waiting, now: float) -> bool:
    return now >= wait.deadline_epoch


def is_successor_name(execution_name: str) -> bool:
    """A name of the form `<request>-c<n>`: kept for continued executions, so no other run may take one."""
    stem, suffix, number = execution_name.rpartition(CONTINUATION_SUFFIX)
    return bool(stem and suffix and number.isdigit() and number.isascii())


def successor_name(request_id: str, generation: int) -> str:
    """`<request>-c<n>`, with the request part shortened so the name fits in 80 characters."""
    suffix = f"{CONTINUATION_SUFFIX}{generation}"
    return request_id[: MAX_EXECUTION_NAME - len(suffix)] + suffix


def next_try(
    wait: Waiting,
    *,
    now: float,
    spread: float,
    tries_per_execution: int,
    regions: int,
    attempts_total: int,
    markets: int = 1,
) -> tuple[str, Waiting]:
    """After a try that ended short: "expired", or "retry"/"handover" with the wait before the next try.

    A scheduled try never lies past the deadline: the last wait is cut to end on it. "handover"
    means this execution has made its share of tries, or another try like this one could take
    its history past WAIT_HISTORY_BUDGET: after the wait it continues as a new execution.
    """
    if deadline_reached(wait, now):
        return "expired", wait
    this_try = try_events(regions, attempts_total - wait.attempts_before, markets)
    events = (wait.events_here or EVENTS_AT_START) + this_try
    seconds = min(
        delay(wait.tries, spread, wait.first_delay_seconds, wait.max_delay_seconds), math.floor(wait.deadline_epoch - now)
    )
    scheduled = wait.model_copy(
        update={"delay_seconds": seconds, "next_try_at": iso(now + seconds), "events_here": events}
    )
    if wait.tries_here >= tries_per_execution or events + this_try > WAIT_HISTORY_BUDGET:
        return "handover", scheduled
    return "retry", scheduled


# The key of a continued execution's input that holds the request and the run handed over.
CONTINUATION = "gpufill_continuation"
HandOver = Literal["continued", "not_started", "name_taken"]
# What a run that could not hand over ends with (failed_with in PROVISIONING_FAILED's cause).
HANDOVER_ERRORS = {"not_started": "ContinuationNotStarted", "name_taken": "ContinuationNameTaken"}


def handover(sent: dict, successor_input: object, *, exists: bool) -> HandOver:
    """Whether the successor runs this request. `sent` is the request and run ContinueAsNew sent,
    `successor_input` the input of the execution holding the successor's name. Step Functions
    answers a repeated StartExecution with the same name and input as a success while the first
    runs, and ExecutionAlreadyExists once it ended: the same input is this run's own start.
    Another input is someone else's execution of that name, which never carries this request."""
    if not exists:
        return "not_started"
    if isinstance(successor_input, dict) and successor_input.get(CONTINUATION) == sent:
        return "continued"
    return "name_taken"


def handover_failure(outcome: HandOver, successor: str, failure: dict | None, started: str | None = None) -> dict:
    """The failure a run that could not hand over reports ({"Error", "Cause"} as Step Functions'
    own), saying why in words."""
    said = (failure or {}).get("Error") or "no answer"
    if outcome == "name_taken":
        cause = (
            f"The wait could not continue: the execution name {successor} is held by another execution"
            f"{f' (started {started})' if started else ''} that does not carry this request, so no execution "
            "goes on with it. Start the request again under another name to keep waiting."
        )
    else:
        cause = (
            f"The wait could not continue: starting {successor} failed ({said}) and no execution of that "
            "name exists, so nothing goes on with the request."
        )
    return {"Error": HANDOVER_ERRORS[outcome], "Cause": cause}


def facts_due(facts_age: float | None, ttl: int = WAIT_FACTS_TTL_SECONDS) -> bool:
    """Whether the next try reads the regions' facts again: when they are `ttl` seconds old or more,
    or their age is unknown (a run carried from before the age was kept)."""
    return facts_age is None or facts_age >= ttl


def next_try_route(wait: Waiting, *, now: float, handover: bool, ttl: int = WAIT_FACTS_TTL_SECONDS) -> tuple[str, Waiting]:
    """Where the try after a wait starts: "rank" reuses the facts the run holds (no scoring calls),
    "prepare" scores every region again, "handover" continues as a new execution (which scores on
    its start). A try that reads the facts again records when."""
    age = None if wait.facts_read_at is None else now - wait.facts_read_at
    if handover:
        return "handover", wait.model_copy(update={"facts_read_at": now})
    if facts_due(age, ttl):
        return "prepare", wait.model_copy(update={"facts_read_at": now})
    return "rank", wait


def begin_try(wait: Waiting, *, handover: bool, attempts_total: int) -> Waiting:
    """The try after a wait: counted across the chain, and from 1 again in a new execution."""
    if handover:
        return wait.model_copy(
            update={
                "tries": wait.tries + 1, "tries_here": 1, "generation": wait.generation + 1, "next_try_at": None,
                "attempts_before": attempts_total, "events_here": EVENTS_AT_START,
            }
        )
    return wait.model_copy(
        update={
            "tries": wait.tries + 1, "tries_here": wait.tries_here + 1, "next_try_at": None,
            "attempts_before": attempts_total,
        }
    )


# The phases of a request whose block was bought and paid for (not while the payment is pending,
# nor after it failed): its fee is spent, whether or not anything runs in it.
BLOCK_PHASES = frozenset({"capacity-block", "capacity-block-in-use", "capacity-block-stopped", TRYING_PHASE, ENDED_PHASE})


def block_held(request_id: str, view: dict | None) -> dict | None:
    """The Capacity Block a request's wait item says it bought, with its fee; None without one."""
    if not view or view.get("phase") not in BLOCK_PHASES or view.get("upfront_fee") is None:
        return None
    return {"request_id": request_id, "capacity_reservation_id": view.get("capacity_reservation_id"),
            "upfront_fee": float(view["upfront_fee"])}


def _paid(view: dict) -> str:
    fee = view.get("upfront_fee")
    return "" if fee is None else f", paid ${float(fee):,.2f} upfront"


def view_line(view: dict | None) -> str | None:
    """The status view's line for a request's wait item (run_store.save_wait), whatever its phase."""
    if not view:
        return None
    tries = int(view.get("tries", 1))
    counted = f"{tries} {'try' if tries == 1 else 'tries'} so far"
    phase, deadline = view.get("phase"), view.get("deadline")
    if phase == "waiting":
        return f"waiting for capacity until {deadline}; next try at {view.get('next_try_at')}; {counted}"
    if phase == "trying":
        return f"waiting for capacity until {deadline}; try {tries} under way in {view.get('execution')}; {counted}"
    if phase == "stopped":
        return f"the wait for capacity was ended by teardown {view.get('stopped_by')} after {tries} {'try' if tries == 1 else 'tries'}"
    if phase == "expired":
        return f"the wait for capacity expired at {deadline} after {tries} {'try' if tries == 1 else 'tries'} (CAPACITY_WAIT_EXPIRED)"
    if phase == "ended":
        return f"the wait for capacity ended: try {tries} filled the request"
    if phase == "capacity-block":  # a Capacity Block bought: the run waits for its start (docs/capacity-blocks.md)
        return (
            f"holds Capacity Block {view.get('capacity_reservation_id')} ({view.get('instance_count')} x "
            f"{view.get('instance_type')} in {view.get('availability_zone')}) from {view.get('start')} to "
            f"{view.get('end')}{_paid(view)}; {view.get('execution')} launches into it at its start"
        )
    if phase == "capacity-block-payment":  # bought; EC2 still processes the upfront payment
        return (
            f"bought Capacity Block {view.get('capacity_reservation_id')} ({view.get('instance_count')} x "
            f"{view.get('instance_type')} in {view.get('availability_zone')}) from {view.get('start')} to "
            f"{view.get('end')}; its payment is pending, and {view.get('execution')} looks again every minute"
        )
    if phase == "capacity-block-payment-failed":
        return (
            f"the payment for Capacity Block {view.get('capacity_reservation_id')} ({view.get('availability_zone')}, "
            f"from {view.get('start')} to {view.get('end')}) failed: EC2 releases it, nothing was launched into it "
            "(PURCHASE_FAILED)"
        )
    if phase == "capacity-block-stopped":
        return (
            f"the launch into Capacity Block {view.get('capacity_reservation_id')} was stopped by teardown "
            f"{view.get('stopped_by')}: the block ({view.get('availability_zone')}, from {view.get('start')} to "
            f"{view.get('end')}) stays bought and unused until its end"
        )
    if phase == "capacity-block-in-use":
        return (
            f"runs in Capacity Block {view.get('capacity_reservation_id')} ({view.get('availability_zone')}) until "
            f"{view.get('end')}{_paid(view)}; its teardown is asked an hour before, and EC2 ends what still runs 30 minutes before"
        )
    if phase == TRYING_PHASE:
        return trying_line(view)
    if phase == ENDED_PHASE:  # the run that bought a Capacity Block ended without it in use
        return ended_line(view)
    if phase == "failed":
        return (
            f"the wait for capacity ended: {view.get('execution')} failed ({view.get('error')}) after {tries} "
            f"{'try' if tries == 1 else 'tries'}; "
            "its cause names every instance kept"
        )
    return None


def teardown_command(request_id: str) -> dict:
    return {"action": "teardown", "request_id": request_id}


def expired_cause(run: Run, request: ResolvedRequest, attempts: list[Attempt], budget: int = CAUSE_BUDGET) -> str:
    """CAPACITY_WAIT_EXPIRED: every instance kept, the tries, every pool tried, how to end them."""
    wait = run.wait
    assert wait is not None
    pools: dict[str, dict] = {}
    for a in attempts:
        key = f"{a.market}/{a.region}/{a.availability_zone}/{a.instance_type}"
        pools[key] = {"pool": key, "outcome": a.outcome, "reason": a.reason}
    kept = [
        {"instance_id": i.instance_id, "pool": f"{i.market}/{i.region}/{i.availability_zone}/{i.instance_type}"}
        for i in run.instances
    ]
    handed_back = run.gang.rolled_back if request.all_or_nothing and run.gang else 0
    cause = {
        "error": "CAPACITY_WAIT_EXPIRED",
        "message": (
            f"Waited for capacity until {wait.deadline} over {wait.tries} tries; {run.launched} of "
            f"{request.count} launched. "
            + (
                "all_or_nothing: no try could launch the whole count, and each handed back what it launched "
                f"({handed_back} instance(s) terminated, recorded rolled_back); nothing keeps running."
                if request.all_or_nothing
                else "What was launched is kept and still running."
            )
        ),
        "handed_back": handed_back if request.all_or_nothing else None,
        "request_id": request.request_id,
        "requested": request.count,
        "launched": run.launched,
        "deadline": wait.deadline,
        "tries": wait.tries,
        "instances": kept,
        "pools_tried": list(pools.values()),
        "teardown": teardown_command(request.request_id) if kept else None,
        "hint": (
            f"End the kept instances with `gpufill teardown {request.request_id}` (asks for approval), "
            "or keep them and start another run for the rest."
            if kept
            else "Nothing keeps running: each try that could not launch all of them handed back what it launched. "
            "Try more regions or instance types, a longer wait_for_capacity, or leave out all_or_nothing to keep "
            "a partial fleet."
            if request.all_or_nothing
            else "Nothing was launched. Try more regions or instance types, or a longer wait_for_capacity."
        ),
    }
    text = json.dumps({k: v for k, v in cause.items() if v is not None})
    if len(text) > budget:
        # Thousands of pools: one entry per market, region and type, with how many AZs were tried.
        grouped: dict[str, int] = {}
        for key in pools:
            market, region, _, itype = key.split("/")
            grouped[f"{market}/{region}/{itype}"] = grouped.get(f"{market}/{region}/{itype}", 0) + 1
        cause["pools_tried"] = [{"pools": k, "zones_tried": n} for k, n in grouped.items()]
        text = json.dumps({k: v for k, v in cause.items() if v is not None})
    return text
