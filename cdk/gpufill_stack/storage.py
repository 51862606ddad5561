"""Storage: the instances and capacity tables, the regions config parameter, and the startup bucket."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk import aws_ssm as ssm
from constructs import Construct
from gpufill import constants

from gpufill_stack import nag
from gpufill_stack.paths import STARTUP_DIR
from gpufill_stack.settings import DeploySettings


class Storage(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, settings: DeploySettings) -> None:
        super().__init__(scope, construct_id)
        self.table = self._instances_table(settings.env)
        self.capacity_table = self._capacity_table(settings.env)
        self.regions_parameter = ssm.StringParameter(
            self,
            "RegionsConfig",
            parameter_name=constants.regions_parameter_name(settings.env),
            string_value=settings.regions_config_json(),
            description="gpufill: default regions and per-region launch overrides (written from cdk.json context)",
            tier=ssm.ParameterTier.STANDARD,
        )
        self.access_logs_bucket = self._access_logs_bucket()
        self.startup_bucket = self._startup_bucket()
        self.startup_scripts = s3deploy.BucketDeployment(
            self,
            "StartupScripts",
            sources=[s3deploy.Source.asset(str(STARTUP_DIR))],
            destination_bucket=self.startup_bucket,
            # Instances fetch scripts/startup.sh at boot; prune keeps the prefix equal to
            # startup/ and never touches models/.
            destination_key_prefix=constants.STARTUP_SCRIPTS_PREFIX,
            prune=True,
        )
        _acknowledge_deployment_handler(self.startup_scripts)

    def _instances_table(self, env: str) -> dynamodb.Table:
        table = dynamodb.Table(
            self,
            "InstancesTable",
            table_name=constants.instances_table_name(env),
            partition_key=dynamodb.Attribute(name=constants.INSTANCES_TABLE_KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=constants.INSTANCES_TTL_ATTRIBUTE,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            # The table is the record of what is running and costing money: deleting the
            # stack must not delete it.
            removal_policy=RemovalPolicy.RETAIN,
        )
        table.add_global_secondary_index(
            index_name=constants.INSTANCES_BY_REQUEST_INDEX,
            partition_key=dynamodb.Attribute(name="request_id", type=dynamodb.AttributeType.STRING),
            projection_type=dynamodb.ProjectionType.ALL,
        )
        return table

    def _capacity_table(self, env: str) -> dynamodb.Table:
        """Pools that answered "no capacity" lately, shared by every run; items expire by TTL."""
        return dynamodb.Table(
            self,
            "CapacityTable",
            table_name=constants.capacity_table_name(env),
            partition_key=dynamodb.Attribute(name=constants.CAPACITY_TABLE_KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=constants.INSTANCES_TTL_ATTRIBUTE,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            # Minutes-old hints only: nothing here is worth keeping after the stack is gone.
            removal_policy=RemovalPolicy.DESTROY,
        )

    def _access_logs_bucket(self) -> s3.Bucket:
        # Server access logs of the startup bucket: who read which script or model, and when.
        return s3.Bucket(
            self,
            "AccessLogsBucket",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(90))],
            removal_policy=RemovalPolicy.RETAIN,
        )

    def _startup_bucket(self) -> s3.Bucket:
        return s3.Bucket(
            self,
            "StartupBucket",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.access_logs_bucket,
            server_access_logs_prefix="startup-bucket/",
            # Users upload models here (models/MODEL_ID/); they outlive a stack deletion.
            removal_policy=RemovalPolicy.RETAIN,
        )


def _acknowledge_deployment_handler(deployment: s3deploy.BucketDeployment) -> None:
    """BucketDeployment's own Lambda (one per stack, written by aws-cdk-lib) is not ours to shape.

    Its role gets the AWS basic-execution policy and CDK's read grant on the asset bucket and
    read/write grant on the startup bucket, each with the wildcards CDK's grants carry; its
    runtime follows aws-cdk-lib releases. Every wildcard found in its policy is acknowledged
    on that role only.
    """
    role = deployment.handler_role
    handler = role.node.scope
    nag.acknowledge(
        role,
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        "The role of aws-cdk-lib's BucketDeployment handler, created by CDK with the basic "
        "execution policy so the handler can write its own logs; it runs only at deploy time.",
    )
    nag.acknowledge(
        handler,
        "AwsSolutions-L1",
        "aws-cdk-lib's BucketDeployment handler; its runtime is set by aws-cdk-lib and moves "
        "forward when aws-cdk-lib is upgraded.",
    )
    document = Stack.of(role).resolve(role.node.find_child("DefaultPolicy").document)
    findings: set[str] = set()
    for statement in document["Statement"]:
        actions = statement.get("Action", [])
        resources = statement.get("Resource", [])
        for action in [actions] if isinstance(actions, str) else actions:
            if "*" in action:
                findings.add(f"Action::{action}")
        for resource in [resources] if isinstance(resources, (str, dict)) else resources:
            rendered = nag.render(resource)
            if "*" in rendered:
                findings.add(f"Resource::{rendered}")
    nag.acknowledge_wildcards(
        role,
        {
            finding: (
                "CDK's BucketDeployment grants: read the startup/ asset from the CDK asset bucket, "
                "then copy into and prune the scripts/ prefix of the startup bucket; the wildcards "
                "are those of CDK's grant_read/grant_read_write on those two buckets."
            )
            for finding in sorted(findings)
        },
    )
