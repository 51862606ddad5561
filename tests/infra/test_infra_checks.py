"""cdk-nag (AwsSolutions) and cfn-lint on the synthesized template."""

from __future__ import annotations

import json

from cfnlint.api import ManualArgs, lint_file
from gpufill_stack.paths import STATEMACHINE_DIR

from infra_helpers import REGION

ACK_KEY = "aws:cdk:acknowledged-rules"


def test_cdk_nag_has_no_finding_left(synthesized):
    (report,) = [r for r in synthesized.validation_report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert report["conclusion"] == "success"
    assert [v["ruleName"] for v in report.get("violations", [])] == []


def test_every_acknowledgment_has_a_reason_and_is_used(synthesized):
    (report,) = [r for r in synthesized.validation_report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    suppressed = report["suppressedViolations"]
    assert all(len(v["reason"]) >= 40 for v in suppressed)
    used = {(v["acknowledgedAt"], v["acknowledgedId"]) for v in suppressed}
    metadata = json.loads((synthesized.outdir / f"{synthesized.stack.artifact_id}.metadata.json").read_text())
    made = {
        (path.lstrip("/"), rule)
        for path, entries in metadata.items()
        for entry in entries
        if entry["type"] == ACK_KEY
        for rule in entry["data"]
    }
    assert made, "acknowledgments are recorded in the stack metadata"
    assert made - used == set(), "acknowledgments that no finding needs any more: remove them"


def _succeed_output_path(match) -> bool:
    """cfn-lint 1.58's Step Functions schema omits InputPath/OutputPath on Succeed states,
    which the Amazon States Language allows (asl-validator checks the file itself)."""
    if match.rule.id != "E3601" or "was unexpected" not in match.message:
        return False
    path = [str(p) for p in match.path]
    if "States" not in path[:-1]:
        return False
    state = path[path.index("States") + 1]
    field = path[-1]
    definitions = [json.loads(p.read_text()) for p in STATEMACHINE_DIR.glob("*.asl.json")]
    return field in ("InputPath", "OutputPath") and any(
        _find_state(d, state, "Succeed") for d in definitions
    )


def _find_state(node, name: str, kind: str) -> bool:
    if isinstance(node, dict):
        states = node.get("States")
        if isinstance(states, dict) and states.get(name, {}).get("Type") == kind:
            return True
        return any(_find_state(v, name, kind) for v in node.values())
    if isinstance(node, list):
        return any(_find_state(v, name, kind) for v in node)
    return False


def test_cfn_lint_reports_no_errors(synthesized):
    matches = lint_file(synthesized.template_path, ManualArgs(regions=[REGION, "ap-northeast-1"]))
    errors = [m for m in matches if m.rule.id.startswith("E") and not _succeed_output_path(m)]
    assert not errors, "\n".join(f"{m.rule.id} {m.message} at {'/'.join(map(str, m.path))}" for m in errors)
