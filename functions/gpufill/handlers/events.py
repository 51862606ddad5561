"""Typed events of the state machine's Lambda tasks (what each task's Parameters block sends)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufill.models.request import ResolvedRequest
from gpufill.models.run import MarketName, PlanRef, RegionFacts, Run
from gpufill.models.teardown import RegionBatch, Teardown


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ValidateEvent(_Event):
    request_id: str
    input: Any


class ScoreRegionEvent(_Event):
    request_id: str
    region: str
    instance_types: list[str]
    scoring: str = "blended"


class RankEvent(_Event):
    request: ResolvedRequest
    facts: list[RegionFacts] = Field(default_factory=list)
    market: MarketName | None = None
    # A try after a wait that reuses the facts of an earlier one (RankKnownPools): that try's plan.
    known: PlanRef | None = None
    # RankFromWarmFacts: rank from the deployment's warm facts if they are fresh, and enter the
    # first region from warm launch settings (the run as ValidateRequest left it).
    warm: bool = False
    run: Run | None = None


class LoopEvent(_Event):
    """PrepareRegion, LaunchBatch and WaitUntilRunning: the request, the plan's reference and the run."""

    request: ResolvedRequest
    plan: PlanRef | None = None
    run: Run
    # The state machine's ARN ($$.StateMachine.Id): the deployment part of every ClientToken.
    state_machine: str = ""


class WaitEvent(_Event):
    """PlanNextTry (phase "plan", after a try ended short), StartNextTry (phase "start", after the
    wait) and SettleHandOver (phase "settle", the successor's StartExecution failed)."""

    phase: Literal["plan", "start", "settle"]
    request: ResolvedRequest
    run: Run
    execution: str
    # settle: the state machine, the error StartExecution ended with, and the request and run
    # exactly as ContinueAsNew sent them (compared with the successor's input as they are).
    state_machine: str = ""
    failure: dict[str, Any] | None = None
    carried: dict[str, Any] | None = None


class ReportEvent(_Event):
    """ReportResult: the finished run."""

    request: ResolvedRequest
    run: Run
    status: str


class FailureEvent(_Event):
    """ReportFailure: what the run held when a step failed for good, and the error it failed with."""

    request: ResolvedRequest | None = None
    run: Run | None = None
    failure: dict[str, Any] = {}
    execution: str | None = None


# --- teardown and status ------------------------------------------------------------------


class RequestEvent(_Event):
    """ReportInstanceStatus (and, with its execution, FindTeardownInstances): the validated request."""

    request: ResolvedRequest


class TeardownListingEvent(RequestEvent):
    """FindTeardownInstances: the request and $$.Execution.Id (a listing that asks nobody may
    start held refills again on this execution's state machine)."""

    execution_arn: str


class ApprovalRequestEvent(_Event):
    """AwaitTeardownApproval's payload: the task token to park, and what it is for."""

    task_token: str
    execution_arn: str
    execution_name: str
    entered_at: str
    approval_timeout_seconds: int
    teardown: Teardown


class ApprovalAnswerEvent(_Event):
    """RecordApprovalDecision: the answer sent with the task token, or `expired` when none came."""

    execution_name: str
    # $$.Execution.Id: a rejection starts refills again on this execution's state machine.
    execution_arn: str | None = None
    answer: Any = None
    expired: bool = False
    # What was asked (FindTeardownInstances' answer): whose lifetime to end, what the expiry notice says.
    teardown: Teardown | None = None


class ReminderEvent(_Event):
    """RemindApprovers: sent by the reminders' schedule (policy.lifetime.reminder_input)."""

    execution_name: str
    subject: str
    message: str


class TerminateRegionEvent(_Event):
    teardown_id: str
    batch: RegionBatch


# --- Capacity Blocks for ML (docs/capacity-blocks.md) -------------------------------------


class BlockRegionEvent(_Event):
    """DescribeCapacityBlockOfferings: one candidate region (an item of FindCapacityBlocks)."""

    region: str
    request: ResolvedRequest
    launched: int = 0


class ChooseBlockEvent(_Event):
    request: ResolvedRequest
    found: list[dict]
    launched: int = 0


class PurchaseApprovalEvent(_Event):
    """AwaitPurchaseApproval's payload: the task token to park, and the offering to buy."""

    task_token: str
    execution_arn: str
    execution_name: str
    entered_at: str
    approval_timeout_seconds: int
    request: ResolvedRequest
    block: dict


class PurchaseEvent(_Event):
    request: ResolvedRequest
    block: dict
    run: Run | None = None
    # CheckBlockPayment: look at the bought block's payment again, never buy.
    check: bool = False
    # RecordPurchaseDecision's record: who approved (as AWS authenticated them), when and why.
    approval: dict | None = None


class BlockLaunchEvent(_Event):
    request: ResolvedRequest
    run: Run
    block: dict
    # The lifetime schedule's target (moved to the block's end).
    state_machine: str = ""
    # "plan": lay the started block out as the plan; "retry": the block took none or part of the
    # count, so wait and try again, or end naming it (TryBlockAgain).
    phase: Literal["plan", "retry"] = "plan"
    execution: str | None = None
