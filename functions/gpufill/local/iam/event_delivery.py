"""EventBridge's own deliveries, authorized as AWS authorizes them.

- To a Lambda target: the function's resource-based policy (AWS::Lambda::Permission) must let
  `events.amazonaws.com` invoke it from that rule (`AWS:SourceArn`); the identity of the rule's
  account plays no part.
- To another region's event bus: EventBridge assumes the target's role, whose trust policy must
  let `events.amazonaws.com` assume it from that rule (aws:SourceArn = the rule ARN) and whose
  identity policy must allow `events:PutEvents` on that bus.
A refused delivery does not happen; the engine records it as a failed delivery.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from gpufill.local.iam.authorizations import Call
from gpufill.local.iam import trust
from gpufill.local.iam.enforcement import refusal
from gpufill.local.iam.principals import principal

EVENTS = "events.amazonaws.com"


def may_invoke(engine, function_arn: str, rule_arn: str) -> bool:
    """Whether a deployed function's resource policy lets rule `rule_arn` invoke it."""
    if not engine.judge_iam:
        return True
    for deployment in engine.deployments.values():
        for permission in deployment.app.home.permissions:
            if (
                permission.function_arn == function_arn
                and permission.principal == EVENTS
                and permission.action in ("lambda:InvokeFunction", "lambda:*")
                and (permission.source_arn is None or fnmatchcase(rule_arn, permission.source_arn))
            ):
                return True
    return False


def may_put(engine, role_arn: str | None, bus_arn: str, region: str, rule_arn: str | None = None) -> bool:
    """Whether rule `rule_arn`'s target role may put events on another region's bus."""
    if not engine.judge_iam:
        return True
    role = engine.roles.get(role_arn or "")
    if role is None:
        return False  # no role, or one nothing deployed: EventBridge cannot assume it
    if trust.refusal(engine, role, trust.EVENTS, rule_arn) is not None:
        return False  # EventBridge cannot assume it for this rule
    caller = principal(role, "events", engine.account)
    call = Call("events", "PutEvents", {"Entries": [{"EventBusName": bus_arn}]}, region, engine.account)
    from gpufill.local.iam.world import engine_world

    return refusal(caller, call, engine_world(engine), engine.iam) is None
