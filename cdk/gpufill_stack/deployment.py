"""Builds the gpufill app: the stack plus the cdk-nag checks. Used by cdk/app.py and by tests/infra."""

from __future__ import annotations

import json
import os
from typing import Any

from aws_cdk import App, Environment, Validations
from cdk_nag import AwsSolutionsChecks
from gpufill import constants

from gpufill_stack.event_forwarding import EventForwardingStack
from gpufill_stack.paths import CDK_JSON
from gpufill_stack.settings import SYNTH_ONLY_ACCOUNT, SYNTH_ONLY_REGION, DeploySettings
from gpufill_stack.stack import GpufillStack


def cdk_json_context() -> dict[str, Any]:
    """The context block of cdk.json: gpufill's defaults and the CDK feature flags it relies on."""
    return json.loads(CDK_JSON.read_text()).get("context", {})


def new_app(context: dict[str, Any] | None = None, outdir: str | None = None) -> App:
    """An App with cdk.json's context under any given context.

    The CDK CLI passes cdk.json's context too, and `-c key=value` on top; it wins over
    both. Loading cdk.json here makes a bare `python cdk/app.py` and the tests synthesize
    exactly what `npx cdk synth` does.
    """
    return App(context={**cdk_json_context(), **(context or {})}, outdir=outdir)


def target_environment(app: App) -> Environment:
    """Context `account`/`region`, else the CDK CLI's defaults, else placeholders for a credential-free synth."""
    return Environment(
        account=app.node.try_get_context("account") or os.environ.get("CDK_DEFAULT_ACCOUNT") or SYNTH_ONLY_ACCOUNT,
        region=app.node.try_get_context("region") or os.environ.get("CDK_DEFAULT_REGION") or SYNTH_ONLY_REGION,
    )


def build_app(app: App) -> GpufillStack:
    settings = DeploySettings.from_context(app.node)
    target = target_environment(app)
    stack = GpufillStack(app, constants.stack_name(settings.env), settings=settings, env=target)
    # maintain: every other deployed region forwards EC2's interruption events to this one.
    for region in settings.regions_config.regions:
        if region != target.region:
            EventForwardingStack(
                app,
                constants.forwarding_stack_name(settings.env, region),
                env_name=settings.env,
                home_region=target.region,
                env=Environment(account=target.account, region=region),
            )
    # A finding that is neither fixed nor acknowledged (with its reason) fails the synth.
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stack
