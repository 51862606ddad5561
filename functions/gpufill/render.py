"""Human-readable progress and summaries of a provisioning run, built from the execution history."""

from __future__ import annotations

import json
from typing import Any, TextIO

QUIET_STATES = {"IsRequestValid", "RouteByAction", "IsPlanOnly", "HasPools", "NextMove", "PoolsLeft", "ScoreRegion"}


def _details(event: dict, kind: str) -> dict:
    return event.get(kind) or {}


def _state_output(event: dict) -> dict:
    try:
        return json.loads(_details(event, "stateExitedEventDetails").get("output") or "{}")
    except json.JSONDecodeError:
        return {}


def pool_label(item: dict) -> str:
    return f"{item['market']:<9} {item['availability_zone']:<16} {item['instance_type']}"


class Progress:
    """Prints one line per meaningful step while the run goes."""

    def __init__(self, out: TextIO):
        self.out = out
        self.plan: dict = {}

    def header(self, request_path, scenario) -> None:
        described = f" ({scenario.description})" if scenario.description else ""
        self._line(f"gpufill simulate {request_path}: market of {len(scenario.regions)} region(s){described}")

    def event(self, event: dict) -> None:
        kind = event["type"]
        if kind.endswith("StateEntered"):
            name = _details(event, "stateEnteredEventDetails").get("name")
            if name not in QUIET_STATES and name not in ("LaunchBatch", "HalveBatch", "AdvanceCursor"):
                self._line(f"  > {name}")
        elif kind == "MapStateStarted":
            self._line(f"    scoring {_details(event, 'mapStateStartedEventDetails').get('length')} region(s) in parallel")
        elif kind.endswith("StateExited"):
            self._exited(_details(event, "stateExitedEventDetails").get("name"), _state_output(event))

    def _exited(self, name: str | None, state: dict) -> None:
        run = state.get("run") or {}
        if name in ("RankPools", "RankOnDemandPools"):
            self.plan = state.get("plan") or {}
            self._line(f"    {len(self.plan.get('pools', []))} {self.plan.get('market')} pool(s) ranked")
        elif name == "LaunchBatch" and run.get("attempts"):
            a = run["attempts"][-1]
            answer = f"launched {a['launched']}" if a["outcome"] == "launched" else f"{a['outcome']} ({a.get('reason')})"
            self._line(f"  > LaunchBatch    {pool_label(a)}  batch {a['batch']:>3} -> {answer}")
        elif name == "HalveBatch":
            self._line(f"  > HalveBatch     batch now {run.get('batch')}")
        elif name == "AdvanceCursor":
            pools = self.plan.get("pools") or []
            if run.get("next") == "launch" and run.get("cursor", 0) < len(pools):
                self._line(f"  > AdvanceCursor  next pool {pool_label(pools[run['cursor']])}")
            else:
                self._line("  > AdvanceCursor  no pool left in this market")

    def _line(self, text: str) -> None:
        print(text, file=self.out, flush=True)


def plans_from(history: list[dict]) -> list[dict]:
    plans = []
    for event in history:
        if event["type"] == "TaskStateExited":
            name = _details(event, "stateExitedEventDetails").get("name")
            if name in ("RankPools", "RankOnDemandPools"):
                plans.append(_state_output(event).get("plan") or {})
    return plans


def render_regions(plan: dict) -> list[str]:
    lines = [f"Ranked regions ({plan.get('market')} market)"]
    lines.append(f"  {'rank':<4} {'score':>5}  {'region':<15} {'type':<13} {'spot $/h':>8}  {'AZs':>3}  {'tier':>4}  price/az/interruption")
    for s in plan.get("regions", []):
        if s.get("dropped"):
            lines.append(f"  {'-':<4} {'-':>5}  {s['region']:<15} {s['instance_type']:<13} dropped: {s['dropped']}")
            continue
        p = s.get("points", {})
        tier = "?" if s.get("advisor_tier") is None else s["advisor_tier"]
        lines.append(
            f"  {s['rank']:<4} {s['score']:>5}  {s['region']:<15} {s['instance_type']:<13} {s['spot_price']:>8.4f}  "
            f"{s['az_count']:>3}  {tier:>4}  {p.get('price')}/{p.get('az')}/{p.get('interruption')}"
        )
    return lines


def render_attempts(attempts: list[dict]) -> list[str]:
    lines = ["Attempts", f"  {'#':>3}  {'market':<9} {'zone':<16} {'type':<13} {'batch':>5} {'got':>4}  outcome"]
    for n, a in enumerate(attempts, 1):
        reason = f" ({a['reason']})" if a.get("reason") else ""
        lines.append(
            f"  {n:>3}  {a['market']:<9} {a['availability_zone']:<16} {a['instance_type']:<13} "
            f"{a['batch']:>5} {a['launched']:>4}  {a['outcome']}{reason}"
        )
    return lines


def render_summary(execution: Any) -> str:
    lines: list[str] = [""]
    plans = plans_from(execution.history)
    if plans:
        lines += render_regions(plans[0]) + [""]
    result = execution.output if execution.status == "SUCCEEDED" else None
    cause = execution.cause if isinstance(execution.cause, dict) else {}
    attempts = (result or {}).get("attempts") or cause.get("attempts")
    if isinstance(attempts, list) and attempts:
        lines += render_attempts(attempts) + [""]
    if result and result.get("status") == "PLANNED":
        lines.append(f"Plan: {len(result.get('pools', []))} pool(s) in order; nothing launched.")
    elif result:
        lines.append("Instances")
        for i in result.get("instances", []):
            price = f"${i['hourly_price']:.4f}/h" if i.get("hourly_price") is not None else "price unknown"
            lines.append(f"  {i['instance_id']}  {i['availability_zone']:<16} {i['instance_type']:<13} {i['market']:<9} {price}")
        lines.append("")
        lines.append(
            f"{result['status']}: {result['launched']} of {result['requested']} launched, "
            f"${result['hourly_cost']:.4f}/h in all"
        )
    else:
        lines.append(f"FAILED with {execution.error}")
        if cause:
            lines.append(f"  {cause.get('message', '')}")
            for field in cause.get("fields", []):
                lines.append(f"  - {field['field']}: {field['problem']}")
            if cause.get("pools_tried"):
                tried = ", ".join(f"{p['pool']} ({p['outcome']})" for p in cause["pools_tried"])
                lines.append(f"  pools tried: {tried}")
            if cause.get("hint"):
                lines.append(f"  hint: {cause['hint']}")
        elif execution.cause:
            lines.append(f"  {execution.cause}")
    m = execution.metrics
    lines.append(
        f"Metrics: {m['state_transitions']} state transitions, {m['lambda_invocations']} Lambda invocations, "
        f"EC2 calls {json.dumps(m['ec2_calls'])}, modelled time {m['modelled_seconds']:.1f} s"
    )
    return "\n".join(lines)
