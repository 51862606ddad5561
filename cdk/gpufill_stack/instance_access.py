"""Instance access: the role and instance profile every gpufill GPU instance runs with.

An instance needs Session Manager (the only way in: its security group has no inbound
rule), read access to the startup scripts and the models in the startup bucket, ECR pull
for the serving image, and one tag on itself (its startup step, docs/readiness.md). Nothing
else: it cannot write to the bucket, read SSM parameters, list repositories, or see or touch
other instances.

Neither AWS managed policy is used: AmazonSSMManagedInstanceCore also lets an instance read
every SSM parameter of the account (ssm:GetParameter* on *) and run State Manager
associations, and AmazonEC2ContainerRegistryReadOnly lists and describes every repository.
The statements below are the SSM agent's own channel (Session Manager, and Run Command
through ec2messages) and image pull from this account's repositories.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct
from gpufill import constants

from gpufill_stack import nag

# What the SSM agent calls to register the instance and carry Session Manager (ssmmessages) and
# Run Command (ec2messages) traffic: AWS's documented minimum for Session Manager plus the
# message channel, without AmazonSSMManagedInstanceCore's parameter, document and association reads.
SSM_AGENT_ACTIONS = [
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
    "ec2messages:AcknowledgeMessage",
    "ec2messages:DeleteMessage",
    "ec2messages:FailMessage",
    "ec2messages:GetEndpoint",
    "ec2messages:GetMessages",
    "ec2messages:SendReply",
]
# Pulling an image: the layers' availability, their download URLs, and the manifest.
ECR_PULL_ACTIONS = ["ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"]


class InstanceAccess(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, startup_bucket: s3.IBucket, env: str) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "InstanceRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="gpufill GPU instances: Session Manager, startup bucket read, ECR pull, own startup-step tag",
        )
        stack = Stack.of(self)
        repositories = f"arn:{stack.partition}:ecr:*:{stack.account}:repository/*"
        agent_policy = iam.Policy(
            self,
            "SessionManagerAndImagePull",
            roles=[self.role],
            statements=[
                iam.PolicyStatement(actions=SSM_AGENT_ACTIONS, resources=["*"]),
                # `docker login` to ECR; the token is account-wide by design and grants nothing by itself.
                iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]),
                iam.PolicyStatement(actions=ECR_PULL_ACTIONS, resources=[repositories]),
            ],
        )
        nag.acknowledge_wildcards(
            agent_policy,
            {
                "Resource::*": (
                    "The SSM agent's channel calls (ssm:UpdateInstanceInformation, ssmmessages:*, "
                    "ec2messages:*) and ecr:GetAuthorizationToken take no resource-level "
                    "permissions; IAM only accepts '*' for them. They are the minimum Session "
                    "Manager and an image pull need (no parameter reads, no associations)."
                ),
                nag.wildcard_resource(self, repositories): (
                    "The serving image may come from any repository of this account in any "
                    "region a request launches in; pulls only, no other account's repositories."
                ),
                **{f"Action::{a}": "Fixed action list of the SSM agent channel." for a in SSM_AGENT_ACTIONS if "*" in a},
            },
        )
        prefixes = [constants.STARTUP_SCRIPTS_PREFIX, constants.MODELS_PREFIX]
        object_arns = [startup_bucket.arn_for_objects(f"{prefix}*") for prefix in prefixes]
        read_policy = iam.Policy(
            self,
            "StartupBucketRead",
            roles=[self.role],
            statements=[
                iam.PolicyStatement(actions=["s3:GetObject"], resources=object_arns),
                # `aws s3 sync` of a model lists the prefix first.
                iam.PolicyStatement(
                    actions=["s3:ListBucket"],
                    resources=[startup_bucket.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [f"{prefix}*" for prefix in prefixes]}},
                ),
            ],
        )
        nag.acknowledge_wildcards(
            read_policy,
            {
                nag.wildcard_resource(self, arn): (
                    "Instances read every object under this prefix (startup scripts, or the "
                    "files of any model a request names); the prefix is the narrowest scope."
                )
                for arn in object_arns
            },
        )
        self._report_startup_steps(env)
        self.instance_profile = iam.CfnInstanceProfile(self, "InstanceProfile", roles=[self.role.role_name])

    def _report_startup_steps(self, env: str) -> None:
        """startup.sh tags its own instance with the step it reached (ready_timeout, docs/readiness.md):
        ec2:CreateTags of the one key gpufill:startup-step, on the calling instance itself, and only
        on an instance of this deployment. No other tag, no other instance, no DeleteTags."""
        stack = Stack.of(self)
        instances = f"arn:{stack.partition}:ec2:*:{stack.account}:instance/*"
        policy = iam.Policy(
            self,
            "ReportStartupStep",
            roles=[self.role],
            statements=[
                iam.PolicyStatement(
                    actions=["ec2:CreateTags"],
                    resources=[instances],
                    conditions={
                        # The instance being tagged is the one whose role credentials sign the call:
                        # the caller's ec2:SourceInstanceARN names the tagged instance's ec2:InstanceID.
                        # Both keys are in the Service Authorization Reference (the aws:ARN key often
                        # used for this is not, and a policy checker cannot vouch for it).
                        "StringLike": {"ec2:SourceInstanceARN": f"{instances.removesuffix('*')}${{ec2:InstanceID}}"},
                        "StringEquals": {
                            f"aws:ResourceTag/{constants.TAG_MANAGED}": constants.TAG_MANAGED_VALUE,
                            f"aws:ResourceTag/{constants.TAG_DEPLOYMENT}": env,
                        },
                        "ForAllValues:StringEquals": {"aws:TagKeys": [constants.TAG_STARTUP_STEP]},
                    },
                )
            ],
        )
        nag.acknowledge_wildcards(
            policy,
            {
                nag.wildcard_resource(self, instances): (
                    "An instance's ARN is not known before launch; the conditions narrow the grant to the "
                    "calling instance itself (ec2:SourceInstanceARN names its ec2:InstanceID), tagged for this deployment, "
                    "and to the one tag key gpufill:startup-step."
                ),
            },
        )
