"""Who signs each call in the local engine, as AWS would see it.

- A Lambda handler running in-process: its function's execution role, as deployed.
- moto's Step Functions interpreter (it signs with its own access key): the state machine's role
  of the deployment the call names (the function it invokes, the execution it starts, the topic
  it publishes to), so two deployments in one account each run with their own role.
- Anything else (the engine deploying, a test setting up, EventBridge delivering to a target,
  which AWS authorizes by the function's resource policy): not judged.
"""

from __future__ import annotations

import json

from gpufill.local.deploy.model import Role
from gpufill.local.iam.enforcement import STATE_MACHINE_ACCESS_KEY, Principal, calling_access_key, current_call


def principal(role: Role, session: str, account: str) -> Principal:
    return Principal(
        name=role.name,
        arn=f"arn:aws:sts::{account}:assumed-role/{role.name}/{session}",
        policies=tuple(role.named_policies),
        role_arn=role.arn,
        account=account,
    )


def engine_principals(engine):
    """The principal provider of a running LocalEngine (see local/iam/enforcement.py)."""
    cache: dict[tuple[str, str], tuple[Role, Principal]] = {}

    def of(role: Role, session: str) -> Principal:
        # A role whose policies changed (a test narrowing a grant) is a new Role: judged by its new policies.
        key = (role.arn, session)
        if key not in cache or cache[key][0] is not role:
            cache[key] = (role, principal(role, session, engine.account))
        return cache[key][1]

    def provider() -> Principal | None:
        function = getattr(engine._invocation, "function", None)
        if function is not None:
            return of(function.role, function.name)
        if calling_access_key() == STATE_MACHINE_ACCESS_KEY:
            deployment = _deployment_named_by(engine, current_call())
            role = deployment.app.state_machine_role
            return of(role, "execution")
        return None

    return provider


def _deployment_named_by(engine, call) -> object:
    deployments = list(engine.deployments.values())
    if len(deployments) == 1 or call is None:
        return deployments[0]
    text = json.dumps(call, default=str)
    for deployment in deployments:
        if deployment.state_machine_arn in text or f"gpufill-{deployment.env}-" in text or deployment.approval_topic_arn in text:
            return deployment
    return deployments[0]
