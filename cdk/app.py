#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth` / `npx cdk deploy` run this (see cdk.json)."""

from gpufill_stack.deployment import build_app, new_app

app = new_app()
build_app(app)
app.synth()
