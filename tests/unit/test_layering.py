"""The tree keeps its promises: policy is pure, models stand below policy, and nothing Lambda loads
imports the local engine or the CLI."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "functions" / "gpufill"
LAMBDA_SIDE = ["policy", "models", "handlers", "adapters", "bootstrap", "catalog"]


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", sorted((PACKAGE / "policy").glob("*.py")), ids=lambda p: p.name)
def test_policy_imports_no_aws_sdk(path):
    assert not {m for m in imports(path) if m.split(".")[0] in ("boto3", "botocore", "moto")}


@pytest.mark.parametrize(
    "path", sorted(p for folder in LAMBDA_SIDE for p in (PACKAGE / folder).glob("*.py")), ids=lambda p: p.name
)
def test_lambda_code_never_imports_the_local_engine_or_cli(path):
    banned = {m for m in imports(path) if m.startswith(("gpufill.local", "gpufill.cli", "moto"))}
    assert not banned


@pytest.mark.parametrize("path", sorted((PACKAGE / "models").glob("*.py")), ids=lambda p: p.name)
def test_models_import_nothing_from_policy(path):
    # The rules a model checks live with the model; policy reads models, never the other way round.
    assert not {m for m in imports(path) if m.startswith("gpufill.policy")}


@pytest.mark.parametrize("mode", ["fleet", "exact"])
def test_the_request_goes_down_the_layers_through_one_launch_step(mode):
    # LaunchBatch decides, calls and reads (policy/launch_step.py): the request enters policy once
    # and never comes back up; tools/param_walk.py follows it (docs/architecture.md#the-layers).
    param_walk = pytest.importorskip("tools.param_walk")  # absent from the mutation staging copy
    walked = param_walk.walk("gpufill.handlers.launch_batch.handler", "request", {"launch_mode": mode, "refill": None})
    got = param_walk.figures(walked)
    assert got["returns"] <= 3 and got["climbs"] == 0, walked
