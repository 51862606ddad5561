"""IAM's SimulatePrincipalPolicy, answered by the same evaluator that judges the engine's calls.

`gpufill doctor` asks AWS this for every call a deployed role must be allowed to make; against
the local endpoint the answer comes from the role's policies as the engine deployed them.
moto has no SimulatePrincipalPolicy of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from unittest import mock

from gpufill.local.iam import evaluator as evaluation
from gpufill.local.iam.evaluator import ALLOWED, EXPLICITLY_DENIED, Authorization

# IAM's EvalDecision words for the evaluator's results.
EVAL_DECISION = {ALLOWED: "allowed", EXPLICITLY_DENIED: "explicitDeny", evaluation.IMPLICITLY_DENIED: "implicitDeny"}

PoliciesOf = Callable[[str], "Sequence[tuple[str, dict]] | None"]


def patches(policies_of: PoliciesOf, account: str):
    """IamResponse.simulate_principal_policy for roles whose policies `policies_of(role_arn)` knows."""
    from moto.core.responses import ActionResult
    from moto.iam.exceptions import NotFoundException
    from moto.iam.responses import IamResponse

    def simulate_principal_policy(response: IamResponse):
        params = response._get_params()
        source = params.get("PolicySourceArn", "")
        policies = policies_of(source)
        if policies is None:
            raise NotFoundException(f"Role {source} not found")
        actions = params.get("ActionNames") or []
        resources = params.get("ResourceArns") or ["*"]
        context = _context_entries(params.get("ContextEntries") or [])
        results = []
        for action in actions:
            for resource in resources:
                decision = evaluation.shared().judge(
                    source, account, tuple(policies), Authorization(action, resource, context)
                )
                results.append({
                    "EvalActionName": action,
                    "EvalResourceName": resource,
                    "EvalDecision": EVAL_DECISION[decision.result],
                })
        return ActionResult({"EvaluationResults": results, "IsTruncated": False})

    return mock.patch.object(IamResponse, "simulate_principal_policy", simulate_principal_policy, create=True)


def _context_entries(entries: list[dict]) -> dict[str, str | tuple[str, ...]]:
    context: dict[str, str | tuple[str, ...]] = {}
    for entry in entries:
        values = entry.get("ContextKeyValues") or []
        context[entry["ContextKeyName"]] = tuple(values) if entry.get("ContextKeyType", "").endswith("List") else values[0]
    return context
