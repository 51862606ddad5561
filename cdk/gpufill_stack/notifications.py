"""Notifications: the deployment's topic. It asks a person to approve a teardown or a purchase,
and it carries the sweep's findings and the alarms (gpufill_stack.operations).

The topic is encrypted with a key of the deployment's own, not the AWS managed `aws/sns` key:
CloudWatch publishes an alarm to an encrypted topic only when the key's policy lets the
CloudWatch service use it, and the policy of an AWS managed key cannot be changed (SNS
developer guide, "compatibility with event sources from AWS services"). Every publisher in the
account needs kms:GenerateDataKey and kms:Decrypt on it (publish_grant).
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct
from gpufill import constants

# What SNS asks KMS for when it takes a message for an encrypted topic on a publisher's behalf.
PUBLISH_KEY_ACTIONS = ["kms:GenerateDataKey", "kms:Decrypt"]


class Notifications(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, env: str, approval_email: str | None) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.key = kms.Key(
            self,
            "TopicKey",
            description=f"gpufill ({env}): encrypts the notification topic; CloudWatch alarms may use it to publish",
            enable_key_rotation=True,
            pending_window=Duration.days(7),
            removal_policy=RemovalPolicy.DESTROY,
        )
        alarms = f"arn:{stack.partition}:cloudwatch:{stack.region}:{stack.account}:alarm:{constants.alarm_name_prefix(env)}*"
        # Only this account's alarms of this deployment (confused-deputy guard, as CloudWatch sets both keys).
        from_alarms = {"StringEquals": {"aws:SourceAccount": stack.account}, "ArnLike": {"aws:SourceArn": alarms}}
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=PUBLISH_KEY_ACTIONS,
                resources=["*"],  # in a key policy, "*" is this key
                conditions=from_alarms,
            )
        )
        self.approval_topic = sns.Topic(
            self,
            "ApprovalTopic",
            topic_name=constants.approval_topic_name(env),
            display_name="gpufill approvals",
            master_key=self.key,
            enforce_ssl=True,
        )
        self.approval_topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.approval_topic.topic_arn],
                conditions=from_alarms,
            )
        )
        if approval_email:
            # AWS mails a confirmation link first; nothing is delivered until it is clicked.
            self.approval_topic.add_subscription(subscriptions.EmailSubscription(approval_email))


def publish_statements(topic: sns.ITopic) -> list[iam.PolicyStatement]:
    """sns:Publish to the topic, and the key use SNS makes on the publisher's behalf."""
    statements = [iam.PolicyStatement(actions=["sns:Publish"], resources=[topic.topic_arn])]
    key = getattr(topic, "master_key", None)
    if key is not None:
        statements.append(iam.PolicyStatement(actions=PUBLISH_KEY_ACTIONS, resources=[key.key_arn]))
    return statements
