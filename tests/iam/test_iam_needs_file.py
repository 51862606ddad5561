"""catalog/iam_needs.json is what `gpufill doctor` asks a deployed stack's IAM: it must be what
the runs need today, written the same way every time, under names doctor can find on AWS."""

from __future__ import annotations

import json
import re

from gpufill.local.iam import report


def test_the_committed_needs_are_what_the_runs_need_now():
    written = report.needs_document(report.measure(report.run_paths()))
    committed = json.loads(report.NEEDS_FILE.read_text())
    assert committed == json.loads(json.dumps(written)), (
        "catalog/iam_needs.json is out of date: run `make iam-report` and commit the file"
    )
    text = json.dumps(committed)
    # Nothing that differs between runs or deployments: ids and tokens are placeholders.
    ids = set(re.findall(r"\b(?:i|lt|subnet|sg|vpc|fleet)-[0-9a-f-]{8,}", text))
    assert ids <= {"i-0123456789abcdef0", "lt-0123456789abcdef0", "subnet-0123456789abcdef0", "sg-0123456789abcdef0",
                   "vpc-0123456789abcdef0", "fleet-00000000-0000-0000-0000-000000000000"}, ids
    assert set(re.findall(r"gpufill-[0-9a-f]{40}-\d+", text)) <= {"gpufill-" + "0" * 40 + "-1"}
    assert ":dynamodb:us-east-1:" not in text and ":dynamodb:${HomeRegion}:" in text
    # Every principal is one doctor can find a role for.
    assert set(committed["principals"]) >= {"Instance", "Scheduler", "StateMachine", "EventForwarding", "LaunchBatch"}
    assert not [p for p in committed["principals"] if p.startswith("gpufill-")]
