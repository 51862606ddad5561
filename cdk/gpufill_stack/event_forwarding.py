"""EC2's interruption warnings and ending state changes, from every deployed region, to StartRefill.

EventBridge rules only see their own region's events, so each deployed region other than the home
region gets a small stack (EventForwardingStack, one EventForwarding construct) whose rules put
the events on the home region's default event bus; there, InterruptionRules invoke StartRefill
(for the home region's own events and the forwarded ones alike). `npx cdk deploy --all` deploys
every stack. The event patterns and rule names are gpufill.constants'.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct
from gpufill import constants

# EventBridge retries a failed delivery; StartRefill is idempotent, so every try is safe.
DELIVERY_RETRIES = 8
DELIVERY_MAX_AGE = Duration.hours(2)


def home_bus_arn(scope: Construct, home_region: str) -> str:
    stack = Stack.of(scope)
    return f"arn:{stack.partition}:events:{home_region}:{stack.account}:event-bus/default"


def _rules(scope: Construct, env: str, target: events.IRuleTarget) -> dict[str, events.Rule]:
    return {
        kind: events.Rule(
            scope,
            f"{kind.title().replace('-', '')}Rule",
            rule_name=constants.interruption_rule_name(env, kind),
            description=f"gpufill {env}: EC2 {kind.replace('-', ' ')} (maintain replaces reclaimed instances)",
            event_pattern=events.EventPattern(
                source=pattern["source"], detail_type=pattern["detail-type"], detail=pattern.get("detail")
            ),
            targets=[target],
        )
        for kind, pattern in constants.INTERRUPTION_EVENT_PATTERNS.items()
    }


class InterruptionRules(Construct):
    """The home region's rules: EC2's events, its own and those forwarded, invoke StartRefill."""

    def __init__(self, scope: Construct, construct_id: str, *, env: str, start_refill: lambda_.IFunction) -> None:
        super().__init__(scope, construct_id)
        target = targets.LambdaFunction(start_refill, retry_attempts=DELIVERY_RETRIES, max_event_age=DELIVERY_MAX_AGE)
        self.rules = _rules(self, env, target)


class EventForwarding(Construct):
    """One region's rules, forwarding to the home region's default event bus with a role that may
    put events on that bus only."""

    def __init__(self, scope: Construct, construct_id: str, *, env: str, home_region: str) -> None:
        super().__init__(scope, construct_id)
        bus_arn = home_bus_arn(self, home_region)
        self.role = iam.Role(
            self,
            "ForwardingRole",
            # Named, so `gpufill doctor` finds each region's role without reading the region's stack.
            # AWS::Region, not the stack's region: every region deploys the same template.
            role_name=constants.forwarding_role_name(env, Aws.REGION),
            assumed_by=iam.ServicePrincipal("events.amazonaws.com"),
            description=f"gpufill {env}: EventBridge puts EC2 interruption events on {home_region}'s default bus",
        )
        self.role.add_to_policy(iam.PolicyStatement(actions=["events:PutEvents"], resources=[bus_arn]))
        bus = events.EventBus.from_event_bus_arn(self, "HomeBus", bus_arn)
        self.rules = _rules(self, env, targets.EventBus(bus, role=self.role))


class EventForwardingStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, env_name: str, home_region: str, **kwargs: Any) -> None:
        super().__init__(
            scope,
            construct_id,
            description=f"gpufill ({env_name}): forwards EC2 interruption events to {home_region}",
            **kwargs,
        )
        self.forwarding = EventForwarding(self, "EventForwarding", env=env_name, home_region=home_region)
