"""Storage, instance access and notifications."""

from __future__ import annotations

import json

from gpufill import constants

from infra_helpers import as_list, get_att, statements_of_role


def _env(synthesized):
    return synthesized.stack.node.try_get_context("env")


def _table(synthesized, name):
    (table,) = [t for t in synthesized.resources("AWS::DynamoDB::Table").values() if t["Properties"]["TableName"] == name]
    return table


def test_instances_table(synthesized):
    table = _table(synthesized, constants.instances_table_name(_env(synthesized)))
    props = table["Properties"]
    assert table["DeletionPolicy"] == "Retain" and table["UpdateReplacePolicy"] == "Retain"
    assert props["TableName"] == constants.instances_table_name(_env(synthesized))
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["TimeToLiveSpecification"] == {"AttributeName": constants.INSTANCES_TTL_ATTRIBUTE, "Enabled": True}
    assert props["KeySchema"] == [{"AttributeName": constants.INSTANCES_TABLE_KEY, "KeyType": "HASH"}]
    (index,) = props["GlobalSecondaryIndexes"]
    assert index["IndexName"] == constants.INSTANCES_BY_REQUEST_INDEX
    assert index["KeySchema"] == [{"AttributeName": "request_id", "KeyType": "HASH"}]
    assert index["Projection"] == {"ProjectionType": "ALL"}


def test_capacity_table(synthesized):
    props = _table(synthesized, constants.capacity_table_name(_env(synthesized)))["Properties"]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["KeySchema"] == [{"AttributeName": constants.CAPACITY_TABLE_KEY, "KeyType": "HASH"}]
    assert props["TimeToLiveSpecification"] == {"AttributeName": constants.INSTANCES_TTL_ATTRIBUTE, "Enabled": True}
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


def test_regions_parameter_holds_the_context_config(synthesized):
    (parameter,) = synthesized.resources("AWS::SSM::Parameter").values()
    props = parameter["Properties"]
    assert props["Name"] == constants.regions_parameter_name(_env(synthesized))
    assert props["Type"] == "String"
    value = json.loads(props["Value"])
    from gpufill_stack.deployment import cdk_json_context

    assert value["regions"] == cdk_json_context()["regions"]
    assert set(value) <= {"regions", "overrides"}


def test_buckets_block_public_access_encrypt_and_refuse_plain_http(synthesized):
    buckets = synthesized.resources("AWS::S3::Bucket")
    assert len(buckets) == 2
    for props in (b["Properties"] for b in buckets.values()):
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        (rule,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    policies = synthesized.resources("AWS::S3::BucketPolicy").values()
    secured = {
        p["Properties"]["Bucket"]["Ref"]
        for p in policies
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
    }
    assert secured == set(buckets)


def test_startup_bucket_logs_access_and_receives_startup_scripts(synthesized):
    buckets = synthesized.resources("AWS::S3::Bucket")
    logged = [b for b in buckets.values() if "LoggingConfiguration" in b["Properties"]]
    (startup,) = logged
    assert startup["Properties"]["LoggingConfiguration"]["DestinationBucketName"]["Ref"] in buckets
    (deployment,) = synthesized.resources("Custom::CDKBucketDeployment").values()
    assert deployment["Properties"]["DestinationBucketKeyPrefix"] == constants.STARTUP_SCRIPTS_PREFIX
    assert deployment["Properties"]["Prune"] is True


def test_instance_profile_role(synthesized):
    """Session Manager, the startup bucket's two prefixes, and image pull from this account: no
    managed policy (AmazonSSMManagedInstanceCore would let an instance read every SSM parameter)."""
    (profile,) = synthesized.resources("AWS::IAM::InstanceProfile").values()
    (role_ref,) = profile["Properties"]["Roles"]
    role = synthesized.json["Resources"][role_ref["Ref"]]
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    assert "ManagedPolicyArns" not in role["Properties"]
    statements = statements_of_role(synthesized.json, role_ref["Ref"])
    (startup_id,) = [k for k, b in synthesized.resources("AWS::S3::Bucket").items() if "LoggingConfiguration" in b["Properties"]]
    get_object = [s for s in statements if s["Action"] == "s3:GetObject"]
    (statement,) = get_object
    assert as_list(statement["Resource"]) == [
        {"Fn::Join": ["", [get_att(startup_id), f"/{constants.STARTUP_SCRIPTS_PREFIX}*"]]},
        {"Fn::Join": ["", [get_att(startup_id), f"/{constants.MODELS_PREFIX}*"]]},
    ]
    granted = {a for s in statements for a in as_list(s["Action"])}
    assert granted == {
        "s3:GetObject", "s3:ListBucket",
        "ssm:UpdateInstanceInformation",
        "ssmmessages:CreateControlChannel", "ssmmessages:CreateDataChannel",
        "ssmmessages:OpenControlChannel", "ssmmessages:OpenDataChannel",
        "ec2messages:AcknowledgeMessage", "ec2messages:DeleteMessage", "ec2messages:FailMessage",
        "ec2messages:GetEndpoint", "ec2messages:GetMessages", "ec2messages:SendReply",
        "ecr:GetAuthorizationToken", "ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage",
        "ec2:CreateTags",
    }
    assert not any(a.startswith("ssm:GetParameter") for a in granted)
    (pull,) = [s for s in statements if "ecr:BatchGetImage" in as_list(s["Action"])]
    assert ":ecr:*:123456789012:repository/*" in json.dumps(pull["Resource"])


def test_instances_may_tag_only_themselves_and_only_with_their_startup_step(synthesized):
    """startup.sh reports its progress in the tag gpufill:startup-step (ready_timeout): the instance
    role may set that one key, on the calling instance itself, of this deployment; nothing else."""
    (profile,) = synthesized.resources("AWS::IAM::InstanceProfile").values()
    (role_ref,) = profile["Properties"]["Roles"]
    statements = statements_of_role(synthesized.json, role_ref["Ref"])
    (tagging,) = [s for s in statements if "ec2:CreateTags" in as_list(s["Action"])]
    assert tagging["Effect"] == "Allow" and as_list(tagging["Action"]) == ["ec2:CreateTags"]
    assert ":ec2:*:123456789012:instance/*" in json.dumps(tagging["Resource"])
    (own_instance,) = tagging["Condition"]["StringLike"].values()
    assert list(tagging["Condition"]["StringLike"]) == ["ec2:SourceInstanceARN"]
    assert json.dumps(own_instance).endswith(':ec2:*:123456789012:instance/${ec2:InstanceID}"]]}')
    assert {k: v for k, v in tagging["Condition"].items() if k != "StringLike"} == {
        "StringEquals": {
            f"aws:ResourceTag/{constants.TAG_MANAGED}": constants.TAG_MANAGED_VALUE,
            f"aws:ResourceTag/{constants.TAG_DEPLOYMENT}": _env(synthesized),
        },
        "ForAllValues:StringEquals": {"aws:TagKeys": [constants.TAG_STARTUP_STEP]},
    }
    granted = {a for s in statements for a in as_list(s["Action"])}
    assert not {"ec2:DeleteTags", "ec2:DescribeInstances", "ec2:DescribeTags"} & granted


def test_approval_topic_is_encrypted_and_tls_only(synthesized):
    (topic_id, topic), = synthesized.resources("AWS::SNS::Topic").items()
    assert topic["Properties"]["TopicName"] == constants.approval_topic_name(_env(synthesized))
    # The deployment's own key: CloudWatch alarms cannot publish to a topic under aws/sns (docs/operations.md).
    (key_id,) = synthesized.resources("AWS::KMS::Key")
    assert topic["Properties"]["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    (policy,) = synthesized.resources("AWS::SNS::TopicPolicy").values()
    assert policy["Properties"]["Topics"] == [{"Ref": topic_id}]
    assert any(
        s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    )
    assert not synthesized.resources("AWS::SNS::Subscription"), "no approval_email in cdk.json: no subscription"


def test_approval_email_from_context_subscribes():
    from aws_cdk import App, Stack
    from aws_cdk.assertions import Template
    from gpufill_stack.notifications import Notifications

    stack = Stack(App(), "Probe")
    Notifications(stack, "Notifications", env="probe", approval_email="ops@example.com")
    Template.from_stack(stack).has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com"}
    )


def test_outputs(synthesized):
    outputs = synthesized.json["Outputs"]
    (machine_id,) = synthesized.resources("AWS::StepFunctions::StateMachine")
    assert outputs[constants.OUTPUT_STATE_MACHINE_ARN]["Value"] == {"Ref": machine_id}
    for key in (constants.OUTPUT_INSTANCES_TABLE, constants.OUTPUT_STARTUP_BUCKET, constants.OUTPUT_APPROVAL_TOPIC_ARN):
        assert key in outputs
    command = synthesized.stack.resolve(outputs[constants.OUTPUT_START_EXECUTION_COMMAND]["Value"])
    parts = command["Fn::Join"][1]
    assert parts[0].startswith("aws stepfunctions start-execution --region us-east-1 --state-machine-arn ")
    assert parts[1] == {"Ref": machine_id}
    assert parts[2] == " --name my-run --input file://examples/requests/provision-spot.json"
