"""tests/infra: the CDK app synthesized once per session, exactly as `npx cdk synth` builds it.

Synthesis needs no AWS credentials and no Docker: the account and region are fixed in
context, and the Lambda code is a plain directory asset.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "cdk"))
sys.path.insert(0, str(Path(__file__).parent))  # infra_helpers


def _silence_node_end_of_life_banner() -> None:
    """jsii prints a banner on an end-of-life Node unless this variable lists that major version."""
    try:
        major = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return
    major = major.strip().lstrip("v").split(".")[0]
    name = "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"
    listed = [v for v in os.environ.get(name, "").split(",") if v.strip()]
    if major.isdigit() and major not in listed:
        os.environ[name] = ",".join([*listed, major])


@pytest.fixture(scope="session", autouse=True)
def _quiet_node() -> None:
    """Before any test here imports aws_cdk (which starts jsii's Node runtime). Every module of
    tests/infra imports the CDK in its tests, not at the top: every pytest-xdist worker collects
    every module, and only the one worker that runs tests/infra (tests/support/schedule.py) should
    pay for a Node runtime and `node --version`."""
    _silence_node_end_of_life_banner()


from infra_helpers import ACCOUNT, REGION  # noqa: E402


@dataclass(frozen=True)
class Synthesized:
    stack: Any
    outdir: Path
    template_path: Path
    template: Any  # aws_cdk.assertions.Template
    json: dict
    validation_report: dict

    def resources(self, kind: str) -> dict[str, dict]:
        return {k: v for k, v in self.json["Resources"].items() if v["Type"] == kind}

    def asset_dir(self, s3_key: str) -> Path:
        """The staged directory of a file asset, from the S3 key a resource points at."""
        return self.outdir / f"asset.{s3_key.removesuffix('.zip')}"


@pytest.fixture(scope="session")
def synthesized(_quiet_node, tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    from aws_cdk.assertions import Template
    from gpufill_stack.deployment import build_app, new_app

    outdir = tmp_path_factory.mktemp("cdk.out")
    app = new_app(context={"account": ACCOUNT, "region": REGION}, outdir=str(outdir))
    stack = build_app(app)
    app.synth()  # raises if cdk-nag reports any finding that is not acknowledged
    template_path = outdir / f"{stack.artifact_id}.template.json"
    document = json.loads(template_path.read_text())
    return Synthesized(
        stack=stack,
        outdir=outdir,
        template_path=template_path,
        template=Template.from_json(document),
        json=document,
        validation_report=json.loads((outdir / "validation-report.json").read_text()),
    )


@pytest.fixture(scope="session")
def task_functions(synthesized: Synthesized) -> dict[str, tuple[str, dict]]:
    """ASL placeholder -> (logical id, resource) of its Lambda, matched by function name."""
    from gpufill import constants

    env = synthesized.stack.node.try_get_context("env")
    by_name = {
        r["Properties"].get("FunctionName"): (logical_id, r)
        for logical_id, r in synthesized.resources("AWS::Lambda::Function").items()
    }
    return {p: by_name[constants.function_name(env, p)] for p in constants.LAMBDA_TASKS}
