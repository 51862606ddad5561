"""The sweep's findings: what costs money, or waits for someone, that nobody is looking at.

Pure: the handler passes in the records, what EC2 shows, the pending approvals, the state of a
few executions, when each active Capacity Block ends and when each finding was last notified.
Five kinds of finding:

- `untracked`: an instance tagged for this deployment that no run recorded (the status view
  records it on the spot, `reconciled`, or cannot attribute it, `unrecorded`);
- `expired`: an instance of a request past its `max_lifetime` with no teardown pending (its
  lifetime teardown was rejected, or failed);
- `block-ending`: instances of a request in a Capacity Block that ends within the hour, with no
  teardown pending (EC2 begins to terminate them 30 minutes before the end, whatever gpufill
  records, so the teardown that records their end, and the person who approves it, are due now);
- `approval-waiting`: an approval waiting past half its deadline;
- `run-ended`: a run whose execution ended while its records still say `pending`.

For untracked (attributable), expired and block-ending instances the sweep asks for one teardown, which waits
for the usual approval: the sweep never terminates anything itself. An instance already named
by a pending approval, or by another ask of the same pass, is never asked for again, and the
ask's execution name is derived from its instances, so a later pass asking the same again
starts nothing new (Step Functions refuses a second execution of a name).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufill.constants import (
    CAPACITY_BLOCK_TYPE,
    LIFETIME_ATTRIBUTE,
    SWEEP_BLOCK_ENDING_SECONDS,
    SWEEP_GRACE_SECONDS,
    SWEEP_LISTED_FINDINGS,
    SWEEP_MAX_EXECUTION_LOOKUPS,
    SWEEP_RENOTIFY_SECONDS,
    SWEEP_TEARDOWN_PREFIX,
    TAG_REQUEST_ID,
)
from gpufill.models.teardown import LiveInstance
from gpufill.policy.status import is_ours

Kind = Literal["untracked", "expired", "block-ending", "approval-waiting", "run-ended"]
KINDS: tuple[Kind, ...] = ("untracked", "expired", "block-ending", "approval-waiting", "run-ended")
# The kinds that name instances (counted by instance) and may ask for their teardown.
INSTANCE_KINDS = frozenset({"untracked", "expired", "block-ending"})
# Instances that still hold (or may again hold) money: shutting-down and terminated are ending.
HOLDING_STATES = frozenset({"pending", "running", "stopping", "stopped"})
ENDED_EXECUTION = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})
REQUESTED_BY = "gpufill sweep"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Finding(_Model):
    kind: Kind
    # The same finding on the next pass has the same key: notifications are counted by it.
    key: str
    request_id: str | None = None
    instance_ids: list[str] = Field(default_factory=list)
    regions: list[str] = Field(default_factory=list)
    hourly_cost: float = 0.0
    command: str
    message: str


class TeardownAsk(_Model):
    """One teardown execution, behind the usual approval."""

    name: str
    finding: str
    instance_ids: list[str]

    def execution_input(self) -> dict:
        return {"action": "teardown", "instance_ids": self.instance_ids, "requested_by": f"{REQUESTED_BY} ({self.finding})"}


class PendingApproval(_Model):
    execution_name: str
    requested_at: datetime
    deadline: datetime
    instance_ids: list[str] = Field(default_factory=list)
    purchase: bool = False


class SweepPass(_Model):
    at: datetime
    findings: list[Finding]
    notify: list[Finding]
    teardowns: list[TeardownAsk]
    running: int
    hourly_cost: float
    pending_approvals: int

    def counts(self) -> dict[str, int]:
        """Findings by kind; for instance findings, the instances."""
        found = dict.fromkeys(KINDS, 0)
        for f in self.findings:
            found[f.kind] += len(f.instance_ids) if f.kind in INSTANCE_KINDS else 1
        return found

    def summary(self) -> dict:
        """What `gpufill status` shows of the last pass."""
        return {
            "at": self.at.isoformat(timespec="seconds"),
            "running": self.running,
            "hourly_cost": self.hourly_cost,
            "pending_approvals": self.pending_approvals,
            "found": self.counts(),
            "notified": len(self.notify),
            "teardowns_asked": [t.name for t in self.teardowns],
            "findings": [
                {"kind": f.kind, "message": f.message, "command": f.command} for f in self.findings[:SWEEP_LISTED_FINDINGS]
            ],
        }


def pending_approval(item: Mapping) -> PendingApproval | None:
    """An approval item still waiting for its answer, or None."""
    if item.get("status") != "PENDING" or item.get("decided_at") or not item.get("deadline"):
        return None
    return PendingApproval(
        execution_name=item["execution_name"],
        requested_at=datetime.fromisoformat(item.get("requested_at") or item["deadline"]),
        deadline=datetime.fromisoformat(item["deadline"]),
        instance_ids=sorted(item.get("instance_ids") or []),
        purchase=item.get("approval_for") == "capacity-block-purchase",
    )


def requests_to_look_up(records: Mapping[str, dict]) -> list[str]:
    """The requests whose records still say `pending`: the handler asks Step Functions whether
    their execution ended (a bounded number a pass; the rest wait for the next)."""
    waiting = sorted({r["request_id"] for r in records.values() if r.get("state") == "pending" and r.get("request_id")})
    return waiting[:SWEEP_MAX_EXECUTION_LOOKUPS]


def block_regions(records: Mapping[str, dict], live: Mapping[str, LiveInstance], deployment: str) -> list[str]:
    """The regions where an instance of this deployment still runs in a Capacity Block its launch
    recorded: the handler reads those regions' active blocks (their end) and no other."""
    return sorted(
        {
            x.region
            for i, x in live.items()
            if is_ours(x, deployment) and x.state in HOLDING_STATES and _block_of(records.get(i) or {}) is not None
        }
    )


def assess(
    *,
    records: Mapping[str, dict],
    live: Mapping[str, LiveInstance],
    reconciled: Iterable[str],
    deployment: str,
    approvals: Iterable[PendingApproval],
    executions: Mapping[str, str | None],
    notified: Mapping[str, datetime],
    now: datetime,
    price: Callable[[str, str], float | None],
    block_ends: Mapping[str, datetime] | None = None,
) -> SweepPass:
    """`records`: the instance records as the table held them before this pass; `reconciled`:
    the ids the pass recorded on the spot; `executions`: request id -> its execution's status
    (None: no such execution); `notified`: finding key -> when it was last notified; `price`:
    the On-Demand price of (type, region), used where a record holds no price; `block_ends`: the
    end of each active Capacity Block (reservation id -> EndDate) in the regions `block_regions` named."""
    block_ends = block_ends or {}
    ending = timedelta(seconds=SWEEP_BLOCK_ENDING_SECONDS)
    # Past its deadline an approval is answered no: its instances may be asked for again.
    approvals = sorted((a for a in approvals if a.deadline > now), key=lambda a: a.execution_name)
    asked = {i for a in approvals for i in a.instance_ids}
    reconciled = set(reconciled)
    grace = timedelta(seconds=SWEEP_GRACE_SECONDS)
    ours = {i: x for i, x in live.items() if is_ours(x, deployment) and x.state in HOLDING_STATES}

    def cost(instance_id: str) -> float:
        instance = ours.get(instance_id)
        if instance is None or instance.state != "running":
            return 0.0
        record = records.get(instance_id) or {}
        if _block_of(record) is not None or (record.get("market") or instance.market) == CAPACITY_BLOCK_TYPE:
            return 0.0  # a Capacity Block's instances were paid for upfront: nothing accrues by the hour
        hourly = record.get("hourly_price")
        if hourly is None and instance.instance_type:
            hourly = price(instance.instance_type, instance.region)
        return float(hourly or 0.0)

    untracked: dict[str | None, list[str]] = {}
    expired: dict[str, list[str]] = {}
    blocks_ending: dict[tuple[str, str], list[str]] = {}
    for instance_id, instance in sorted(ours.items()):
        if instance_id in asked:
            continue  # a teardown of it waits for its answer already
        record = records.get(instance_id)
        if record is None or record.get("reconciled") or instance_id in reconciled:
            launched = _moment(instance.launch_time) or _moment((record or {}).get("launched_at"))
            if launched is not None and now - launched < grace:
                continue  # perhaps a step that has not written its record yet
            owner = (record or {}).get("request_id") or instance.tags.get(TAG_REQUEST_ID) or None
            untracked.setdefault(owner, []).append(instance_id)
            continue
        block = _block_of(record)
        ends = block_ends.get(block)  # None for an instance in no block: no id is None
        if ends is not None and ends - now <= ending and record.get("request_id"):
            blocks_ending.setdefault((record["request_id"], block), []).append(instance_id)
            continue  # past its lifetime too, perhaps: the block's end is the nearer and the surer
        expires = _moment(record.get(LIFETIME_ATTRIBUTE))
        if expires is not None and now - expires >= grace and record.get("request_id"):
            expired.setdefault(record["request_id"], []).append(instance_id)

    findings: list[Finding] = []
    teardowns: list[TeardownAsk] = []
    claimed: set[str] = set()

    def instances_finding(kind: Kind, request_id: str | None, ids: list[str], what: str) -> None:
        ids = sorted(ids)
        hourly = round(sum(cost(i) for i in ids), 4)
        regions = sorted({ours[i].region for i in ids})
        todo = [i for i in ids if i not in claimed] if request_id is not None else []
        claimed.update(todo)
        ask = TeardownAsk(name=_ask_name(request_id, todo), finding=kind, instance_ids=todo) if todo else None
        if ask is not None:
            teardowns.append(ask)
            command = f"gpufill approve {ask.name}   (or: gpufill reject {ask.name})"
        else:  # not attributable to a request: gpufill cannot tear it down by id
            command = f"gpufill status; end them in the EC2 console ({', '.join(regions)}) or tag them gpufill:request-id"
        findings.append(
            Finding(
                kind=kind,
                key=f"{kind}:{request_id or '-'}:{_digest(ids)}",
                request_id=request_id,
                instance_ids=ids,
                regions=regions,
                hourly_cost=hourly,
                command=command,
                message=f"{len(ids)} instance(s) {what} ({hourly:g} USD/h): {', '.join(ids[:10])}"
                + (" ..." if len(ids) > 10 else ""),
            )
        )

    for request_id, ids in sorted(untracked.items(), key=lambda kv: kv[0] or ""):
        who = f"request {request_id}" if request_id else "no request"
        instances_finding("untracked", request_id, ids, f"tagged for deployment {deployment} but not recorded by any run ({who})")
    for request_id, ids in sorted(expired.items()):
        instances_finding("expired", request_id, ids, f"of request {request_id} past its max_lifetime with no teardown pending")

    for (request_id, block), ids in sorted(blocks_ending.items()):
        fee = max(records[i]["capacity_block_fee"] for i in ids)  # set on every block instance's record
        instances_finding(
            "block-ending", request_id, ids,
            f"of request {request_id} in Capacity Block {block} (upfront fee {fee:g} USD), which ends at "
            f"{block_ends[block].astimezone(UTC).isoformat(timespec='minutes')}, with no teardown pending; "
            "EC2 begins to terminate them 30 minutes before the end",
        )

    for approval in approvals:
        half = approval.requested_at + (approval.deadline - approval.requested_at) / 2
        if now < half:
            continue
        hourly = round(sum(cost(i) for i in approval.instance_ids), 4)
        what = "a Capacity Block purchase" if approval.purchase else f"a teardown of {len(approval.instance_ids)} instance(s)"
        findings.append(
            Finding(
                kind="approval-waiting",
                key=f"approval-waiting:{approval.execution_name}",
                instance_ids=list(approval.instance_ids),
                hourly_cost=hourly,
                command=f"gpufill approve {approval.execution_name}   (or: gpufill reject {approval.execution_name})",
                message=(
                    f"{approval.execution_name} asks for {what} and has waited past half its deadline "
                    f"({approval.deadline.isoformat(timespec='minutes')})"
                ),
            )
        )

    for request_id in sorted(executions):
        status = executions[request_id]
        if status not in ENDED_EXECUTION:
            continue
        ids = sorted(i for i, r in records.items() if r.get("request_id") == request_id and r.get("state") == "pending")
        if not ids:
            continue
        hourly = round(sum(cost(i) for i in ids), 4)
        findings.append(
            Finding(
                kind="run-ended",
                key=f"run-ended:{request_id}",
                request_id=request_id,
                instance_ids=ids,
                hourly_cost=hourly,
                command=f"gpufill status {request_id}",
                message=f"run {request_id} ended {status} but the records of {len(ids)} instance(s) still say pending",
            )
        )

    renotify = timedelta(seconds=SWEEP_RENOTIFY_SECONDS)
    notify = [f for f in findings if f.key not in notified or now - notified[f.key] >= renotify]
    running = [i for i, x in ours.items() if x.state == "running"]
    return SweepPass(
        at=now,
        findings=findings,
        notify=notify,
        teardowns=teardowns,
        running=len(running),
        hourly_cost=round(sum(cost(i) for i in running), 4),
        pending_approvals=len(approvals),
    )


def notification(finding: Finding, deployment: str) -> tuple[str, str]:
    """The SNS subject (under 100 characters) and body of one finding."""
    subject = f"gpufill ({deployment}) sweep: {finding.kind}"[:99]
    lines = [finding.message, "", f"Cost: {finding.hourly_cost:g} USD per hour", f"To act: {finding.command}"]
    if finding.regions:
        lines.append(f"Regions: {', '.join(finding.regions)}")
    lines += ["", "The sweep repeats this at most once a day while it lasts."]
    return subject, "\n".join(lines)


def _ask_name(request_id: str | None, ids: list[str]) -> str:
    """`sweep-teardown-<request>-<digest of the ids>`: at most 80 characters of [A-Za-z0-9-_]. Named
    from what it tears down, never from the finding's kind: a finding that changes kind between
    passes (expired, then its block ending) before the first ask's approval is recorded asks
    under the same name, which Step Functions refuses to start twice."""
    return f"{SWEEP_TEARDOWN_PREFIX}teardown-{(request_id or 'none')[:48]}-{_digest(ids)}"


def _block_of(record: Mapping) -> str | None:
    """The Capacity Block a record's instance was launched into (its fee marks a block), or None."""
    if record.get("capacity_block_fee") is None:
        return None
    return record.get("capacity_reservation_id") or None


def _digest(ids: Iterable[str]) -> str:
    return hashlib.sha256(",".join(sorted(ids)).encode()).hexdigest()[:10]


def _moment(value) -> datetime | None:
    if not value:
        return None
    try:
        moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)  # EC2 and the records speak UTC
