"""gpufill.cli.ids: the one rule for ids a person types (an exact id wins, a unique prefix stands for
its id, an ambiguous one lists the candidates, none is left to the verb)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufill.cli import ids
from gpufill.cli.common import UsageError

NOW = datetime(2026, 12, 2, 21, 0, tzinfo=UTC)
IDS = st.lists(st.text(alphabet="abc-", min_size=1, max_size=6), max_size=8)


def test_an_exact_id_wins_over_the_longer_ids_it_starts():
    assert ids.resolve("my-run", ["my-run", "my-run-2"], "request id") == "my-run"


def test_a_unique_prefix_resolves_and_no_match_is_left_to_the_verb():
    assert ids.resolve("train-2026", ["train-20261202T210841450", "eval-1"], "request id") == "train-20261202T210841450"
    assert ids.resolve("nothing", ["train-1"], "request id") is None
    assert ids.resolve("", ["train-1"], "request id") is None


def test_an_ambiguous_prefix_is_a_usage_error_listing_ten_and_how_many_more():
    known = [f"run-{n:02d}" for n in range(13)]
    with pytest.raises(UsageError) as refused:
        ids.resolve("run-", known, "request id")
    message = str(refused.value)
    assert message.startswith("'run-' is the start of 13 request ids; nothing was started. Type more of the one you mean:")
    assert "  run-00" in message and "  run-09" in message and "run-10" not in message
    assert message.endswith("  ... and 3 more")
    assert refused.value.candidates == sorted(known)
    assert refused.value.fields[0]["field"] == "id"


@given(IDS, st.text(alphabet="abc-", max_size=4))
def test_a_resolved_prefix_is_a_prefix_of_exactly_one_known_id_or_the_id_itself(known, prefix):
    try:
        found = ids.resolve(prefix, known, "id")
    except ids.AmbiguousId as ambiguous:
        assert prefix not in known and len(ambiguous.candidates) > 1
        assert all(c.startswith(prefix) for c in ambiguous.candidates)
        return
    if found is None:
        assert not prefix or not any(k.startswith(prefix) for k in known)
    elif found == prefix:
        assert prefix in known
    else:
        assert [k for k in set(known) if k.startswith(prefix)] == [found]


@pytest.mark.parametrize("name, is_request", [
    ("train", True), ("status-20261202T210841450", False), ("teardown-train-20261202T210841450", False),
    ("train-c2", False), ("train-expired", False), ("train-refill-i-0123456789abcdef0", False),
    ("status", True), ("teardown-plan", True),
])
def test_only_executions_that_run_a_request_of_their_own_are_request_ids(name, is_request):
    assert ids.is_request_name(name) is is_request


def approval(kind: str, name: str, target: dict, **extra) -> dict:
    item = {"execution_name": name, "target": json.dumps(target), "task_token": "t", "deadline": "2026-12-03T21:00:00+00:00"}
    if kind == "purchase":
        item["approval_for"] = "capacity-block-purchase"
    return {**item, **extra}


APPROVALS = [
    approval("teardown", "teardown-train-20261202T210841450", {"request_id": "train"}),
    approval("purchase", "bigrun", {"request_id": "bigrun"}),
    approval("teardown", "teardown-old-20261101T000000000", {"request_id": "old"}, answered_at="2026-11-01T01:00:00+00:00"),
]


@pytest.mark.parametrize("given_, expected", [
    ("teardown:teardown-tr", "teardown:teardown-train-20261202T210841450"),
    ("teardown-tr", "teardown:teardown-train-20261202T210841450"),
    ("tra", "teardown:teardown-train-20261202T210841450"),  # the request it concerns
    ("purch", "purchase:bigrun"),
    ("teardown-ol", "teardown:teardown-old-20261101T000000000"),  # answered: reached, then refused by approve
    ("nope", None),
    ("train", None),  # a whole request id: what approve found for it stands, even with longer names about
])
def test_an_approval_is_found_by_the_start_of_its_id_execution_or_request(given_, expected):
    assert ids.approval_ref(given_, APPROVALS, NOW) == expected


def test_a_prefix_of_two_pending_approvals_lists_their_ids_and_changes_nothing():
    with pytest.raises(ids.AmbiguousId) as refused:
        ids.approval_ref("teardown", APPROVALS + [approval("teardown", "teardown-x-1", {"all": True})], NOW)
    assert refused.value.candidates == ["teardown:teardown-train-20261202T210841450", "teardown:teardown-x-1"]
    assert "nothing changed" in str(refused.value)


class _Deployment:
    """What ids reads of a deployment: its executions (Step Functions) and its table, counted."""

    state_machine_arn = "arn:aws:states:us-east-1:123456789012:stateMachine:gpufill-provisioner-dev"

    def __init__(self, executions: list[str], items: list[dict]):
        self.executions, self.items, self.calls = executions, items, []

    def execution_arn(self, name: str) -> str:
        return f"arn:aws:states:us-east-1:123456789012:execution:gpufill-provisioner-dev:{name}"

    def client(self, service: str):
        from botocore.exceptions import ClientError

        deployment = self

        class _Paginator:
            def paginate(self, **kwargs):
                deployment.calls.append("ListExecutions")
                return [{"executions": [{"name": n} for n in deployment.executions]}]

        class _StepFunctions:
            def describe_execution(self, executionArn):
                deployment.calls.append("DescribeExecution")
                if executionArn.rsplit(":", 1)[-1] not in deployment.executions:
                    raise ClientError({"Error": {"Code": "ExecutionDoesNotExist"}}, "DescribeExecution")
                return {}

            def get_paginator(self, name):
                return _Paginator()

        return _StepFunctions()

    def table(self):
        deployment = self

        class _Table:
            def scan(self, **kwargs):
                deployment.calls.append("Scan")
                return {"Items": deployment.items}

        return _Table()


def test_a_whole_request_id_is_taken_without_listing_and_a_start_is_resolved_among_requests_only():
    deployment = _Deployment(["train-20261202T210841450", "status-20261202T210841450", "train-20261202T210841450-c1"],
                             [{"instance_id": "i-0123456789abcdef0", "request_id": "old-run"}])
    assert ids.request_id(deployment, "train-20261202T210841450") == "train-20261202T210841450"
    assert deployment.calls == ["DescribeExecution"]
    assert ids.request_id(deployment, "train") == "train-20261202T210841450"  # its continuation is the same request
    assert ids.request_id(deployment, "st") == "st"  # a status execution is no request: left to the verb
    assert ids.request_id(deployment, "old") == "old-run"  # known from the records alone
    assert ids.instance_ids(deployment, ["i-0123"]) == ["i-0123456789abcdef0"]
    calls = len(deployment.calls)
    assert ids.instance_ids(deployment, ["i-0123456789abcdef0"]) == ["i-0123456789abcdef0"]
    assert len(deployment.calls) == calls  # a whole id reads nothing
    assert ids.instance_ids(deployment, ["i-12345678"]) == ["i-12345678"]  # an old-style id may be whole


def test_an_instance_id_start_that_starts_no_recorded_id_is_refused_naming_it():
    deployment = _Deployment([], [{"instance_id": "i-0123456789abcdef0", "request_id": "old-run"}])
    with pytest.raises(UsageError) as refused:
        ids.instance_ids(deployment, ["i-0123", "i-0fff"])
    assert str(refused.value).startswith("'i-0fff': not a whole instance id (i- and 17 hex digits) and the start of none")
    assert refused.value.fields[0]["field"] == "--instances"
