"""The SNS topic's and the S3 bucket's own policies, judged with the caller's identity as AWS does:
within the account the identity policy's Allow suffices unless the resource policy denies."""

from __future__ import annotations

import copy

import pytest
from gpufill import constants
from gpufill.local.iam.authorizations import Call
from gpufill.local.iam.enforcement import Judgements, refusal, refusal_message
from gpufill.local.iam.principals import principal

ACCOUNT = "123456789012"


class PoliciesOnly:
    """A world that knows resource policies only (the calls judged here read nothing else)."""

    def __init__(self, policies: dict[str, dict]):
        self.policies = policies

    def resource_policy(self, arn: str) -> dict | None:
        return self.policies.get(arn) or self.policies.get("arn:aws:s3:::" + arn.split(":::", 1)[-1].split("/", 1)[0])


def _deny(action: str, resource: str, role_arn: str) -> dict:
    return {"Sid": "NotThisRole", "Effect": "Deny", "Principal": {"AWS": role_arn}, "Action": action,
            "Resource": resource}


def _topic(app):
    [(topics, document)] = app.home.topic_policies
    return topics[0], document


def test_the_deployed_topic_policy_lets_reminders_publish_and_a_deny_in_it_refuses(app, evaluator):
    topic, document = _topic(app)
    caller = principal(app.home.functions["RemindApprovers"].role, "RemindApprovers", ACCOUNT)
    publish = Call("sns", "Publish", {"TopicArn": topic, "Message": "m"}, "us-east-1", ACCOUNT)
    assert refusal(caller, publish, PoliciesOnly({topic: document}), Judgements(), evaluator) is None

    denying = copy.deepcopy(document)
    denying["Statement"].append(_deny("sns:Publish", topic, caller.role_arn))
    refused = refusal(caller, publish, PoliciesOnly({topic: denying}), Judgements(), evaluator)
    assert refused is not None and refused.result == "ExplicitlyDenied"
    assert refusal_message(caller, refused, action_label="SNS:Publish").endswith(
        f"SNS:Publish on resource: {topic} with an explicit deny in a resource-based policy")


def test_the_topic_policy_alone_does_not_let_a_role_publish(app, evaluator):
    # Same account: a resource policy naming the role would allow it; the deployed one names only
    # CloudWatch, so a role without the identity grant stays refused.
    topic, document = _topic(app)
    caller = principal(app.home.functions["LaunchBatch"].role, "LaunchBatch", ACCOUNT)
    publish = Call("sns", "Publish", {"TopicArn": topic, "Message": "m"}, "us-east-1", ACCOUNT)
    refused = refusal(caller, publish, PoliciesOnly({topic: document}), Judgements(), evaluator)
    assert refused is not None and refused.result == "ImplicitlyDenied"


@pytest.mark.parametrize(("secure", "result"), [("true", None), ("false", "ExplicitlyDenied")])
def test_the_bucket_policy_refuses_plain_http_only(app, evaluator, secure, result):
    bucket = app.home.functions["LaunchBatch"].environment[constants.ENV_STARTUP_BUCKET]
    [document] = [d for name, d in app.home.bucket_policies if name == bucket]
    instance = principal(app.instance_role, "i-0aaa", ACCOUNT)
    read = Call("s3", "GetObject", {"Bucket": bucket, "Key": f"{constants.STARTUP_SCRIPTS_PREFIX}startup.sh"},
                "us-west-2", ACCOUNT)
    world = PoliciesOnly({f"arn:aws:s3:::{bucket}": document})
    if secure == "false":
        # What AWS would see from a client over plain HTTP: enforce_ssl's Deny matches.
        flipped = copy.deepcopy(document)
        for statement in flipped["Statement"]:
            statement.get("Condition", {}).get("Bool", {}).update({"aws:SecureTransport": "true"})
        world = PoliciesOnly({f"arn:aws:s3:::{bucket}": flipped})
    refused = refusal(instance, read, world, Judgements(), evaluator)
    assert (refused.result if refused else None) == result


def test_a_bucket_policy_denying_the_instance_role_refuses_its_read(app, evaluator):
    bucket = app.home.functions["LaunchBatch"].environment[constants.ENV_STARTUP_BUCKET]
    [document] = [copy.deepcopy(d) for name, d in app.home.bucket_policies if name == bucket]
    instance = principal(app.instance_role, "i-0aaa", ACCOUNT)
    document["Statement"].append(_deny("s3:GetObject", f"arn:aws:s3:::{bucket}/*", app.instance_role.arn))
    read = Call("s3", "GetObject", {"Bucket": bucket, "Key": f"{constants.STARTUP_SCRIPTS_PREFIX}startup.sh"},
                "us-west-2", ACCOUNT)
    refused = refusal(instance, read, PoliciesOnly({f"arn:aws:s3:::{bucket}": document}), Judgements(), evaluator)
    assert refused is not None and refused.result == "ExplicitlyDenied"


def test_resource_policies_edited_in_the_account_are_judged_and_a_denying_bucket_stops_startup(judged_account):
    import json

    import boto3
    from gpufill.local.iam.world import engine_world
    from tests.iam.test_iam_runs import ONE_REGION, request

    with judged_account(ONE_REGION) as (engine, judgements):
        app = engine.deployments["local"].app
        world = engine_world(engine)
        [(topics, topic_policy)] = app.home.topic_policies
        assert world.resource_policy(topics[0]) == topic_policy  # deployed as synthesized
        # The topic's policy edited as SetTopicAttributes would: the reminders' publish is refused.
        reminders = principal(app.home.functions["RemindApprovers"].role, "RemindApprovers", ACCOUNT)
        publish = Call("sns", "Publish", {"TopicArn": topics[0], "Message": "m"}, "us-east-1", ACCOUNT)
        assert refusal(reminders, publish, world, Judgements()) is None
        denying = copy.deepcopy(topic_policy)
        denying["Statement"].append(_deny("sns:Publish", topics[0], reminders.role_arn))
        boto3.client("sns", region_name="us-east-1").set_topic_attributes(
            TopicArn=topics[0], AttributeName="Policy", AttributeValue=json.dumps(denying))
        refused = refusal(reminders, publish, world, Judgements())
        assert refused is not None and refused.result == "ExplicitlyDenied"
        bucket = app.home.functions["LaunchBatch"].environment[constants.ENV_STARTUP_BUCKET]
        [document] = [copy.deepcopy(d) for name, d in app.home.bucket_policies if name == bucket]
        assert world.resource_policy(f"arn:aws:s3:::{bucket}/scripts/startup.sh") == document
        document["Statement"].append(_deny("s3:GetObject", f"arn:aws:s3:::{bucket}/*", app.instance_role.arn))
        boto3.client("s3", region_name="us-east-1").put_bucket_policy(Bucket=bucket, Policy=json.dumps(document))
        execution = engine.run(request(launch_mode="fleet", ready_timeout="PT3M"), name="bucket-denies")
    # Launched and recorded, but startup.sh could not be read: it never ran, nothing serves.
    assert execution.output["status"] == "FULFILLED", execution.cause
    assert execution.output["instances_serving"] == 0
    refused = [j for j in judgements.refusals if j.action == "s3:GetObject"]
    assert refused and all(j.principal == app.instance_role.name for j in refused)
