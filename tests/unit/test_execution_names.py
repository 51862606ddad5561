"""The execution names gpufill keeps for itself are refused to a person's run, and only those."""

import pytest

from gpufill.policy.execution_names import reserved_problem

PROVISION = {"action": "provision", "count": 1}


@pytest.mark.parametrize("name", ["train", "train-c", "train-cx", "train-c-3", "c3", "train-expire", "train-refill-x",
                                  "train-refill", "refill-i-0abc", "expired-train"])
def test_ordinary_names_are_free(name):
    assert reserved_problem(name, PROVISION) is None


@pytest.mark.parametrize("name", ["train-c1", "train-c12"])
def test_a_continued_executions_form_is_kept_for_every_action(name):
    for request in (PROVISION, {"action": "teardown", "request_id": "x"}):
        assert "wait_for_capacity keeps for itself" in reserved_problem(name, request)


def test_a_lifetimes_teardown_may_end_in_expired_and_nothing_else_may():
    assert reserved_problem("train-expired", {"action": "teardown", "request_id": "train"}) is None
    assert reserved_problem("train-expired", PROVISION) == (
        "'train-expired' ends in '-expired', which max_lifetime keeps for the teardown it starts when a request expires; "
        "choose another name"
    )
    assert "max_lifetime keeps" in reserved_problem("train-expired", {"count": 1})  # provision is the default action


def test_a_refills_form_is_kept_for_the_refill_run():
    name = "train-refill-i-0123456789abcdef0"
    assert reserved_problem(name, PROVISION) == (
        f"{name!r} holds '-refill-i-', which refills keep for the run that replaces an instance EC2 took back; "
        "choose another name"
    )
    assert reserved_problem(name, {**PROVISION, "refill": {"request_id": "train", "replaces": ["i-0123456789abcdef0"]}}) is None
