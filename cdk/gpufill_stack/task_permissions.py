"""What each Lambda task may do, and how big it is: one row per ASL placeholder.

Read TASKS top to bottom to see every permission gpufill's Lambdas hold. Each grant is a
small function named for the calls it allows, built from the handler's adapters (the only
modules that talk to AWS), and it says why any wildcard in it cannot be narrower: that
sentence becomes the cdk-nag acknowledgment, on that function's policy only.

A task in gpufill.constants.LAMBDA_TASKS without a row here fails synth, and so does a row
without a task: a new Lambda never gets permissions by default or by accident. tests/infra
reads each handler's source for the boto3 calls it can reach and fails when a row grants
less, or more, than those calls need.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aws_cdk import Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from aws_cdk import aws_ssm as ssm
from constructs import Construct
from gpufill import constants

from gpufill_stack import nag
from gpufill_stack.notifications import publish_statements


@dataclass(frozen=True)
class TaskResources:
    """What the grants point at: the stack's resources, handed over by the stack."""

    scope: Construct
    # The deployment's name: the gpufill:deployment tag its launches carry and teardown requires.
    env: str
    table: dynamodb.ITable
    capacity_table: dynamodb.ITable
    regions_parameter: ssm.IStringParameter
    instance_role: iam.IRole
    approval_topic: sns.ITopic
    # A customer-managed EBS key (cdk.json `ebs_kms_key_arn`), and the region it lives in.
    ebs_kms_key_arn: str | None = None
    ebs_kms_key_region: str | None = None
    # The provisioner state machine: StartRefill starts runs of it (the tasks it runs cannot
    # know it, since it depends on them).
    state_machine_arn: str | None = None
    # max_lifetime and approval reminders (SpendGuard): the role Scheduler runs schedules with.
    scheduler_role: iam.IRole | None = None

    def schedule_arn(self, name: str) -> str:
        """A schedule of this deployment's group (gpufill.constants.schedule_group_name)."""
        stack = Stack.of(self.scope)
        group = constants.schedule_group_name(self.env)
        return f"arn:{stack.partition}:scheduler:{stack.region}:{stack.account}:schedule/{group}/{name}"

    def ec2_arn(self, resource: str, *, account: bool = True) -> str:
        """An EC2 ARN in any region: gpufill launches wherever capacity is."""
        stack = Stack.of(self.scope)
        return f"arn:{stack.partition}:ec2:*:{stack.account if account else ''}:{resource}"


@dataclass(frozen=True)
class Grant:
    """IAM statements, and for each wildcard cdk-nag will report, why it is as narrow as it gets."""

    statements: list[iam.PolicyStatement]
    wildcards: dict[str, str] = field(default_factory=dict)


GrantBuilder = Callable[[TaskResources], Grant]

# --- grants, one per kind of call -----------------------------------------------------------

_EC2_DESCRIBE = (
    "EC2 Describe* calls take no resource-level permissions: IAM only accepts '*' for them, "
    "and they read metadata only."
)


def read_regions_config(r: TaskResources) -> Grant:
    """ssm:GetParameter on the deployment's regions config (gpufill.adapters.regions_config)."""
    return Grant([iam.PolicyStatement(actions=["ssm:GetParameter"], resources=[r.regions_parameter.parameter_arn])])


def read_dlami_parameters(r: TaskResources) -> Grant:
    """ssm:GetParameter on the public Deep Learning AMI ids, in every region (gpufill.adapters.ami)."""
    stack = Stack.of(r.scope)
    arn = f"arn:{stack.partition}:ssm:*::parameter{constants.DLAMI_PARAMETER_NAMESPACE}*"
    return Grant(
        [iam.PolicyStatement(actions=["ssm:GetParameter"], resources=[arn])],
        {
            nag.wildcard_resource(r.scope, arn): (
                "The AMI is resolved in whichever region a launch goes to, from AWS's public "
                "Deep Learning AMI parameters; the path is limited to that public namespace."
            )
        },
    )


def describe_capacity(r: TaskResources) -> Grant:
    """Which zones offer a type, their zone ids, and what spot costs there (gpufill.adapters.ec2)."""
    return Grant(
        [
            iam.PolicyStatement(
                actions=[
                    "ec2:DescribeInstanceTypeOfferings",
                    "ec2:DescribeSpotPriceHistory",
                    "ec2:DescribeAvailabilityZones",
                ],
                resources=["*"],
            )
        ],
        {"Resource::*": _EC2_DESCRIBE},
    )


def run_tagged_instances(r: TaskResources) -> Grant:
    """RunInstances, only for instances tagged gpufill:managed=true and gpufill:deployment=<env> at
    launch (so no launch can skip the tags teardown and status find it by), and tags only on create."""
    instances = r.ec2_arn("instance/*")
    touched = [
        r.ec2_arn("image/*", account=False),  # public DLAMIs belong to no account of ours
        r.ec2_arn("subnet/*"),
        r.ec2_arn("security-group/*"),
        r.ec2_arn("network-interface/*"),
        r.ec2_arn("volume/*"),
        r.ec2_arn("spot-instances-request/*"),
        r.ec2_arn("placement-group/*"),  # a same-az gang of EFA types launches into its cluster group
        r.ec2_arn("launch-template/*"),  # a fleet launches from its deployment's launch template
    ]
    tagged = [instances, r.ec2_arn("volume/*")]
    stack = Stack.of(r.scope)
    spot_role = (
        f"arn:{stack.partition}:iam::{stack.account}:role/aws-service-role/spot.amazonaws.com/AWSServiceRoleForEC2Spot"
    )
    why = (
        "Instance and resource ids do not exist before RunInstances and launches go to any "
        "region; the launch must carry the gpufill:managed=true and gpufill:deployment tags, "
        "and tags are only allowed as part of RunInstances."
    )
    return Grant(
        [
            iam.PolicyStatement(
                actions=["ec2:RunInstances"],
                resources=[instances],
                # Every instance this role creates is one that this deployment's teardown can find and end.
                conditions={
                    "StringEquals": {
                        f"aws:RequestTag/{constants.TAG_MANAGED}": constants.TAG_MANAGED_VALUE,
                        f"aws:RequestTag/{constants.TAG_DEPLOYMENT}": r.env,
                    }
                },
            ),
            iam.PolicyStatement(actions=["ec2:RunInstances"], resources=touched),
            iam.PolicyStatement(
                actions=["ec2:CreateTags"],
                resources=tagged,
                conditions={"StringEquals": {"ec2:CreateAction": ["RunInstances", "CreateFleet"]}},
            ),
            # The first spot request of an account makes EC2 create its Spot service-linked
            # role, on the caller's permission; only that one role, only for that service.
            iam.PolicyStatement(
                actions=["iam:CreateServiceLinkedRole"],
                resources=[spot_role],
                conditions={"StringEquals": {"iam:AWSServiceName": "spot.amazonaws.com"}},
            ),
        ],
        {nag.wildcard_resource(r.scope, arn): why for arn in {instances, *touched, *tagged}},
    )


def create_fleets(r: TaskResources) -> Grant:
    """CreateFleet (type instant) from this deployment's launch templates: the templates are created
    tagged for the deployment and only those get new versions (adapters.fleet_launch); the fleet's
    instances are launched under run_tagged_instances' RunInstances conditions."""
    fleets = r.ec2_arn("fleet/*")
    templates = r.ec2_arn("launch-template/*")
    stack = Stack.of(r.scope)
    fleet_role = (
        f"arn:{stack.partition}:iam::{stack.account}:role/aws-service-role/ec2fleet.amazonaws.com/AWSServiceRoleForEC2Fleet"
    )
    deployment_tags = {
        f"aws:RequestTag/{constants.TAG_MANAGED}": constants.TAG_MANAGED_VALUE,
        f"aws:RequestTag/{constants.TAG_DEPLOYMENT}": r.env,
    }
    return Grant(
        [
            iam.PolicyStatement(actions=["ec2:CreateFleet"], resources=[fleets, templates, *_fleet_touched(r)]),
            # The Service Authorization Reference makes instance a required resource of CreateFleet,
            # with the request's tags: a fleet launches only instances and volumes tagged for this
            # deployment, as RunInstances does.
            iam.PolicyStatement(
                actions=["ec2:CreateFleet"], resources=_fleet_launched(r), conditions={"StringEquals": deployment_tags}
            ),
            iam.PolicyStatement(
                actions=["ec2:CreateLaunchTemplate"], resources=[templates], conditions={"StringEquals": deployment_tags}
            ),
            iam.PolicyStatement(
                actions=["ec2:CreateLaunchTemplateVersion"],
                resources=[templates],
                conditions={"StringEquals": {f"aws:ResourceTag/{constants.TAG_DEPLOYMENT}": r.env}},
            ),
            iam.PolicyStatement(
                actions=["ec2:CreateTags"],
                resources=[fleets, templates],
                conditions={"StringEquals": {"ec2:CreateAction": ["CreateFleet", "CreateLaunchTemplate"]}},
            ),
            # An account's first EC2 Fleet has EC2 create the fleet service-linked role, on the caller's permission.
            iam.PolicyStatement(
                actions=["iam:CreateServiceLinkedRole"],
                resources=[fleet_role],
                conditions={"StringEquals": {"iam:AWSServiceName": "ec2fleet.amazonaws.com"}},
            ),
            # A replayed or unsettled fleet is read back by its id (adapters.fleet_launch); the Service
            # Authorization Reference lists no resource type for DescribeFleets.
            iam.PolicyStatement(actions=["ec2:DescribeFleets"], resources=["*"]),
        ],
        {
            **{
                nag.wildcard_resource(r.scope, arn): (
                    "A fleet, its launch template and what it launches into are created or chosen at run "
                    "time in whichever region has capacity; templates are tagged for this deployment at "
                    "creation and only those get new versions."
                )
                for arn in {fleets, templates, *_fleet_touched(r), *_fleet_launched(r)}
            },
            "Resource::*": _EC2_DESCRIBE,
        },
    )


def delete_template_versions(r: TaskResources) -> Grant:
    """A run's launch template versions, deleted by whichever step ends the run (10,000 versions a
    template; policy/template_versions.py), only in this deployment's templates."""
    templates = r.ec2_arn("launch-template/*")
    return Grant(
        [
            iam.PolicyStatement(
                actions=["ec2:DeleteLaunchTemplateVersions"],
                resources=[templates],
                conditions={"StringEquals": {f"aws:ResourceTag/{constants.TAG_DEPLOYMENT}": r.env}},
            )
        ],
        {
            nag.wildcard_resource(r.scope, templates): (
                "The run's versions are in whichever region it launched in; only templates tagged for this "
                "deployment are touched."
            )
        },
    )


def _fleet_touched(r: TaskResources) -> list[str]:
    # What a fleet uses: its overrides' subnets and cluster placement groups, the template's image.
    return [r.ec2_arn("subnet/*"), r.ec2_arn("image/*", account=False), r.ec2_arn("placement-group/*")]


def _fleet_launched(r: TaskResources) -> list[str]:
    # What a fleet creates with the request's tags; an instant fleet's launches are also
    # authorised as RunInstances (run_tagged_instances), with the same tag conditions.
    return [r.ec2_arn("instance/*"), r.ec2_arn("volume/*")]


def pass_instance_role(r: TaskResources) -> Grant:
    """iam:PassRole for the instance profile's role, to EC2 only."""
    return Grant(
        [
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[r.instance_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
            )
        ]
    )


def record_instances(r: TaskResources) -> Grant:
    """Write a run's attempt log to the instances table in batches (run_store.save_attempts)."""
    return Grant([iam.PolicyStatement(actions=["dynamodb:BatchWriteItem"], resources=[r.table.table_arn])])


def remember_full_pools(r: TaskResources) -> Grant:
    """Note a pool that answered "no capacity" in the capacity table (capacity_cache.remember_full)."""
    return Grant([iam.PolicyStatement(actions=["dynamodb:PutItem"], resources=[r.capacity_table.table_arn])])


def read_full_pools(r: TaskResources) -> Grant:
    """Which pools said "no capacity" lately (capacity_cache.recently_full)."""
    return Grant([iam.PolicyStatement(actions=["dynamodb:BatchGetItem"], resources=[r.capacity_table.table_arn])])


def read_placement_scores(r: TaskResources) -> Grant:
    """Spot placement scores for the candidate regions, shared by every run through the capacity table (adapters.placement_scores)."""
    return Grant(
        [
            iam.PolicyStatement(actions=["ec2:GetSpotPlacementScores"], resources=["*"]),
            iam.PolicyStatement(actions=["dynamodb:GetItem", "dynamodb:PutItem"], resources=[r.capacity_table.table_arn]),
        ],
        {
            "Resource::*": (
                "ec2:GetSpotPlacementScores takes no resource-level permissions (IAM accepts only "
                "'*'); it reads AWS's capacity estimate and touches no resource."
            )
        },
    )


def describe_capacity_reservations(r: TaskResources) -> Grant:
    """The On-Demand Capacity Reservations a run may use first, in each candidate region (adapters.reservations)."""
    return Grant(
        [iam.PolicyStatement(actions=["ec2:DescribeCapacityReservations"], resources=["*"])],
        {"Resource::*": _EC2_DESCRIBE},
    )


def launch_into_reservations(r: TaskResources) -> Grant:
    """RunInstances and CreateFleet into an On-Demand Capacity Reservation of the account, named by
    id (policy.reservations): the reservation is a resource of both calls. Not conditioned on the
    deployment tag: a request may name a reservation the operator did not tag. What launches is
    still held to run_tagged_instances' and create_fleets' tag conditions."""
    reservations = r.ec2_arn("capacity-reservation/*")
    return Grant(
        [iam.PolicyStatement(actions=["ec2:RunInstances", "ec2:CreateFleet"], resources=[reservations])],
        {
            nag.wildcard_resource(r.scope, reservations): (
                "The reservations a run launches into are found at run time in whichever candidate region "
                "holds one (tagged for this deployment, or named in the request); the account's own only."
            )
        },
    )


def describe_capacity_block_offerings(r: TaskResources) -> Grant:
    """The Capacity Block offerings of each candidate region (adapters.capacity_blocks.offerings)."""
    return Grant(
        [iam.PolicyStatement(actions=["ec2:DescribeCapacityBlockOfferings"], resources=["*"])],
        {"Resource::*": _EC2_DESCRIBE},
    )


def purchase_tagged_capacity_blocks(r: TaskResources) -> Grant:
    """PurchaseCapacityBlock, only of a block tagged gpufill:managed=true and gpufill:deployment=<env>
    at purchase (aws:RequestTag, which the action supports), tags only on that create; and
    DescribeCapacityReservations, to find a block an earlier try bought (adapters.capacity_blocks)."""
    reservations = r.ec2_arn("capacity-reservation/*")
    return Grant(
        [
            iam.PolicyStatement(
                actions=["ec2:PurchaseCapacityBlock"],
                resources=[reservations],
                conditions={
                    "StringEquals": {
                        f"aws:RequestTag/{constants.TAG_MANAGED}": constants.TAG_MANAGED_VALUE,
                        f"aws:RequestTag/{constants.TAG_DEPLOYMENT}": r.env,
                    }
                },
            ),
            iam.PolicyStatement(
                actions=["ec2:CreateTags"],
                resources=[reservations],
                conditions={"StringEquals": {"ec2:CreateAction": "PurchaseCapacityBlock"}},
            ),
            iam.PolicyStatement(actions=["ec2:DescribeCapacityReservations"], resources=["*"]),
        ],
        {
            nag.wildcard_resource(r.scope, reservations): (
                "A block's reservation id does not exist before the purchase, which goes to whichever candidate "
                "region offers the cheapest block; the purchase must carry this deployment's tags."
            ),
            "Resource::*": _EC2_DESCRIBE,
        },
    )


def query_request_instances(r: TaskResources) -> Grant:
    """A request's instances, through the by-request index, by its exact ARN (instances_table.records_for_request)."""
    index = f"{r.table.table_arn}/index/{constants.INSTANCES_BY_REQUEST_INDEX}"
    return Grant([iam.PolicyStatement(actions=["dynamodb:Query"], resources=[index])])


def read_instance_records_by_id(r: TaskResources) -> Grant:
    """Records of named instances, in batches (instances_table.records_by_ids)."""
    return Grant([iam.PolicyStatement(actions=["dynamodb:BatchGetItem"], resources=[r.table.table_arn])])


def scan_instance_records(r: TaskResources) -> Grant:
    """Read every record: the status view with no filter, and a teardown of everything."""
    return Grant([iam.PolicyStatement(actions=["dynamodb:Scan"], resources=[r.table.table_arn])])


def put_instance_records(r: TaskResources) -> Grant:
    """Put single items: the pending approval, and an unrecorded instance found in EC2 (instances_table.record_reconciled)."""
    return Grant([iam.PolicyStatement(actions=["dynamodb:PutItem"], resources=[r.table.table_arn])])


def update_instance_records(r: TaskResources) -> Grant:
    """Update single items: boot state, terminated or ended state (with the record's TTL), the approval decision."""
    return Grant([iam.PolicyStatement(actions=["dynamodb:UpdateItem"], resources=[r.table.table_arn])])


def read_instance_record(r: TaskResources) -> Grant:
    """One item by key: a run's plan (run_store.load_plan), a request's wait item (run_store.load_wait)."""
    return Grant([iam.PolicyStatement(actions=["dynamodb:GetItem"], resources=[r.table.table_arn])])


def note_fact_use(r: TaskResources) -> Grant:
    """UpdateItem of the one item noting what runs used (adapters.warm_facts.note_used), and no other."""
    return Grant(
        [
            iam.PolicyStatement(
                actions=["dynamodb:UpdateItem"],
                resources=[r.table.table_arn],
                conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [constants.WARM_USED_KEY]}},
            )
        ]
    )


def refresh_warm_facts(r: TaskResources) -> Grant:
    """Read what runs used and the warm facts, and write the warm facts again (adapters.warm_facts):
    items whose key starts with "warm#" only."""
    return Grant(
        [
            iam.PolicyStatement(
                actions=["dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"],
                resources=[r.table.table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["warm#*"]}},
            )
        ]
    )


def describe_images(r: TaskResources) -> Grant:
    """ec2:DescribeImages: the AMI's root snapshot size, so the root volume is never smaller (adapters.ec2)."""
    return Grant(
        [iam.PolicyStatement(actions=["ec2:DescribeImages"], resources=["*"])],
        {"Resource::*": _EC2_DESCRIBE},
    )


def describe_instances(r: TaskResources) -> Grant:
    """ec2:DescribeInstances: boot state after a launch, live state before a teardown or in the status view."""
    return Grant(
        [iam.PolicyStatement(actions=["ec2:DescribeInstances"], resources=["*"])],
        {"Resource::*": _EC2_DESCRIBE},
    )


def terminate_managed_instances(r: TaskResources) -> Grant:
    """TerminateInstances, only on instances tagged gpufill:managed=true and gpufill:deployment=<env>:
    even a wrong id cannot end another deployment's instance, or anything gpufill did not launch."""
    instances = r.ec2_arn("instance/*")
    return Grant(
        [
            iam.PolicyStatement(
                actions=["ec2:TerminateInstances"],
                resources=[instances],
                conditions={
                    "StringEquals": {
                        f"aws:ResourceTag/{constants.TAG_MANAGED}": constants.TAG_MANAGED_VALUE,
                        f"aws:ResourceTag/{constants.TAG_DEPLOYMENT}": r.env,
                    }
                },
            )
        ],
        {
            nag.wildcard_resource(r.scope, instances): (
                "Teardown ends instances launched at run time in any region; the aws:ResourceTag "
                "conditions (gpufill:managed=true, gpufill:deployment=<env>) confine it to this "
                "deployment's own instances."
            )
        },
    )


def create_cluster_groups(r: TaskResources) -> Grant:
    """CreatePlacementGroup, only tagged gpufill:managed=true and gpufill:deployment=<env>, tags only on create (adapters.placement_groups)."""
    groups = r.ec2_arn("placement-group/*")
    return Grant(
        [
            iam.PolicyStatement(
                actions=["ec2:CreatePlacementGroup"],
                resources=[groups],
                conditions={
                    "StringEquals": {
                        f"aws:RequestTag/{constants.TAG_MANAGED}": constants.TAG_MANAGED_VALUE,
                        f"aws:RequestTag/{constants.TAG_DEPLOYMENT}": r.env,
                    }
                },
            ),
            iam.PolicyStatement(
                actions=["ec2:CreateTags"],
                resources=[groups],
                conditions={"StringEquals": {"ec2:CreateAction": "CreatePlacementGroup"}},
            ),
        ],
        {
            nag.wildcard_resource(r.scope, groups): (
                "A same-az gang's cluster placement group is named at run time in whichever region "
                "and AZ it lands; it must carry this deployment's tags, which it can only get at creation."
            )
        },
    )


def delete_cluster_groups(r: TaskResources) -> Grant:
    """DeletePlacementGroup, only of groups tagged for this deployment; DescribePlacementGroups to find them."""
    groups = r.ec2_arn("placement-group/*")
    return Grant(
        [
            iam.PolicyStatement(actions=["ec2:DescribePlacementGroups"], resources=["*"]),
            iam.PolicyStatement(
                actions=["ec2:DeletePlacementGroup"],
                resources=[groups],
                conditions={
                    "StringEquals": {
                        f"aws:ResourceTag/{constants.TAG_MANAGED}": constants.TAG_MANAGED_VALUE,
                        f"aws:ResourceTag/{constants.TAG_DEPLOYMENT}": r.env,
                    }
                },
            ),
        ],
        {
            "Resource::*": _EC2_DESCRIBE,
            nag.wildcard_resource(r.scope, groups): (
                "Cluster groups are created at run time in any region; the aws:ResourceTag conditions "
                "confine deletion to this deployment's own groups."
            ),
        },
    )


# What EC2 does with a customer-managed key when it creates and attaches an encrypted volume
# on the caller's behalf (AWS: "Required KMS key policy for use with encrypted volumes").
EBS_KMS_ACTIONS = [
    "kms:CreateGrant",
    "kms:Decrypt",
    "kms:DescribeKey",
    "kms:GenerateDataKeyWithoutPlaintext",
    "kms:ReEncrypt*",
]


def use_ebs_kms_key(r: TaskResources) -> Grant:
    """The customer-managed EBS key, only through EC2 in the key's region (kms:ViaService); none when no key is set."""
    if not r.ebs_kms_key_arn:
        return Grant([])
    stack = Stack.of(r.scope)
    return Grant(
        [
            iam.PolicyStatement(
                actions=EBS_KMS_ACTIONS,
                resources=[r.ebs_kms_key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"ec2.{r.ebs_kms_key_region}.{stack.url_suffix}"}},
            )
        ],
        {
            "Action::kms:ReEncrypt*": (
                "EC2 re-encrypts a volume's data key when it creates a volume from a snapshot; "
                "ReEncrypt* is the pair ReEncryptFrom/ReEncryptTo, on this one key, through EC2 only."
            )
        },
    )


def publish_approval_request(r: TaskResources) -> Grant:
    """sns:Publish to the approval topic (approvals.publish), with the use of its key SNS makes for the publisher."""
    return Grant(publish_statements(r.approval_topic))


def ensure_security_group(r: TaskResources) -> Grant:
    """The default VPC's subnet for an AZ, and gpufill's zero-ingress group there, created the first time (adapters.network)."""
    groups = r.ec2_arn("security-group/*")
    vpcs = r.ec2_arn("vpc/*")
    why = (
        "The group is created at run time in whichever region's default VPC a launch needs; it "
        "must be tagged gpufill:managed=true, and tags are only allowed as part of its creation."
    )
    return Grant(
        [
            iam.PolicyStatement(
                actions=["ec2:DescribeVpcs", "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups"], resources=["*"]
            ),
            iam.PolicyStatement(
                actions=["ec2:CreateSecurityGroup"],
                resources=[groups],
                conditions={"StringEquals": {f"aws:RequestTag/{constants.TAG_MANAGED}": constants.TAG_MANAGED_VALUE}},
            ),
            iam.PolicyStatement(actions=["ec2:CreateSecurityGroup"], resources=[vpcs]),
            iam.PolicyStatement(
                actions=["ec2:CreateTags"],
                resources=[groups],
                conditions={"StringEquals": {"ec2:CreateAction": "CreateSecurityGroup"}},
            ),
        ],
        {
            "Resource::*": _EC2_DESCRIBE,
            nag.wildcard_resource(r.scope, groups): why,
            nag.wildcard_resource(r.scope, vpcs): why,
        },
    )


def describe_own_executions(r: TaskResources) -> Grant:
    """states:DescribeExecution of this deployment's executions: whether a continued execution
    whose StartExecution failed runs anyway, with this run's input (adapters.executions.describe)."""
    stack = Stack.of(r.scope)
    executions = (
        f"arn:{stack.partition}:states:{stack.region}:{stack.account}:execution:"
        f"{constants.state_machine_name(r.env)}:*"
    )
    return Grant(
        [iam.PolicyStatement(actions=["states:DescribeExecution"], resources=[executions])],
        {
            nag.wildcard_resource(r.scope, executions): (
                "An execution's ARN is its state machine's plus the execution name, which exists only "
                "once the run starts; the grant covers executions of this deployment's state machine only."
            )
        },
    )


def start_refill_runs(r: TaskResources) -> Grant:
    """states:StartExecution of this deployment's state machine, and DescribeExecution of its
    executions to tell a repeated start from a name taken by another input (adapters.executions)."""
    if r.state_machine_arn is None:
        raise ValueError("start_refill_runs needs the state machine's ARN in TaskResources")
    stack = Stack.of(r.scope)
    executions = (
        f"arn:{stack.partition}:states:{stack.region}:{stack.account}:execution:"
        f"{constants.state_machine_name(r.env)}:*"
    )
    return Grant(
        [
            iam.PolicyStatement(actions=["states:StartExecution"], resources=[r.state_machine_arn]),
            iam.PolicyStatement(actions=["states:DescribeExecution"], resources=[executions]),
        ],
        {
            nag.wildcard_resource(r.scope, executions): (
                "An execution's ARN is its state machine's plus the execution name, which exists only "
                "once the run starts; the grant covers executions of this deployment's state machine only."
            )
        },
    )


def start_refills_again(r: TaskResources) -> Grant:
    """states:StartExecution of this deployment's state machine, spelt from its name (a task of the
    state machine cannot depend on it), and DescribeExecution of its executions: a rejected teardown
    starts again the refills it stopped (adapters.executions.start)."""
    stack = Stack.of(r.scope)
    machine = f"arn:{stack.partition}:states:{stack.region}:{stack.account}:stateMachine:{constants.state_machine_name(r.env)}"
    return Grant(
        [iam.PolicyStatement(actions=["states:StartExecution"], resources=[machine]), *describe_own_executions(r).statements],
        describe_own_executions(r).wildcards,
    )


def start_teardown_runs(r: TaskResources) -> Grant:
    """states:StartExecution of this deployment's state machine (the sweep's teardown requests, each
    behind the approval) and DescribeExecution of its executions (whether a run ended, and a
    repeated start told from a taken name; adapters.executions)."""
    return start_refill_runs(r)


def _pass_scheduler_role(r: TaskResources) -> iam.PolicyStatement:
    if r.scheduler_role is None:
        raise ValueError("schedules need the scheduler role in TaskResources")
    return iam.PolicyStatement(
        actions=["iam:PassRole"],
        resources=[r.scheduler_role.role_arn],
        conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
    )


_SCHEDULE_NAMES = (
    "A schedule's name is derived from the request or the teardown it is for, known only at run "
    "time; the grant covers one kind of schedule in this deployment's own schedule group."
)


def schedule_lifetime_end(r: TaskResources) -> Grant:
    """scheduler:CreateSchedule of a request's max_lifetime schedule, run by the scheduler role
    (adapters.schedules.schedule_expiry)."""
    lives = r.schedule_arn("life-*")
    return Grant(
        [iam.PolicyStatement(actions=["scheduler:CreateSchedule"], resources=[lives]), _pass_scheduler_role(r)],
        {nag.wildcard_resource(r.scope, lives): _SCHEDULE_NAMES},
    )


def move_lifetime_end(r: TaskResources) -> Grant:
    """scheduler:UpdateSchedule of a request's max_lifetime schedule, moved earlier to a Capacity
    Block's end and still run by the scheduler role (adapters.schedules.move_expiry)."""
    lives = r.schedule_arn("life-*")
    return Grant(
        [iam.PolicyStatement(actions=["scheduler:UpdateSchedule"], resources=[lives]), _pass_scheduler_role(r)],
        {nag.wildcard_resource(r.scope, lives): _SCHEDULE_NAMES},
    )


def schedule_approval_reminders(r: TaskResources) -> Grant:
    """scheduler:CreateSchedule of an approval's reminders, run by the scheduler role
    (adapters.schedules.schedule_reminders)."""
    reminders = r.schedule_arn("remind-*")
    return Grant(
        [iam.PolicyStatement(actions=["scheduler:CreateSchedule"], resources=[reminders]), _pass_scheduler_role(r)],
        {nag.wildcard_resource(r.scope, reminders): _SCHEDULE_NAMES},
    )


def end_schedules(r: TaskResources) -> Grant:
    """scheduler:DeleteSchedule of an approval's reminders and of the max_lifetime schedule of a
    request torn down (adapters.schedules.cancel_reminders / cancel_expiry)."""
    lives, reminders = r.schedule_arn("life-*"), r.schedule_arn("remind-*")
    return Grant(
        [iam.PolicyStatement(actions=["scheduler:DeleteSchedule"], resources=[lives, reminders])],
        {nag.wildcard_resource(r.scope, lives): _SCHEDULE_NAMES, nag.wildcard_resource(r.scope, reminders): _SCHEDULE_NAMES},
    )


def end_approval_reminders(r: TaskResources) -> Grant:
    """scheduler:DeleteSchedule of an approval's reminders only: RemindApprovers deletes its own
    schedule once the approval cannot be answered (adapters.schedules.cancel_reminders)."""
    reminders = r.schedule_arn("remind-*")
    return Grant(
        [iam.PolicyStatement(actions=["scheduler:DeleteSchedule"], resources=[reminders])],
        {nag.wildcard_resource(r.scope, reminders): _SCHEDULE_NAMES},
    )


def read_approval_items(r: TaskResources) -> Grant:
    """dynamodb:GetItem of approval items only (adapters.approvals.get): whether a person answered."""
    return Grant(
        [
            iam.PolicyStatement(
                actions=["dynamodb:GetItem"],
                resources=[r.table.table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{constants.APPROVAL_KEY_PREFIX}*"]}},
            )
        ]
    )


def note_approval_notification(r: TaskResources) -> Grant:
    """dynamodb:UpdateItem of approval items only (adapters.approvals.record_notification): whether
    the approvers were told, the approval request refused or a reminder delivered after it."""
    return Grant(
        [
            iam.PolicyStatement(
                actions=["dynamodb:UpdateItem"],
                resources=[r.table.table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{constants.APPROVAL_KEY_PREFIX}*"]}},
            )
        ]
    )


# --- the table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskSpec:
    summary: str
    memory_mb: int
    timeout_seconds: int
    grants: tuple[GrantBuilder, ...] = ()


# Sizes: pydantic models load in every task, so 256 MB (arm64 CPU scales with memory) keeps
# cold starts short; tasks that call other regions get more time for botocore's retries.
TASKS: dict[str, TaskSpec] = {
    "ValidateRequestFunctionArn": TaskSpec(
        summary="Checks a request and fills in defaults; reads the regions config",
        memory_mb=256,
        timeout_seconds=15,
        grants=(read_regions_config,),
    ),
    "ScoreRegionFunctionArn": TaskSpec(
        summary="One region: the zones that offer each type, spot prices, Spot Advisor tier; kept in the table",
        memory_mb=512,
        timeout_seconds=60,
        grants=(describe_capacity, put_instance_records),
    ),
    "RankPoolsFunctionArn": TaskSpec(
        summary="Scores and ranks regions, lays out pools and keeps them in the table; reads placement scores and recently full pools",
        memory_mb=512,
        timeout_seconds=60,
        grants=(
            read_placement_scores,
            read_full_pools,
            read_instance_records_by_id,
            put_instance_records,
            note_fact_use,
            describe_capacity_reservations,
        ),
    ),
    "PrepareRegionFunctionArn": TaskSpec(
        summary="Fixes a region's launch parameters (AMI, root volume, security group, subnets) in the run",
        memory_mb=256,
        timeout_seconds=90,
        grants=(
            read_regions_config,
            read_dlami_parameters,
            describe_images,
            ensure_security_group,
            read_instance_record,
            update_instance_records,
            record_instances,
            read_instance_records_by_id,
            # the run's launch template versions, when the step ends the run
            delete_template_versions,
        ),
    ),
    "LaunchBatchFunctionArn": TaskSpec(
        summary="Up to 8 exactly-once RunInstances, or one CreateFleet, in one region; records every launched instance",
        memory_mb=512,
        timeout_seconds=300,
        grants=(
            run_tagged_instances,
            create_fleets,
            delete_template_versions,
            launch_into_reservations,
            pass_instance_role,
            describe_instances,
            read_instance_record,
            put_instance_records,
            update_instance_records,
            record_instances,
            remember_full_pools,
            read_instance_records_by_id,
            use_ebs_kms_key,
            create_cluster_groups,
            # the groups a gang made in a region it leaves without launching there
            delete_cluster_groups,
            schedule_lifetime_end,
            # a refill's own new instances, when its request's teardown was asked while it ran
            terminate_managed_instances,
        ),
    ),
    "WaitUntilRunningFunctionArn": TaskSpec(
        summary="One round of checking launched instances until they run; records state and IP",
        memory_mb=256,
        timeout_seconds=60,
        grants=(describe_instances, update_instance_records),
    ),
    "CheckServingFunctionArn": TaskSpec(
        summary="One round of reading each instance's startup step (tag gpufill:startup-step) until its model server answers",
        memory_mb=256,
        timeout_seconds=60,
        grants=(describe_instances,),
    ),
    "ReportResultFunctionArn": TaskSpec(
        summary="Builds the result from the run and its attempt log",
        memory_mb=256,
        timeout_seconds=30,
        grants=(read_instance_records_by_id, delete_template_versions),
    ),
    "ReportFailureFunctionArn": TaskSpec(
        summary="Names every instance a failed run launched, from the records, and the teardown that ends them, and a Capacity Block it bought",
        memory_mb=256,
        timeout_seconds=30,
        grants=(query_request_instances, read_instance_record, update_instance_records, delete_template_versions),
    ),
    "RollBackGangFunctionArn": TaskSpec(
        summary="An all_or_nothing gang that cannot complete: terminates this run's own instances and records them rolled back",
        memory_mb=256,
        timeout_seconds=90,
        grants=(
            query_request_instances,
            terminate_managed_instances,
            describe_instances,
            update_instance_records,
            read_instance_record,
            read_instance_records_by_id,
            delete_cluster_groups,
            delete_template_versions,
        ),
    ),
    # Teardown, behind a human approval, and the status view.
    "FindTeardownInstancesFunctionArn": TaskSpec(
        summary="Finds the instances a teardown may end, from the records and EC2; records unrecorded ones; asking nobody, restarts the refills its marks held",
        memory_mb=512,
        timeout_seconds=120,
        grants=(
            read_regions_config,
            query_request_instances,
            read_instance_records_by_id,
            scan_instance_records,
            describe_instances,
            put_instance_records,
            update_instance_records,
            # a listing that asks nobody and removes a request's last stop mark (handlers/refill_restarts.py)
            read_instance_record,
            start_refills_again,
        ),
    ),
    "AwaitTeardownApprovalFunctionArn": TaskSpec(
        summary="Records the pending approval and asks for it on the approval topic",
        memory_mb=256,
        timeout_seconds=30,
        grants=(put_instance_records, note_approval_notification, publish_approval_request, schedule_approval_reminders),
    ),
    "RecordApprovalDecisionFunctionArn": TaskSpec(
        summary="Records the approval decision; ends its reminders and a torn-down request's lifetime; tells the topic of an expiry; brings the next late round forward; after a rejection restarts the refills the teardown stopped",
        memory_mb=256,
        timeout_seconds=15,
        grants=(update_instance_records, end_schedules, publish_approval_request,
                read_instance_record, query_request_instances, start_refills_again, move_lifetime_end),
    ),
    "TerminateRegionInstancesFunctionArn": TaskSpec(
        summary="Terminates one region's approved instances, only those still tagged for this deployment and request",
        memory_mb=256,
        timeout_seconds=90,
        grants=(describe_instances, terminate_managed_instances, update_instance_records, delete_cluster_groups),
    ),
    "ReportInstanceStatusFunctionArn": TaskSpec(
        summary="Lists this deployment's instances: records next to EC2 in each region; records unrecorded ones; a request's wait for capacity",
        memory_mb=512,
        timeout_seconds=120,
        grants=(
            read_instance_record,
            read_regions_config,
            query_request_instances,
            scan_instance_records,
            describe_instances,
            put_instance_records,
            update_instance_records,
        ),
    ),
    "WaitForCapacityFunctionArn": TaskSpec(
        summary="wait_for_capacity: schedules the next try or gives up at the deadline; keeps the wait item status reads",
        memory_mb=256,
        timeout_seconds=30,
        grants=(
            read_instance_record, update_instance_records, read_instance_records_by_id, describe_own_executions,
            delete_template_versions,
        ),
    ),
    # capacity_block (docs/capacity-blocks.md).
    "DescribeCapacityBlockOfferingsFunctionArn": TaskSpec(
        summary="One region: the Capacity Block offerings for the types, count and duration asked",
        memory_mb=256,
        timeout_seconds=60,
        grants=(describe_capacity_block_offerings,),
    ),
    "ChooseCapacityBlockFunctionArn": TaskSpec(
        summary="Picks the fitting Capacity Block with the lowest upfront fee, or says what was offered",
        memory_mb=256,
        timeout_seconds=15,
    ),
    "AwaitPurchaseApprovalFunctionArn": TaskSpec(
        summary="Records the pending purchase approval and asks for it on the approval topic",
        memory_mb=256,
        timeout_seconds=30,
        grants=(put_instance_records, note_approval_notification, publish_approval_request),
    ),
    "PurchaseCapacityBlockFunctionArn": TaskSpec(
        summary="Buys the approved Capacity Block exactly once (finds the block an earlier try bought); notes it for status",
        memory_mb=256,
        timeout_seconds=90,
        grants=(purchase_tagged_capacity_blocks, update_instance_records),
    ),
    "PlanBlockLaunchFunctionArn": TaskSpec(
        summary="Lays out the started Capacity Block as the pool the fill loop launches into, unless a teardown stopped it; notes it for status",
        memory_mb=256,
        timeout_seconds=15,
        grants=(put_instance_records, update_instance_records, read_instance_record, move_lifetime_end),
    ),
}


# Lambdas outside the state machine (gpufill.constants.EVENT_FUNCTIONS), built the same way.
EVENT_TASKS: dict[str, TaskSpec] = {
    "StartRefill": TaskSpec(
        summary="EC2 reclaimed an instance of a request with maintain: starts the refill run that replaces it",
        memory_mb=256,
        timeout_seconds=60,
        grants=(
            read_instance_records_by_id,
            read_instance_record,
            query_request_instances,
            describe_instances,
            remember_full_pools,
            update_instance_records,
            start_refill_runs,
        ),
    ),
}


# The sweep (constants.SWEEP_FUNCTIONS): run by EventBridge Scheduler, outside the state machine.
SWEEP_TASKS: dict[str, TaskSpec] = {
    "Sweep": TaskSpec(
        summary="Every few minutes: finds untracked and expired instances, Capacity Blocks about to end, waiting approvals and ended runs; asks for teardowns behind the approval and notifies",
        memory_mb=512,
        timeout_seconds=300,
        grants=(
            scan_instance_records,
            read_regions_config,
            describe_instances,
            describe_capacity_reservations,
            put_instance_records,
            update_instance_records,
            publish_approval_request,
            start_teardown_runs,
        ),
    ),
}


# The warm facts' refresh (constants.REFRESH_FUNCTIONS): run by EventBridge Scheduler. ScoreRegion's and
# PrepareRegion's look-ups, and the warm items only; never a launch, never a placement score.
REFRESH_TASKS: dict[str, TaskSpec] = {
    constants.REFRESH_TASK: TaskSpec(
        summary="Every few minutes: scores and prepares again what runs used lately, before it goes stale, so a run after an idle spell starts warm",
        memory_mb=512,
        timeout_seconds=120,
        grants=(
            refresh_warm_facts,
            describe_capacity,
            read_regions_config,
            read_dlami_parameters,
            describe_images,
            ensure_security_group,
        ),
    ),
}


# The approval reminders (constants.REMINDER_FUNCTIONS): invoked by the reminders' schedule.
REMINDER_TASKS: dict[str, TaskSpec] = {
    constants.REMINDER_TASK: TaskSpec(
        summary="Every hour while a teardown approval waits: publishes the reminder, or, once the approval is answered, expired or its run ended, deletes its own schedule",
        memory_mb=256,
        timeout_seconds=30,
        grants=(read_approval_items, note_approval_notification, describe_own_executions, publish_approval_request,
                end_approval_reminders),
    ),
}


def answer_approvals(r: TaskResources) -> Grant:
    """AnswerApproval: read and claim approval items only (gpufill.approve, adapters.approvals), and
    send the answer to the waiting task. Only this role may send task answers: people call its URL."""
    return Grant(
        [
            iam.PolicyStatement(
                actions=["dynamodb:GetItem", "dynamodb:UpdateItem"],
                resources=[r.table.table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{constants.APPROVAL_KEY_PREFIX}*"]}},
            ),
            # Resolving REF (approval id, execution name, request id) reads every approval item; whether a
            # teardown's instances have all ended reads their records (gpufill.approve.find, answer).
            iam.PolicyStatement(actions=["dynamodb:Scan", "dynamodb:BatchGetItem"], resources=[r.table.table_arn]),
            # A rejection is an answer too (SendTaskSuccess with "rejected"): SendTaskFailure is never needed.
            iam.PolicyStatement(actions=["states:SendTaskSuccess"], resources=["*"]),
        ],
        {
            "Resource::*": (
                "SendTaskSuccess names a task token, which IAM cannot scope to a state machine; this "
                "function's role is the only one in the deployment that holds it."
            )
        },
    )


def find_run_owner(r: TaskResources) -> Grant:
    """separate_approver: the execution's start (DescribeExecution) and CloudTrail's record of who
    started it (LookupEvents), adapters.run_owner; the execution's history settles a lost reply to
    SendTaskSuccess and says what an earlier answer did (gpufill.approve)."""
    stack = Stack.of(r.scope)
    executions = (
        f"arn:{stack.partition}:states:{stack.region}:{stack.account}:execution:"
        f"{constants.state_machine_name(r.env)}:*"
    )
    return Grant(
        [
            iam.PolicyStatement(actions=["states:DescribeExecution", "states:GetExecutionHistory"], resources=[executions]),
            iam.PolicyStatement(actions=["cloudtrail:LookupEvents"], resources=["*"]),
        ],
        {
            nag.wildcard_resource(r.scope, executions): (
                "An approval's execution exists only once its run starts; the grant covers executions "
                "of this deployment's state machine only."
            ),
            "Resource::*": "cloudtrail:LookupEvents takes no resource-level permissions: IAM only accepts '*' for it.",
        },
    )


# The function behind the approval URL (gpufill.constants.ANSWER_FUNCTIONS), built the same way.
ANSWER_TASKS: dict[str, TaskSpec] = {
    constants.ANSWER_APPROVAL_TASK: TaskSpec(
        summary="Answers an approval for the IAM principal that called its URL, recorded as AWS authenticated it",
        memory_mb=256,
        timeout_seconds=30,
        grants=(answer_approvals, find_run_owner),
    ),
}
