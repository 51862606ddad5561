"""Notifications: the topic that asks a human to approve a teardown."""

from __future__ import annotations

from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct
from gpufill import constants


class Notifications(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, env: str, approval_email: str | None) -> None:
        super().__init__(scope, construct_id)
        self.approval_topic = sns.Topic(
            self,
            "ApprovalTopic",
            topic_name=constants.approval_topic_name(env),
            display_name="gpufill approvals",
            # The AWS managed key: messages are encrypted at rest with no key to pay for or
            # manage; the publishers are Lambda roles in this account, which it serves.
            master_key=kms.Alias.from_alias_name(self, "SnsManagedKey", "alias/aws/sns"),
            enforce_ssl=True,
        )
        if approval_email:
            # AWS mails a confirmation link first; nothing is delivered until it is clicked.
            self.approval_topic.add_subscription(subscriptions.EmailSubscription(approval_email))
