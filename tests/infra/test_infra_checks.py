"""cdk-nag (AwsSolutions) and cfn-lint on the synthesized template."""

from __future__ import annotations

import json

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


def test_cfn_lint_reports_no_errors(synthesized):
    from cfnlint.api import ManualArgs, lint_file

    matches = lint_file(synthesized.template_path, ManualArgs(regions=[REGION, "ap-northeast-1"]))
    errors = [m for m in matches if m.rule.id.startswith("E")]
    assert not errors, "\n".join(f"{m.rule.id} {m.message} at {'/'.join(map(str, m.path))}" for m in errors)
