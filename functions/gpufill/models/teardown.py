"""What the teardown and status paths carry from one state to the next, and what they return."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Why an instance named by a teardown is left alone. "unknown", "not-managed",
# "other-deployment" and "other-request" are refusals: gpufill did not launch it for this
# request in this deployment, so it never terminates it. "gone" and "already-terminated"
# only say there is nothing left to end. "awaiting-approval": another teardown already asks to end it
# and waits for an answer (one pending teardown per instance; its approval id is in the detail).
RefusalReason = Literal[
    "unknown", "not-managed", "other-deployment", "other-request", "gone", "already-terminated", "awaiting-approval"
]
TeardownStatus = Literal["NOTHING_TO_TERMINATE", "AWAITING_APPROVAL", "TERMINATED", "REJECTED", "EXPIRED"]
Decision = Literal["approved", "rejected", "expired"]
# How the status view found an instance: in the table and in EC2 ("recorded"); tagged for this
# deployment in EC2 but missing from the table, and recorded by this status run ("reconciled");
# tagged but impossible to record, having no request-id tag ("unrecorded"); in the table but no
# longer in EC2 ("gone"); or in the table while its instance lost the gpufill:managed or the
# deployment tag ("not-managed").
Finding = Literal["recorded", "reconciled", "unrecorded", "gone", "not-managed"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LiveInstance(_Model):
    """One instance as DescribeInstances shows it now."""

    instance_id: str
    region: str
    availability_zone: str | None = None
    instance_type: str | None = None
    state: str
    tags: dict[str, str] = Field(default_factory=dict)
    launch_time: str | None = None
    spot: bool = False
    # EC2's InstanceLifecycle "capacity-block": it runs in a Capacity Block.
    capacity_block: bool = False
    client_token: str | None = None

    @property
    def market(self) -> str:
        """What EC2 says it runs as, for an instance with no record to say it."""
        return "capacity-block" if self.capacity_block else "spot" if self.spot else "on-demand"


class TeardownTarget(_Model):
    """Exactly one of the three is set (the request model checks it); `all`: every live
    instance of this deployment."""

    request_id: str | None = None
    instance_ids: list[str] | None = None
    all: bool = False


class _InstanceFacts(_Model):
    """A managed instance as its record and EC2 describe it together."""

    instance_id: str
    request_id: str | None = None
    region: str
    availability_zone: str | None = None
    instance_type: str | None = None
    market: str | None = None
    hourly_price: float | None = None
    state: str
    launched_at: str | None = None


class TeardownInstance(_InstanceFacts):
    """An instance this teardown may terminate once a person approves."""

    recorded: bool = True


class Refusal(_Model):
    instance_id: str
    reason: RefusalReason
    detail: str


class RegionBatch(_Model):
    """One branch of the TerminateInstances Map: a region and its approved instances, grouped by
    the request each must still be tagged with when the approval comes back (request id -> ids;
    grouped, so a teardown of the maximum number of ids stays small)."""

    region: str
    requests: dict[str, list[str]] = Field(default_factory=dict)

    @property
    def instance_ids(self) -> list[str]:
        return sorted(i for ids in self.requests.values() for i in ids)

    def request_of(self, instance_id: str) -> str | None:
        return next((r for r, ids in self.requests.items() if instance_id in ids), None)


class Teardown(_Model):
    """FindTeardownInstances' answer; with nothing to terminate it is also the execution's result.

    `regions` holds every instance to terminate; `instances` and `refused` list the details of at
    most constants.TEARDOWN_LISTED_INSTANCES each (the counts say how many there are in all)."""

    request_id: str
    action: Literal["teardown"] = "teardown"
    status: TeardownStatus
    target: TeardownTarget
    requested_by: str | None = None
    instance_count: int = 0
    instances: list[TeardownInstance] = Field(default_factory=list)
    refused_count: int = 0
    refused_reasons: dict[str, int] = Field(default_factory=dict)
    refused: list[Refusal] = Field(default_factory=list)
    regions: list[RegionBatch] = Field(default_factory=list)
    hourly_cost: float = 0.0
    note: str | None = None
    # "max_lifetime": the spend guard asked this teardown when the request expired.
    trigger: str | None = None
    expired_at: str | None = None


class ApprovalDecision(_Model):
    """What the approval step came back with, as RecordApprovalDecision recorded it."""

    decision: Decision
    # The decision exactly as it was sent (" approved" stays " approved"): the evidence for `decision`.
    answer_raw: str | None = None
    approver: str
    reason: str | None = None
    decided_at: str
    # A rejection or expiry: what became of the maintenance the teardown stopped (approval.maintenance_note).
    note: str | None = None


class RegionTermination(_Model):
    """TerminateRegionInstances' answer for one region, compact so a Map over the maximum number
    of ids stays small: the ids it terminated, their states before, and what it left alone."""

    region: str
    terminated_at: str
    terminated_count: int = 0
    terminated: list[str] = Field(default_factory=list)
    previous_states: dict[str, int] = Field(default_factory=dict)
    # Approved, but already shutting down or terminated when the step ran (a spot interruption,
    # an idle shutdown, or this step's own earlier try whose answer was lost).
    already_ended: list[str] = Field(default_factory=list)
    skipped_count: int = 0
    skipped: list[Refusal] = Field(default_factory=list)


class StatusEntry(_InstanceFacts):
    hours_running: float | None = None
    finding: Finding
    # What startup.sh last reported on the instance (tag gpufill:startup-step): "serving" once its model answers.
    startup_step: str | None = None
    # maintain: the instances a refill run launched in place of this one, after EC2 reclaimed it.
    replaced_by: list[str] | None = None
    # max_lifetime: when the instance's request expires and its teardown asks for approval.
    expires_at: str | None = None
    # An ended instance: when gpufill saw it end (its teardown, or EC2's reclaim), so its spend is known.
    ended_at: str | None = None
    # An instance in a Capacity Block: the block and its upfront fee, which is its spend (paid once per block).
    capacity_reservation_id: str | None = None
    capacity_block_fee: float | None = None


class StatusReport(_Model):
    """The status view. `instances` lists at most constants.STATUS_LISTED_INSTANCES entries, the
    ones that need attention and the billed ones first; the counts always cover every instance."""

    request_id: str
    action: Literal["status"] = "status"
    status: Literal["REPORTED"] = "REPORTED"
    filter: TeardownTarget = Field(default_factory=TeardownTarget)
    regions: list[str]
    total: int = 0
    listed: int = 0
    note: str | None = None
    instances: list[StatusEntry] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    by_region: dict[str, dict[str, int]] = Field(default_factory=dict)
    # request id -> state -> count, for the requests with the most instances; `other_requests` counts the rest.
    by_request: dict[str, dict[str, int]] = Field(default_factory=dict)
    other_requests: int = 0
    running: int = 0
    hourly_cost: float = 0.0
    reconciled: list[str] = Field(default_factory=list)
    unrecorded: list[str] = Field(default_factory=list)
    gone: list[str] = Field(default_factory=list)
    generated_at: str
