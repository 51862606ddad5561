"""Instance access: the role and instance profile every gpufill GPU instance runs with.

An instance needs Session Manager (the only way in: its security group has no inbound
rule), read access to the startup scripts and the models in the startup bucket, and
ECR pull for the serving image. Nothing else: it cannot write to the bucket, and it
cannot see or touch other instances.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct
from gpufill import constants

from gpufill_stack import nag


class InstanceAccess(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, startup_bucket: s3.IBucket) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "InstanceRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="gpufill GPU instances: Session Manager, startup bucket read, ECR pull",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore"),
                iam.ManagedPolicy.from_aws_managed_policy_name("AmazonEC2ContainerRegistryReadOnly"),
            ],
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
        nag.acknowledge(
            self.role,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]",
            "Session Manager is the only way into a gpufill instance (no inbound rules); AWS "
            "maintains this policy as the minimum the SSM agent needs, so we do not copy it.",
        )
        nag.acknowledge(
            self.role,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly]",
            "Instances pull the serving image from whichever ECR repository a request names; "
            "this AWS policy is exactly ECR login and read-only pull.",
        )
        self.instance_profile = iam.CfnInstanceProfile(self, "InstanceProfile", roles=[self.role.role_name])
