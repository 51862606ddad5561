"""The hourly reminder of a teardown still waiting for a person's answer (approval.reminder): short,
within SNS's 99-character subject, and with the same commands as the first message."""

from datetime import UTC, datetime

from gpufill.constants import TRIGGER_MAX_LIFETIME
from gpufill.models.teardown import Teardown, TeardownInstance, TeardownTarget
from gpufill.policy import approval

ARN = "arn:aws:states:eu-central-1:123456789012:execution:gpufill-provisioner-prod:tear-1"
EXPIRES = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)
HEAD = "gpufill reminder: approve terminating 3 instance(s)? ("


def machine(n: int) -> TeardownInstance:
    return TeardownInstance(instance_id=f"i-{n:017x}", region="us-west-2", availability_zone="us-west-2a",
                            instance_type="g6.xlarge", market="spot", state="running", hourly_price=0.5)


def teardown(count=2, listed=2, name="tear-1", **fields) -> Teardown:
    return Teardown(request_id=name, status="AWAITING_APPROVAL", target=TeardownTarget(request_id="run-a"),
                    instance_count=count, instances=[machine(n) for n in range(listed)], hourly_cost=0.75, **fields)


def test_a_reminder_says_what_still_waits_what_it_costs_and_how_to_answer():
    subject, body = approval.reminder(teardown(), execution_arn=ARN, task_token="tok 1", expires=EXPIRES)
    assert subject == "gpufill reminder: approve terminating 2 instance(s)? (tear-1)"
    assert body.splitlines() == [
        "REMINDER: teardown tear-1 still waits for an answer; nothing is terminated until one comes.",
        "2 instance(s) keep running, $0.7500/h. The approval expires at 2026-03-01T13:00:00+00:00.",
        "",
        "To approve:",
        f"  gpufill approve {ARN}",
        "To reject:",
        f"  gpufill reject {ARN} --reason 'WHY'",
        "Break-glass, for an administrator allowed states:SendTaskSuccess (records the approver as typed):",
        "  aws stepfunctions send-task-success --region eu-central-1 --task-token 'tok 1' "
        "--task-output '{\"decision\":\"approved\",\"approver\":\"YOUR-NAME\"}'",
    ]


def test_the_count_is_every_instance_the_teardown_ends_not_only_those_listed():
    _, body = approval.reminder(teardown(count=120, listed=2), execution_arn=ARN, task_token="t", expires=EXPIRES)
    assert body.splitlines()[1].startswith("120 instance(s) keep running")
    subject, _ = approval.reminder(teardown(count=0, listed=3), execution_arn=ARN, task_token="t", expires=EXPIRES)
    assert subject.startswith(HEAD)


def test_a_spend_guard_teardown_says_first_why_it_was_asked():
    asked = teardown(trigger=TRIGGER_MAX_LIFETIME, expired_at="2026-03-01T12:00:00+00:00")
    lines = approval.reminder(asked, execution_arn=ARN, task_token="t", expires=EXPIRES)[1].splitlines()
    assert lines[:4] == [
        "The max_lifetime of request run-a passed at 2026-03-01T12:00:00+00:00: gpufill's spend guard asks to end it.",
        "Nothing is terminated unless you approve; until the deadline below this is sent again every hour.",
        "",
        "REMINDER: teardown tear-1 still waits for an answer; nothing is terminated until one comes.",
    ]


def test_a_subject_that_just_fits_is_kept_whole_and_one_character_more_is_cut_to_99():
    name = "n" * (99 - len(HEAD) - 1)
    subject, _ = approval.reminder(teardown(count=3, name=name), execution_arn=ARN, task_token="t", expires=EXPIRES)
    assert subject == HEAD + name + ")" and len(subject) == 99
    longer = name + "m"
    subject, _ = approval.reminder(teardown(count=3, name=longer), execution_arn=ARN, task_token="t", expires=EXPIRES)
    assert subject == HEAD + name[:-3] + "...)" and len(subject) == 99
