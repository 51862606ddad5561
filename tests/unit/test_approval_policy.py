"""The approval request a person reads before anything is terminated, and how their answer is read."""

from datetime import UTC, datetime

import pytest

from gpufill.models.teardown import Refusal, Teardown, TeardownInstance, TeardownTarget
from gpufill.policy import approval

ARN = "arn:aws:states:eu-central-1:123456789012:execution:gpufill-provisioner-prod:tear-1"
EXPIRES = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)


def machine(n: int, **fields) -> TeardownInstance:
    return TeardownInstance(**{"instance_id": f"i-{n:017x}", "region": "us-west-2", "availability_zone": "us-west-2a",
                               "instance_type": "g6.xlarge", "market": "spot", "state": "running",
                               "hourly_price": 0.5, "launched_at": "2026-03-01T10:00:00+00:00", **fields})


def teardown(instances, *, target=None, refused=(), requested_by="ana@example.com", cost=None) -> Teardown:
    return Teardown(request_id="tear-1", status="AWAITING_APPROVAL", target=target or TeardownTarget(request_id="run-a"),
                    requested_by=requested_by, instances=list(instances), refused=list(refused),
                    hourly_cost=cost if cost is not None else round(sum(i.hourly_price or 0 for i in instances), 4))


def body_of(found: Teardown) -> list[str]:
    return approval.message(found, execution_arn=ARN, task_token="tok", expires=EXPIRES)[1].splitlines()


def test_the_message_says_what_will_be_terminated_who_asked_and_what_it_costs():
    subject, body = approval.message(teardown([machine(1), machine(2, hourly_price=0.25)]), execution_arn=ARN,
                                     task_token="tok", expires=EXPIRES)
    assert subject == "gpufill: approve terminating 2 instance(s)? (tear-1)"
    lines = body.splitlines()
    assert lines[:6] == [
        "gpufill teardown tear-1 asks to terminate 2 instance(s): every instance of request run-a.",
        "Asked by: ana@example.com",
        "Costing now: $0.7500/h",
        "This approval expires at 2026-03-01T13:00:00+00:00; after that nothing is terminated.",
        "",
        "Instances:",
    ]
    assert lines[6] == ("  i-00000000000000001  us-west-2       us-west-2a       g6.xlarge     spot      running  "
                        "$0.5000/h  launched 2026-03-01T10:00:00+00:00")


def test_a_teardown_by_ids_without_an_asker_and_with_unknown_prices_says_so():
    found = teardown([machine(1, hourly_price=None, recorded=False, availability_zone=None, instance_type=None,
                              market=None, launched_at=None)],
                     target=TeardownTarget(instance_ids=["i-00000000000000001", "i-00000000000000002"]),
                     requested_by=None, cost=0.0)
    lines = body_of(found)
    assert lines[0].endswith("1 instance(s): 2 instance id(s) given by hand.")
    assert lines[1] == "Asked by: not given (requested_by was not set)"
    assert lines[2] == "Costing now: $0.0000/h (prices of unrecorded instances unknown)"
    assert lines[6] == ("  i-00000000000000001  us-west-2       -                -             -         running  "
                        "price unknown  launched ?")


def test_a_long_list_is_cut_at_50_with_the_number_left_out():
    lines = body_of(teardown([machine(n) for n in range(1, 53)]))
    listed = [line for line in lines if line.startswith("  i-")]
    assert len(listed) == 50 and listed[-1].startswith("  i-00000000000000032")
    assert "  ... and 2 more (see the execution input and the instances table)" in lines
    assert not [line for line in body_of(teardown([machine(n) for n in range(1, 51)])) if "more (see" in line]


def test_refused_instances_are_listed_as_left_alone_with_the_reason():
    refused = [Refusal(instance_id=f"i-{n:017x}", reason="not-managed", detail="not tagged") for n in range(60)]
    lines = body_of(teardown([machine(1)], refused=refused))
    start = lines.index("Left alone (gpufill will not terminate these):")
    assert lines[start - 1] == "" and lines[start + 1] == "  i-00000000000000000  not-managed: not tagged"
    assert len([line for line in lines if "not-managed: not tagged" in line]) == 50
    assert "Left alone (gpufill will not terminate these):" not in body_of(teardown([machine(1)]))


def test_the_message_ends_with_the_commands_that_answer_it():
    lines = body_of(teardown([machine(1)]))
    assert lines[-8:] == [
        "",
        "To approve:",
        f"  gpufill approve {ARN}",
        "To reject:",
        f"  gpufill reject {ARN} --reason 'WHY'",
        "",
        "Break-glass, for an administrator allowed states:SendTaskSuccess (records the approver as typed) "
        "(any decision other than exactly \"approved\" is a rejection):",
        "  aws stepfunctions send-task-success --region eu-central-1 --task-token tok "
        "--task-output '{\"decision\":\"approved\",\"approver\":\"YOUR-NAME\"}'",
    ]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [({"decision": "approved", "approver": "  ana  ", "reason": " done "}, ("approved", "approved", "ana", "done")),
     ({"decision": "no", "approver": "", "reason": "   "}, ("rejected", "no", "unknown (no approver in the answer)", None)),
     ({"decision": ["approved"], "approver": {"name": "bob"}}, ("rejected", '["approved"]', '{"name": "bob"}', None)),
     ({"decision": None}, ("rejected", None, "unknown (no approver in the answer)", None)),
     ({}, ("rejected", None, "unknown (no approver in the answer)", None)),
     (["approved"], ("rejected", None, "unknown (no approver in the answer)", None))],
)
def test_the_answer_is_recorded_as_sent_trimmed_and_only_exactly_approved_approves(answer, expected):
    assert approval.decide(answer) == expected


def test_free_text_is_cut_at_500_characters():
    decision, sent, approver, reason = approval.decide({"decision": "d" * 600, "approver": "a" * 501, "reason": "r" * 499})
    assert (len(sent), len(approver), len(reason)) == (500, 500, 499)


def test_the_deadline_is_the_timeout_after_entering_and_the_region_comes_from_the_arn():
    entered = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert approval.deadline(entered, 3600) == EXPIRES
    assert approval.execution_region(ARN) == "eu-central-1"
    assert approval.execution_region("tear-1") == ""
    assert approval.execution_region("arn:aws:states") == ""
    assert approval.execution_region("arn:aws:states:ap-south-1") == "ap-south-1"


def test_an_answer_carries_a_reason_only_when_one_is_given():
    assert approval.answer_json("rejected", "bob", "too soon") == '{"decision":"rejected","approver":"bob","reason":"too soon"}'
    assert approval.answer_json("approved", "ana") == '{"decision":"approved","approver":"ana"}'
    assert approval.answer_json("approved", "ana", "") == '{"decision":"approved","approver":"ana"}'


def test_the_subject_fits_the_notification_limit_and_refusals_keep_the_message_whole():
    found = teardown([machine(1)], refused=[Refusal(instance_id="i-9", reason="gone", detail="no such instance")])
    found = found.model_copy(update={"request_id": "t" * 80})
    subject, body = approval.message(found, execution_arn=ARN, task_token="tok", expires=EXPIRES)
    assert len(subject) <= 100
    assert body.startswith(f"gpufill teardown {'t' * 80} asks to terminate 1 instance(s)")


def test_a_teardown_of_everything_says_so_in_capitals():
    found = teardown([machine(1), machine(2)], target=TeardownTarget(all=True))
    assert body_of(found)[0] == (
        "gpufill teardown tear-1 asks to terminate 2 instance(s): EVERY live instance of this deployment, of every request.")


HEAD = "gpufill: approve terminating 3 instance(s)? ("


def test_an_execution_name_that_just_fits_is_kept_whole_in_a_99_character_subject():
    name = "n" * (99 - len(HEAD) - 1)
    assert approval.subject_line(3, name) == HEAD + name + ")" and len(HEAD + name + ")") == 99


def test_one_character_more_and_the_name_is_cut_with_an_ellipsis():
    name = "n" * (99 - len(HEAD))
    subject = approval.subject_line(3, name)
    assert subject == HEAD + name[: 99 - len(HEAD) - 4] + "...)" and len(subject) == 99


def test_the_note_of_a_teardown_given_back_says_per_request_what_became_of_its_maintenance():
    from gpufill.policy import approval as policy

    assert policy.maintenance_note({}) is None
    assert policy.maintenance_note({"b": ["b-refill-1", "b-refill-2"], "a": "td-8, td-9", "c": []}) == (
        "request a stays without refills while teardown(s) td-8, td-9 stop it; "
        "request b is maintained again; refill(s) started again: b-refill-1, b-refill-2; "
        "request c is maintained again")
