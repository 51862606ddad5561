"""Least privilege, measured: which grants gpufill's runs use, and which no run uses.

`gpufill local iam-report` runs the paths below on the local engine, every call judged by the
deployed policies, then prints per role the actions (and resource types) the runs were granted,
and the actions a role is granted that no run used. It also writes what the runs needed to
catalog/iam_needs.json: `gpufill doctor` asks AWS's own IAM (SimulatePrincipalPolicy) the same
questions of a deployed stack.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from gpufill.local.iam.enforcement import Judgement
from gpufill.local.iam.usage import principal_names

REPO = Path(__file__).resolve().parents[4]
NEEDS_FILE = REPO / "functions" / "gpufill" / "catalog" / "iam_needs.json"
# (request file, market file, decision): provision by fleet and by RunInstances, spot falling back
# to On-Demand, a same-AZ gang, a request with max_lifetime, then status and an approved teardown
# of the first; then time passes to the lifetime's end, and its teardown is approved. A Capacity
# Block bought behind an approved purchase. Then a maintained request's teardown, rejected
# (_maintained_teardown_rejected).
PATHS = [
    ("provision-spot.json", "first-az-sold-out.json", None),
    ("provision-max-lifetime.json", "first-az-sold-out.json", None),
    ("provision-exact.json", "first-az-sold-out.json", None),
    ("provision-gang-same-az.json", "first-az-sold-out.json", None),
    ("provision-spot-then-on-demand.json", "all-spot-sold-out.json", None),
    ("reserved-capacity.json", "reserved-capacity.json", None),
    ("provision-capacity-block.json", "capacity-blocks.json", "approved"),
]
# Resource ids vary run by run; a need names its resource by type with a fixed id.
# Who calls, and over TLS (every call is): facts of every call, not what a grant needs.
_NOT_NEEDS = ("aws:Principal", "aws:SecureTransport")
_ID = re.compile(r"/(i|vol|eni|subnet|sg|lt|fleet|sir|ami|vpc|cr)-[0-9a-f]+")
# The same ids where a condition key holds them (an instance's own id, the fleet and launch
# template that made it), and a launch's ClientToken tag: the file stays the same run after run.
_BARE_ID = re.compile(r"\b(i|lt|sir|cr|subnet|sg|vpc|vol|eni)-[0-9a-f]{8,17}\b")
_FLEET_ID = re.compile(r"\bfleet-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_LAUNCH_TOKEN = re.compile(r"\bgpufill-[0-9a-f]{40}-\d+\b")
_ACCOUNT = re.compile(r":(\d{12}):")


# Grants AWS needs that the local engine cannot exercise, with why they stay.
KEPT_FOR = [
    (re.compile(r"^(logs|xray):"), "the service writes its own logs and traces (Lambda, Step Functions; not simulated)"),
    (re.compile(r"^(ssm:UpdateInstanceInformation|ssmmessages:|ec2messages:)"), "the SSM agent on the instance: port forwarding to vLLM"),
    (re.compile(r"^ecr:"), "the instance pulls the vLLM image"),
    (re.compile(r"^(s3:GetObject|s3:ListBucket|ec2:CreateTags)$"), "startup.sh on the instance (its own calls are not judged locally)"),
]


def kept_for(action: str) -> str | None:
    return next((why for pattern, why in KEPT_FOR if pattern.search(action)), None)


@dataclass
class RoleUse:
    role_arn: str
    principal: str
    used: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    granted: set[str] = field(default_factory=set)
    needs: dict[tuple, dict] = field(default_factory=dict)

    @property
    def unused(self) -> list[str]:
        return sorted(a for a in self.granted if not any(_matches(a, used) for used in self.used))


def run_paths(examples: Path = REPO / "examples") -> list[tuple[object, list[Judgement]]]:
    """Each path's engine (for its deployed roles) and the judgements its runs made."""
    from gpufill.local.engine import LocalEngine
    from gpufill.local.scenario import MarketScenario

    by_market: dict[str, list[tuple[str, str | None]]] = defaultdict(list)
    for request, market, decision in PATHS:
        by_market[market].append((request, decision))
    results = []
    for market, runs in by_market.items():
        scenario = MarketScenario.model_validate(json.loads((examples / "markets" / market).read_text()))
        # The facts refresh on, as deployed: its passes while the lifetimes run out refresh what
        # the runs used, so RefreshFacts's calls are measured too.
        with LocalEngine(scenario, facts_refresh=True) as engine:
            first = None
            for number, (request, decision) in enumerate(runs):
                name = f"iam-report-{number}"
                engine.run(json.loads((examples / "requests" / request).read_text()), name=name, decision=decision)
                first = first or name
            engine.run({"action": "status"}, name="iam-report-status")
            engine.run({"action": "teardown", "request_id": first}, name="iam-report-teardown", decision="approved")
            _end_lifetimes(engine, examples, runs)
            results.append((engine, list(engine.iam.seen)))
    results.append(_maintained_teardown_rejected(examples))
    return results


def _maintained_teardown_rejected(examples: Path) -> tuple[object, list[Judgement]]:
    """A maintained request's teardown waits, its approval request refused by the topic; EC2
    reclaims an instance meanwhile (its refill held); a reminder gets through; the decision cannot
    delete the reminders (refused once), the teardown is rejected and restarts
    the held refill; the next reminder finds the approval answered and deletes its own schedule.
    Then a second teardown waits, another reclaim is held, and a third teardown defers to the
    second, which is rejected while the third lists: the third's ending restarts the refill."""
    import threading

    from gpufill.local.engine import LocalEngine
    from gpufill.local.scenario import MarketScenario

    market = json.loads((examples / "markets" / "interruption-at-10min.json").read_text())
    second_reclaim = 8400  # after the first approval and its last reminder (about 2 h in)
    market["interruptions"] = [{"at_seconds": 600, "instance": 1}, {"at_seconds": second_reclaim, "instance": 2}]
    request = json.loads((examples / "requests" / "provision-maintain.json").read_text())
    with LocalEngine(MarketScenario.model_validate(market)) as engine:
        engine.run(request, name="iam-report-maintain")

        def ask(name: str) -> threading.Thread:
            asking = threading.Thread(target=lambda: engine.run({"action": "teardown", "request_id": "iam-report-maintain"}, name=name))
            asking.start()
            engine.wait_for_approval(name)
            return asking

        def reject(name: str, asking: threading.Thread) -> None:
            engine.answer_approval(name, "rejected", approver="iam-report")
            asking.join(120)

        def follow_refills() -> None:
            for name in [n for n in engine.executions() if "-refill-" in n]:
                engine.follow(name)

        engine.faults.aws("sns", "Publish", error="AuthorizationError", times=1)  # nobody told: said on the item
        asking = ask("iam-report-held")
        engine.advance(600)  # the first reclaim, while the approval waits
        engine.settle()
        engine.advance(3000 + 60)  # the first reminder gets through, and says so on the item
        engine.settle()
        engine.faults.aws("scheduler", "DeleteSchedule", error="AccessDeniedException", times=1)
        reject("iam-report-held", asking)
        follow_refills()
        engine.advance(3600 + 60)  # the next reminder: answered, so it deletes its schedule
        engine.settle()
        asking = ask("iam-report-asked")
        engine.advance(second_reclaim - engine.elapsed + 60)  # the second reclaim, held
        engine.settle()
        engine.faults.meanwhile_at("dynamodb", "UpdateItem", task="FindTeardownInstances", skip=1,
                                   meanwhile=lambda: reject("iam-report-asked", asking))
        engine.run({"action": "teardown", "request_id": "iam-report-maintain"}, name="iam-report-deferred")
        follow_refills()
        return engine, list(engine.iam.seen)


def _end_lifetimes(engine, examples: Path, runs: list[tuple[str, str | None]]) -> None:
    """Let the longest max_lifetime pass: its schedule starts the teardown (as the scheduler's
    role), which reminds once and is approved."""
    from gpufill.models.request import Request

    lives = [Request.model_validate(json.loads((examples / "requests" / r).read_text())).max_lifetime for r, _ in runs]
    lives = [life.total_seconds() for life in lives if life is not None]
    if not lives:
        return
    # Hours pass: every function starts in a new container, so the facts refresh's first pass makes
    # its own look-ups (a cache another function filled moments ago in this process would hide them).
    engine.cold_start()
    engine.advance(max(lives) + 60)
    for name in [n for n in engine.executions() if n.endswith("-expired")]:
        engine.wait_for_approval(name)
        engine.advance(3600 + 60)  # one reminder, published by the scheduler's role
        engine.answer_approval(name, "approved", approver="iam-report")
        engine.follow(name)


def unused_across(folder: Path, uses: dict[str, RoleUse]) -> dict[str, list[str]]:
    """Per principal, the granted actions no engine that left its usage in `folder` used."""
    used: dict[str, set[str]] = defaultdict(set)
    for path in folder.glob("*.json"):
        for principal, actions in json.loads(path.read_text()).items():
            used[principal].update(actions)
    return {
        use.principal: sorted(a for a in use.granted if not any(_matches(a, u) for u in used[use.principal]))
        for use in uses.values()
    }


def measure(results) -> dict[str, RoleUse]:
    uses: dict[str, RoleUse] = {}
    for engine, judgements in results:
        names = principal_names(engine)
        for role_arn, role in engine.roles.items():
            use = uses.setdefault(role_arn, RoleUse(role_arn, names.get(role_arn, role.name)))
            use.granted |= _allowed_actions(role.policies)
        generic = _Generic(engine)
        for j in judgements:
            use = uses.setdefault(j.role_arn, RoleUse(j.role_arn, names.get(j.role_arn, j.principal)))
            if j.result != "Allowed":
                continue
            use.used[j.action].add(_resource_type(j.resource))
            need = {"action": j.action, "resource": generic(j.resource), "context": generic.context(j.context)}
            # One question per action, resource and condition keys: the values (a request's own
            # name, an instance's id) differ run by run and decide nothing the keys do not.
            key = (j.action, _ID.sub("/*", need["resource"]), tuple(sorted(need["context"])))
            # Parallel branches run in any order: the same representative every run.
            if key not in use.needs or _order(need) < _order(use.needs[key]):
                use.needs[key] = need
    return {arn: use for arn, use in uses.items() if use.used or use.granted}


def needs_document(uses: dict[str, RoleUse]) -> dict:
    # Roles that play one principal (each region's event-forwarding role) pool their needs.
    pooled: dict[str, dict[tuple, dict]] = defaultdict(dict)
    for use in uses.values():
        for key, need in use.needs.items():
            if key not in pooled[use.principal] or _order(need) < _order(pooled[use.principal][key]):
                pooled[use.principal][key] = need
    return {
        "about": "Calls gpufill's runs were granted on the local engine (make iam-report); gpufill doctor asks IAM the same.",
        "principals": {
            principal: sorted(needs.values(), key=lambda n: (n["action"], n["resource"], json.dumps(n["context"], sort_keys=True)))
            for principal, needs in sorted(pooled.items()) if needs
        },
    }


def render(uses: dict[str, RoleUse]) -> str:
    lines = []
    for use in sorted(uses.values(), key=lambda u: u.principal):
        lines.append(f"{use.principal}  ({use.role_arn.rsplit('/', 1)[-1]})")
        for action in sorted(use.used):
            lines.append(f"  used    {action:42} {', '.join(sorted(use.used[action]))}")
        for action in use.unused:
            why = kept_for(action) if use.principal in ("Instance",) or not action.startswith(("s3:", "ec2:CreateTags")) else None
            lines.append(f"  unused  {action:42} {('kept: ' + why) if why else 'not used by the paths run here'}")
    return "\n".join(lines)


# --- helpers -----------------------------------------------------------------------------------


def _order(need: dict) -> str:
    return json.dumps(need, sort_keys=True)


def _allowed_actions(policies: list[dict]) -> set[str]:
    actions: set[str] = set()
    for document in policies:
        for statement in document.get("Statement", []):
            if statement.get("Effect") == "Allow":
                listed = statement.get("Action", [])
                actions.update([listed] if isinstance(listed, str) else listed)
    return actions


def _matches(granted: str, used: str) -> bool:
    pattern = re.escape(granted.lower()).replace(r"\*", ".*")
    return re.fullmatch(pattern, used.lower()) is not None


def _resource_type(arn: str) -> str:
    if arn == "*":
        return "*"
    parts = arn.split(":", 5)
    if len(parts) < 6:
        return arn
    kind = re.split(r"[/:]", parts[5], maxsplit=1)[0]
    return f"{parts[2]}:{kind}"


class _Generic:
    """A need as any deployment reads it: the account, the env and the names the stack generates
    (the startup bucket, the instance role) become placeholders gpufill doctor fills in."""

    def __init__(self, engine) -> None:
        deployment = next(iter(engine.deployments.values()))
        self.env = deployment.env
        self.names = {
            str(deployment.app.home.outputs.get("StartupBucketName", "")): "${StartupBucket}",
            deployment.app.instance_role.arn: "${InstanceRoleArn}",
            deployment.app.scheduler_role.arn: "${SchedulerRoleArn}",
        }
        self.names.pop("", None)
        # What lives in the home region only (tables, topic, state machine, schedules, the bus the
        # regions forward to) is asked of the deployment's own home region, whichever it is; EC2's
        # ARNs keep their region, a candidate region like any other.
        self.home = re.compile(
            rf"(?<=^arn:aws:)(dynamodb|sns|sqs|states|scheduler|events|ssm|lambda|logs):{re.escape(deployment.app.home.region)}:"
        )

    def __call__(self, text: str) -> str:
        for name, placeholder in self.names.items():
            text = text.replace(name, placeholder)
        text = self.home.sub(lambda m: f"{m.group(1)}:${{HomeRegion}}:", text)
        text = _ACCOUNT.sub(":${Account}:", text)
        text = re.sub(rf"(?<=[-/]){re.escape(self.env)}(?=$|[-/:])", "${Env}", text)
        text = "${Env}" if text == self.env else text
        text = _ID.sub(lambda m: f"/{m.group(1)}-0123456789abcdef0", text)
        text = _FLEET_ID.sub("fleet-00000000-0000-0000-0000-000000000000", text)
        text = _LAUNCH_TOKEN.sub("gpufill-" + "0" * 40 + "-1", text)
        return _BARE_ID.sub(lambda m: f"{m.group(1)}-0123456789abcdef0", text)

    def context(self, context: dict) -> dict:
        return {k: (self(v) if isinstance(v, str) else [self(x) for x in v])
                for k, v in sorted(context.items()) if not k.startswith(_NOT_NEEDS)}
