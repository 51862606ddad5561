"""Every name that more than one part of gpufill agrees on lives here."""

SERVICE_NAME = "gpufill"
METRICS_NAMESPACE = "gpufill"

# Tags put on every instance at launch; teardown only ever touches MANAGED_TAG=true.
TAG_REQUEST_ID = "gpufill:request-id"
TAG_MANAGED = "gpufill:managed"
TAG_POOL = "gpufill:pool"
# The deployment (cdk context `env`) that launched an instance. Teardown, status and the
# TerminateInstances IAM condition require it: one deployment never sees or ends another's.
TAG_DEPLOYMENT = "gpufill:deployment"
# Every tag gpufill itself puts on an instance. EC2 allows EC2_MAX_TAGS per resource, so a
# request may add at most EC2_MAX_TAGS - GPUFILL_TAG_COUNT tags of its own.
GPUFILL_TAGS = (TAG_REQUEST_ID, TAG_MANAGED, TAG_POOL, TAG_DEPLOYMENT)
# A fleet's instances carry no pool tag but the launch's ClientToken instead: EC2 keeps a fleet's
# token on the fleet, not on its instances, and a fleet whose id never came back is found by it.
TAG_LAUNCH_TOKEN = "gpufill:launch-token"
# startup.sh adds one more on the running instance: the startup step it reached (ready_timeout).
TAG_STARTUP_STEP = "gpufill:startup-step"
GPUFILL_TAG_COUNT = len(GPUFILL_TAGS) + 1
EC2_MAX_TAGS = 50
EC2_MAX_TAG_KEY_LENGTH = 128
EC2_MAX_TAG_VALUE_LENGTH = 256

# The zero-ingress security group gpufill creates per region when the config names none.
INSTANCE_SECURITY_GROUP_NAME = "gpufill-instances"

# Environment variables the Lambdas read (set by the CDK stack, or by the local engine).
ENV_INSTANCES_TABLE = "INSTANCES_TABLE"
ENV_REGIONS_PARAMETER = "REGIONS_PARAMETER"
ENV_INSTANCE_PROFILE_ARN = "INSTANCE_PROFILE_ARN"
ENV_STARTUP_BUCKET = "STARTUP_BUCKET"
ENV_SPOT_ADVISOR_URL = "SPOT_ADVISOR_URL"
# The deployment's environment name (cdk context `env`; `local` on the local engine).
ENV_DEPLOYMENT = "GPUFILL_DEPLOYMENT"
# A customer-managed KMS key for the instances' EBS volumes (cdk context `ebs_kms_key_arn`; unset:
# AWS-managed): the LaunchBatch role may use it through EC2 only, and the Lambdas read its ARN here.
ENV_EBS_KMS_KEY_ARN = "EBS_KMS_KEY_ARN"
# Set by Lambda itself in every execution environment: the function's name (adapters/container.py
# keeps each function's caches apart by it).
ENV_LAMBDA_FUNCTION_NAME = "AWS_LAMBDA_FUNCTION_NAME"

SPOT_ADVISOR_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
SPOT_ADVISOR_TIMEOUT_SECONDS = 3.0

# Public SSM parameter of the Deep Learning OSS Nvidia driver AMI (Ubuntu 22.04, x86_64).
DLAMI_PARAMETER = (
    "/aws/service/deeplearning/ami/x86_64/"
    "base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
)

# Request defaults (docs/request.md).
DEFAULT_INSTANCE_TYPE = "g6.xlarge"
DEFAULT_BATCH_MAX = 4
# A run's state and result list every instance and attempt, and Step Functions caps a state's
# data at 256 KB: 250 instances with their attempts fit with room to spare. Larger fleets are
# several runs.
MAX_COUNT = 250
# The root volume must hold the AMI (the launch uses max(request, the AMI's root snapshot size))
# plus the serving image and the model's weights synced from S3 (a 7B model in bf16 is ~15 GB,
# a 32B one ~65 GB): 200 GiB holds the Deep Learning AMI's root filesystem with that room to spare.
DEFAULT_ROOT_VOLUME_GIB = 200
# gp3's size limit as every EBS launch API documents it.
MAX_ROOT_VOLUME_GIB = 16384
# gpufill's AMI (DLAMI_PARAMETER) and the serving image are built for this architecture only.
SUPPORTED_ARCHITECTURE = "x86_64"
# Above this many instances the result gives one connect_template instead of a command per instance.
MAX_LISTED_CONNECT_COMMANDS = 100
LOCAL_HOME_REGION = "us-east-1"

# The instances table: partition key instance_id; a GSI finds a request's instances.
INSTANCES_TABLE_KEY = "instance_id"
INSTANCES_BY_REQUEST_INDEX = "by-request"
INSTANCES_TTL_ATTRIBUTE = "expires_at"
# Items of the instances table that are not instances carry a `kind`. An instance record has none.
# - KIND_INTENT, key "intent#<client token>", with request_id, region, client_token, deployment,
#   created_at and a TTL: written before every launch call, so a crash between the call and the
#   instance record still names the region to reconcile. It shares the by-request index with the
#   instance records: readers that want instances skip items with a kind.
# - LAUNCH_REGIONS_KEY: one item per deployment whose string set `regions` holds every region a
#   launch was ever attempted in (teardown `all` and the unfiltered status search them).
# - KIND_PLAN, key "plan#<request id>#<market>": a run's ranked pools, kept out of the state.
KIND_INTENT = "intent"
KIND_PLAN = "plan"
INTENT_KEY_PREFIX = "intent#"
PLAN_KEY_PREFIX = "plan#"
LAUNCH_REGIONS_KEY = "meta#launch-regions"
INTENT_RETENTION_SECONDS = 30 * 24 * 3600

# The capacity-signal table: pools that answered "no capacity" lately, shared by every run.
# Items expire through the TTL attribute; readers also ignore items past their expiry.
CAPACITY_TABLE_KEY = "pool"
# GetSpotPlacementScores takes at most 10 RegionNames a call (EC2 API reference; botocore's model
# says max 10 but does not check it, so the refusal comes from EC2).
PLACEMENT_SCORE_REGIONS_PER_CALL = 10
ENV_CAPACITY_TABLE = "CAPACITY_TABLE"
ENV_CAPACITY_CACHE_SECONDS = "CAPACITY_CACHE_SECONDS"
DEFAULT_CAPACITY_CACHE_SECONDS = 180


def capacity_table_name(env: str) -> str:
    return f"GpuCapacitySignals-{env}"


# Names derived from the deployment's environment name (cdk context `env`).
def instances_table_name(env: str) -> str:
    return f"GpuProvisioningInstances-{env}"


def regions_parameter_name(env: str) -> str:
    return f"/gpufill/{env}/regions"


def state_machine_name(env: str) -> str:
    return f"gpufill-provisioner-{env}"


# The state machine's Lambda tasks: ASL placeholder -> handler module.
# The CDK stack and the local engine both build their functions from this table.
LAMBDA_TASKS = {
    "ValidateRequestFunctionArn": "gpufill.handlers.validate_request.handler",
    "ScoreRegionFunctionArn": "gpufill.handlers.score_region.handler",
    "RankPoolsFunctionArn": "gpufill.handlers.rank_pools.handler",
    "PrepareRegionFunctionArn": "gpufill.handlers.prepare_region.handler",
    "LaunchBatchFunctionArn": "gpufill.handlers.launch_batch.handler",
    "WaitUntilRunningFunctionArn": "gpufill.handlers.wait_until_running.handler",
    "CheckServingFunctionArn": "gpufill.handlers.check_serving.handler",
    "ReportResultFunctionArn": "gpufill.handlers.report_result.handler",
    "ReportFailureFunctionArn": "gpufill.handlers.report_failure.handler",
    "RollBackGangFunctionArn": "gpufill.handlers.roll_back_gang.handler",
    # Teardown (behind a human approval) and the status view.
    "FindTeardownInstancesFunctionArn": "gpufill.handlers.find_teardown_instances.handler",
    "AwaitTeardownApprovalFunctionArn": "gpufill.handlers.await_teardown_approval.handler",
    "RecordApprovalDecisionFunctionArn": "gpufill.handlers.record_approval_decision.handler",
    "TerminateRegionInstancesFunctionArn": "gpufill.handlers.terminate_region_instances.handler",
    "ReportInstanceStatusFunctionArn": "gpufill.handlers.report_instance_status.handler",
    # wait_for_capacity: PlanNextTry and StartNextTry (one function, two phases).
    "WaitForCapacityFunctionArn": "gpufill.handlers.wait_for_capacity.handler",
    # capacity_block: find, choose, ask a person, buy exactly once, launch into it (docs/capacity-blocks.md).
    "DescribeCapacityBlockOfferingsFunctionArn": "gpufill.handlers.describe_capacity_block_offerings.handler",
    "ChooseCapacityBlockFunctionArn": "gpufill.handlers.choose_capacity_block.handler",
    "AwaitPurchaseApprovalFunctionArn": "gpufill.handlers.await_purchase_approval.handler",
    "PurchaseCapacityBlockFunctionArn": "gpufill.handlers.purchase_capacity_block.handler",
    "PlanBlockLaunchFunctionArn": "gpufill.handlers.plan_block_launch.handler",
}

# --- Teardown approval ------------------------------------------------------------------
# AwaitTeardownApproval publishes the approval request (with the approve/reject commands) here.
ENV_APPROVAL_TOPIC_ARN = "APPROVAL_TOPIC_ARN"
# A pending approval is one item in the instances table, keyed "approval#<execution name>";
# it carries no request_id attribute, so the by-request index never returns it.
APPROVAL_KEY_PREFIX = "approval#"
# The only answer that lets a teardown terminate anything; every other answer is a rejection.
APPROVED = "approved"
DEFAULT_APPROVAL_TIMEOUT_SECONDS = 24 * 3600
MIN_APPROVAL_TIMEOUT_SECONDS = 60
MAX_APPROVAL_TIMEOUT_SECONDS = 7 * 24 * 3600
# How long a decided approval, and the record of a terminated instance, stay in the table
# (the TTL attribute INSTANCES_TTL_ATTRIBUTE) so the decision can still be looked up.
APPROVAL_RETENTION_SECONDS = 30 * 24 * 3600
TERMINATED_RECORD_RETENTION_SECONDS = 90 * 24 * 3600


# Step Functions caps every state's input and output at 256 KB (262,144 bytes). A teardown of
# MAX_TEARDOWN_IDS ids and a status over thousands of records stay far below it: they carry every
# id once in compact form and counts, but list full details of at most these many instances.
STATE_SIZE_LIMIT_BYTES = 262_144
# Step Functions ends an execution whose history reaches this many events.
HISTORY_EVENTS_LIMIT = 25_000
TEARDOWN_LISTED_INSTANCES = 50
STATUS_LISTED_INSTANCES = 100
STATUS_LISTED_REQUESTS = 100
# A record whose instance EC2 has not shown for this long after its launch has ended (EC2 forgets
# terminated instances after about an hour; a brand-new one can be invisible for a few seconds).
GONE_AFTER_SECONDS = 3600


def approval_key(execution_name: str) -> str:
    return f"{APPROVAL_KEY_PREFIX}{execution_name}"


# --- Deployment (the CDK app under cdk/) ----------------------------------------------
# The value of TAG_MANAGED on every instance gpufill launches; IAM conditions match it.
TAG_MANAGED_VALUE = "true"

# Bucket prefixes: startup/ is uploaded under scripts/; models are synced from models/MODEL_ID/.
STARTUP_SCRIPTS_PREFIX = "scripts/"
MODELS_PREFIX = "models/"

# Everything under this public SSM path may be read (the DLAMI ids in every region).
DLAMI_PARAMETER_NAMESPACE = "/aws/service/deeplearning/"

# Lambda runtime and the Powertools public layer (v3) that carries Powertools and pydantic.
LAMBDA_PYTHON_VERSION = "3.13"
LAMBDA_ARCHITECTURE = "arm64"
POWERTOOLS_LAYER_ACCOUNT = "017000801446"
# The Powertools release the functions run: the one pyproject.toml pins (tests/unit checks they
# agree). The layer that carries it is found at deploy time through AWS's public parameter
# (powertools_layer_parameter), so no layer number is written down here: a layer number is per
# release and AWS publishes which is which only through that parameter.
POWERTOOLS_VERSION = "3.37.0"


def powertools_layer_parameter(version: str = POWERTOOLS_VERSION) -> str:
    """AWS's public SSM parameter whose value is the ARN of the layer carrying `version`."""
    return f"/aws/service/powertools/python/{LAMBDA_ARCHITECTURE}/python{LAMBDA_PYTHON_VERSION}/{version}"



def powertools_layer_arn(region: str, version: int) -> str:
    """The layer's ARN for an explicit layer number (cdk.json `powertools_layer_version`)."""
    python = "python" + LAMBDA_PYTHON_VERSION.replace(".", "")
    return (
        f"arn:aws:lambda:{region}:{POWERTOOLS_LAYER_ACCOUNT}:layer:"
        f"AWSLambdaPowertoolsPythonV3-{python}-{LAMBDA_ARCHITECTURE}:{version}"
    )


def stack_name(env: str) -> str:
    return f"gpufill-{env}"


def function_name(env: str, placeholder: str) -> str:
    """`LaunchBatchFunctionArn` -> `gpufill-dev-LaunchBatch`: the name users see in the console."""
    return f"gpufill-{env}-{placeholder.removesuffix('FunctionArn')}"


def approval_topic_name(env: str) -> str:
    return f"gpufill-approvals-{env}"


# Stack outputs (the CLI's real-AWS verbs can find the deployment by these keys).
OUTPUT_STATE_MACHINE_ARN = "StateMachineArn"
OUTPUT_INSTANCES_TABLE = "InstancesTableName"
OUTPUT_STARTUP_BUCKET = "StartupBucketName"
OUTPUT_APPROVAL_TOPIC_ARN = "ApprovalTopicArn"
OUTPUT_START_EXECUTION_COMMAND = "StartExecutionCommand"
# The function URL that answers approvals (AnswerApproval) and the managed policy that lets a person call it.
OUTPUT_ANSWER_APPROVAL_URL = "AnswerApprovalUrl"
OUTPUT_APPROVER_POLICY_ARN = "ApproverPolicyArn"


# --- Answering approvals (docs/teardown.md, "Who may answer") -------------------------------
# One function answers every approval: `gpufill approve|reject` call its URL (AuthType AWS_IAM),
# so the approver recorded is the ARN AWS authenticated, and only its role may send task answers.
ANSWER_APPROVAL_TASK = "AnswerApproval"
ANSWER_FUNCTIONS = {ANSWER_APPROVAL_TASK: "gpufill.handlers.answer_approval.handler"}
# The function URL's IAM auth type, and the condition keys IAM checks when it is called.
FUNCTION_URL_AUTH_TYPE = "AWS_IAM"
# The deployment settings `approvers` (JSON list of IAM ARN patterns) and `separate_approver`.
ENV_APPROVERS = "GPUFILL_APPROVERS"
ENV_SEPARATE_APPROVER = "GPUFILL_SEPARATE_APPROVER"


def approver_policy_name(env: str) -> str:
    """The managed policy a deployment's approvers get: invoke the AnswerApproval function URL."""
    return f"gpufill-{env}-approver"


# --- Capacity Blocks for ML (capacity_block) ---------------------------------------------
# A sanity bound on max_upfront_usd: 64 of the largest GPU instances for 182 days cost less.
MAX_CAPACITY_BLOCK_UPFRONT_USD = 20_000_000
# EC2's ReservationType of a Capacity Block (DescribeCapacityReservations), and its MarketType.
CAPACITY_BLOCK_TYPE = "capacity-block"
# A bought block is launched into until EC2 starts ending its instances (30 minutes before its end):
# a capacity answer at its start (a block can turn active minutes late) is tried again, 60 s
# doubling to 15 minutes, and never more than BLOCK_MAX_TRIES times, which keeps one execution's
# history far under Step Functions' 25,000 events even for a 182-day block.
BLOCK_USABLE_UNTIL_END_SECONDS = 30 * 60
BLOCK_RETRY_FIRST_DELAY_SECONDS = 60
BLOCK_RETRY_MAX_DELAY_SECONDS = 900
BLOCK_MAX_TRIES = 300


# --- Waiting for capacity (wait_for_capacity) -------------------------------------------
# The longest a run may wait: Step Functions keeps an execution for up to a year, but a wait
# past a week is a reservation, not a fill.
MAX_WAIT_FOR_CAPACITY_SECONDS = 7 * 24 * 3600
# Capped exponential backoff between tries: 60 s, then 150 s between tries, the cap the dynamic
# benchmark chose with the two settings below (docs/benchmark.md, "The wait's calls, setting by
# setting": with them a wait makes at most 1.5x Karpenter-style's EC2 calls, no slower). A request may set both
# (wait_for_capacity.first_delay / max_delay), a deployment its defaults (cdk context
# wait_first_delay / wait_max_delay, in every function's environment); ValidateRequest fixes them
# in the run once.
WAIT_FIRST_DELAY_SECONDS = 60
WAIT_MAX_DELAY_SECONDS = 150
ENV_WAIT_FIRST_DELAY_SECONDS = "WAIT_FIRST_DELAY_SECONDS"
ENV_WAIT_MAX_DELAY_SECONDS = "WAIT_MAX_DELAY_SECONDS"
# The bounds of either setting: a try every 10 s at most (each try re-scores every region), and
# a wait of at most 6 hours between two tries (a longer one misses the restocks it waits for).
WAIT_MIN_DELAY_SECONDS = 10
WAIT_LONGEST_DELAY_SECONDS = 6 * 3600
# A try after a wait reuses the regions' facts (offerings, spot prices, reservations) the run read
# on an earlier try while they are younger than this, and goes straight to ranking: over hours of
# waiting those answers barely move while capacity does, and re-reading them every try was most of
# a wait's EC2 calls (docs/benchmark.md, "Counting calls"). Spot prices stay at most this stale;
# capacity itself is asked on every try.
WAIT_FACTS_TTL_SECONDS = 2 * 3600
# A try that reuses its facts leaves out the pools this or another run found full less than this
# long ago (the capacity cache): their answer is unlikely to have changed, and each left-out
# region saves a fleet. Shorter than the wait's cap, so a pool found full is asked again by the
# try after next at the latest; chosen on the dynamic benchmark.
WAIT_SKIP_FULL_SECONDS = 120
# When a waiting execution continues as a new one: before its history could pass this many
# events (Step Functions stops an execution at 25,000; the rest is headroom for task retries,
# each of which adds 3 events). A try's events are bounded by a formula measured on the local
# engine (policy/waiting.py, docs/state-machine.md); WAIT_TRIES_PER_EXECUTION also caps the
# tries per execution (tests set it low to force continuations).
WAIT_HISTORY_BUDGET = 20_000
DEFAULT_TRIES_PER_EXECUTION = 100
ENV_TRIES_PER_EXECUTION = "WAIT_TRIES_PER_EXECUTION"
ENV_STATE_MACHINE_ARN = "STATE_MACHINE_ARN"
# What a waiting run shows `gpufill status`: one item per request, keyed "wait#<request id>".
WAIT_KEY_PREFIX = "wait#"
KIND_WAIT = "wait"
CONTINUATION_SUFFIX = "-c"

# --- Model readiness (ready_timeout) -----------------------------------------------------
# startup.sh tags its own instance with the step it reached (TAG_STARTUP_STEP); the run reads the
# tag with the DescribeInstances it already makes. The instance role may set that one key on itself only.
# The step value once the model server answers; a failed startup reports FAILED_STEP_PREFIX + the step it stopped at.
STARTUP_STEP_SERVING = "serving"
STARTUP_STEP_FAILED_PREFIX = "failed: "
# ready_timeout (ISO 8601 duration): the documented default (docs/request.md); the upper bound is startup.sh's own
# server wait (30 min) after an image pull and model sync, with room for slow pulls of large
# models; past it an instance that does not serve never will (see docs/readiness.md).
DEFAULT_READY_TIMEOUT_SECONDS = 30 * 60
MAX_READY_TIMEOUT_SECONDS = 2 * 3600
# How often the run looks again while a model server is still starting.
READY_POLL_SECONDS = 60

# --- Maintenance: replacing reclaimed instances (request field `maintain`) ----------------
# EC2 puts these on each region's default event bus; a rule in every deployed region forwards
# them to the home region, whose rule invokes StartRefill.
EVENT_SOURCE_EC2 = "aws.ec2"
SPOT_INTERRUPTION_WARNING = "EC2 Spot Instance Interruption Warning"
INSTANCE_STATE_CHANGE = "EC2 Instance State-change Notification"
# The state-change events that mean an instance is going away (a stop is not a loss).
ENDING_STATES = ("shutting-down", "terminated")
# The Lambda EventBridge invokes (not a state-machine task: it starts refill runs).
EVENT_FUNCTIONS = {"StartRefill": "gpufill.handlers.start_refill.handler"}
# StartRefill starts provisioning runs of this deployment's state machine (ENV_STATE_MACHINE_ARN).
# A maintained request as it was accepted, kept so a refill run can ask for the same again:
# key "request#<request id>", kind KIND_REQUEST, no request_id attribute.
KIND_REQUEST = "request"
REQUEST_KEY_PREFIX = "request#"
# A teardown of everything pauses every request's refills while it lists the deployment's
# instances and marks their requests (one item, kind KIND_MAINTENANCE_PAUSE); a pause left behind
# by a step that died ends on its own after MAINTENANCE_PAUSE_SECONDS (a Lambda's longest run).
KIND_MAINTENANCE_PAUSE = "maintenance-pause"
MAINTENANCE_PAUSE_KEY = "maintenance#paused"
MAINTENANCE_PAUSE_SECONDS = 900
# A maintained request's item (KIND_REQUEST) holds one stop mark per teardown asked for it (a string
# set of teardown ids): refills stay stopped while any is there. Items written before marks were per
# teardown hold a single mark in the legacy attribute, read as one more mark.
MAINTENANCE_STOPS_ATTRIBUTE = "maintenance_stops"
MAINTENANCE_STOPPED_LEGACY_ATTRIBUTE = "maintenance_stopped_by"
# A refill run's execution name: "<request id>-refill-<instance id>", so the warning and the
# state change of one instance start one run. Step Functions names are at most 80 characters.
REFILL_NAME_INFIX = "-refill-"
EXECUTION_NAME_MAX = 80


# The EventBridge rules, the same in every region (name suffix -> event pattern): in the home region
# they invoke StartRefill, elsewhere they forward to the home region's default event bus.
INTERRUPTION_EVENT_PATTERNS = {
    "spot-warnings": {"source": [EVENT_SOURCE_EC2], "detail-type": [SPOT_INTERRUPTION_WARNING]},
    "instances-ending": {
        "source": [EVENT_SOURCE_EC2],
        "detail-type": [INSTANCE_STATE_CHANGE],
        "detail": {"state": list(ENDING_STATES)},
    },
}


def interruption_rule_name(env: str, kind: str) -> str:
    return f"gpufill-{env}-{kind}"


def forwarding_stack_name(env: str, region: str) -> str:
    return f"gpufill-{env}-events-{region}"


# How iam_needs.json and `gpufill doctor` name those roles together (one template, one set of needs).
FORWARDING_PRINCIPAL = "EventForwarding"


def forwarding_role_name(env: str, region: str) -> str:
    """The role EventBridge uses to forward a region's events home (IAM role names are per account,
    so the region is part of it; at most 8 + 20 + 8 + 14 of IAM's 64 characters)."""
    return f"gpufill-{env}-events-{region}"

# --- Spend guard (request field `max_lifetime`) -------------------------------------------
# When a request's lifetime passes, an EventBridge Scheduler one-time schedule starts the
# teardown of that request (still behind the approval). Bounds of max_lifetime: at least 15
# minutes (a fill, the boot and the model's start-up take minutes, and a person needs time to
# answer before the money matters), at most 30 days (a guard that far out protects nothing a
# person would not have noticed; a longer-lived fleet is torn down on purpose).
MIN_MAX_LIFETIME_SECONDS = 15 * 60
MAX_MAX_LIFETIME_SECONDS = 30 * 24 * 3600
# Every schedule of a deployment lives in its own schedule group, so its IAM grants name that
# group only, and deleting the stack deletes the group with every schedule in it.
ENV_SCHEDULE_GROUP = "SCHEDULE_GROUP"
# The role EventBridge Scheduler assumes to start the lifetime's teardown and to remind approvers.
ENV_SCHEDULER_ROLE_ARN = "SCHEDULER_ROLE_ARN"
# While a teardown approval waits, it is published again this often, until its deadline.
APPROVAL_REMINDER_SECONDS = 3600
# The reminders' schedule invokes this function (outside the state machine), which reads the
# approval item and its execution first: it publishes the reminder only while a person can still
# answer, and otherwise deletes its own schedule. The approval step names it by ARN (ENV_REMINDER_FUNCTION_ARN).
REMINDER_TASK = "RemindApprovers"
REMINDER_FUNCTIONS = {REMINDER_TASK: "gpufill.handlers.remind_approvers.handler"}
ENV_REMINDER_FUNCTION_ARN = "REMINDER_FUNCTION_ARN"
# A request's late rounds of the spend guard (policy/lifetime.py, late_step): one item per
# request, key "late#<request id>", kind KIND_LATE_ROUNDS, no request_id attribute (the by-request
# index never returns it). Kept past any name Step Functions could still hold (90 days): a round
# number used again would start nothing (ExecutionAlreadyExists).
LATE_ROUNDS_KEY_PREFIX = "late#"
KIND_LATE_ROUNDS = "late-rounds"
LATE_ROUNDS_RETENTION_SECONDS = 120 * 24 * 3600
# On an instance record: when its request expires. Not `expires_at`, the table's TTL attribute
# (epoch seconds): DynamoDB would delete the record of a live instance when its request expires.
LIFETIME_ATTRIBUTE = "lifetime_expires_at"
# The teardown request a lifetime's schedule sends says why it was asked (field `trigger`).
TRIGGER_MAX_LIFETIME = "max_lifetime"


def schedule_group_name(env: str) -> str:
    return f"gpufill-{env}"

# A Capacity Block's upfront payment (docs/capacity-blocks.md): EC2 shows the block
# `payment-pending` while it is processed (up to 12 hours), then `scheduled`, or `payment-failed`
# and the block is released. The run looks again every PAYMENT_CHECK_SECONDS; a failed payment
# ends it PURCHASE_FAILED.
BLOCK_PAYMENT_PENDING = "payment-pending"
BLOCK_PAYMENT_FAILED = "payment-failed"
PAYMENT_CHECK_SECONDS = 60
PURCHASE_FAILED = "PURCHASE_FAILED"

# --- Operations: metrics, alarms, the dashboard and the sweep (docs/operations.md) ----------
# Every metric gpufill emits carries the dimension `deployment` (the env), so one account's
# deployments never share an alarm or a dashboard line. The alarms and the dashboard name these.
METRIC_DIMENSION_DEPLOYMENT = "deployment"
METRIC_RUNS_FINISHED = "RunsFinished"  # ReportResult, dimension `outcome` (FILLED, PARTIAL, ...)
METRIC_RUNS_FAILED = "RunsFailed"  # ReportFailure
METRIC_CAPACITY_ANSWERS = "CapacityAnswers"  # LaunchBatch, dimensions `region`, `instance_type`, `outcome`
METRIC_INSTANCES_LAUNCHED = "InstancesLaunched"
# The sweep's pass: what runs, what it costs, and what it found (one metric per finding kind).
METRIC_RUNNING_INSTANCES = "RunningInstances"
METRIC_HOURLY_COST = "HourlyCost"  # USD per hour of the running instances, from the records' prices
METRIC_PENDING_APPROVALS = "PendingApprovals"
METRIC_UNTRACKED_INSTANCES = "UntrackedInstances"
METRIC_EXPIRED_INSTANCES = "ExpiredInstances"
METRIC_STALE_APPROVALS = "StaleApprovals"
# An approval request the approval topic refused or failed to take (a topic policy that denies,
# SNS failing past botocore's retries): the approval still waits, answerable with gpufill approve.
METRIC_APPROVALS_NOT_PUBLISHED = "ApprovalsNotPublished"
METRIC_STALE_RUNS = "StaleRuns"
METRIC_ENDING_BLOCK_INSTANCES = "EndingBlockInstances"
# ReportResult, when a run ends with instances: the seconds from its start to its fill (the
# dashboard's "time to fill"; ExecutionTime would mix in every failed, rejected or waiting run).
METRIC_TIME_TO_FILL = "TimeToFillSeconds"

# The sweep: one Lambda outside the state machine, run by EventBridge Scheduler in the
# deployment's schedule group every SWEEP_DEFAULT_MINUTES (deployment setting `sweep_every`).
SWEEP_FUNCTIONS = {"Sweep": "gpufill.handlers.sweep.handler"}
SWEEP_DEFAULT_MINUTES = 15
SWEEP_MIN_MINUTES = 5  # a pass lists every region; more often only costs API calls
SWEEP_MAX_MINUTES = 24 * 60
# A finding is notified once, then again only after this long while it lasts.
SWEEP_RENOTIFY_SECONDS = 24 * 3600
# The last pass's summary (`gpufill status`), and one item per notified finding, in the instances table.
SWEEP_SUMMARY_KEY = "sweep#last"
SWEEP_FINDING_KEY_PREFIX = "sweep-finding#"
KIND_SWEEP = "sweep"
# A teardown the sweep asks for is named from the request and instances it ends (never its finding's
# kind), so asking twice is refused by Step Functions (ExecutionAlreadyExists) and never becomes a
# second request for the same instances.
SWEEP_TEARDOWN_PREFIX = "sweep-"


def sweep_schedule_name(env: str) -> str:
    return f"gpufill-{env}-sweep"


def dashboard_name(env: str) -> str:
    return f"gpufill-{env}"


def alarm_name_prefix(env: str) -> str:
    """Every alarm of a deployment is named `gpufill-<env>-...`: the topic's key lets these publish."""
    return f"gpufill-{env}-"
# An instance launched this recently may be one a running step has not recorded yet, and a
# request that expired this recently has its own teardown on the way: neither is a finding yet.
SWEEP_GRACE_SECONDS = 15 * 60
# Executions the sweep looks up in one pass (runs whose records still say pending).
SWEEP_MAX_EXECUTION_LOOKUPS = 20
# A Capacity Block ending this soon with instances in it and no teardown pending is a finding: EC2
# begins to terminate them 30 minutes before the end, so there is half an hour left to act.
SWEEP_BLOCK_ENDING_SECONDS = 60 * 60
# Findings detailed in the summary `gpufill status` shows (all are counted).
SWEEP_LISTED_FINDINGS = 10

# --- gpufill doctor --probe ---------------------------------------------------------------
# The one key of a probe event: a function invoked with it through its probe alias makes its own
# AWS calls with DryRun and changes nothing (adapters/probe.py).
PROBE_EVENT_KEY = "gpufill_probe"
# The alias every probed function carries; the operator may invoke only it, and a function invoked
# through it does nothing but probe.
PROBE_ALIAS = "probe"

# Warm facts (policy/warm_facts.py, adapters/warm_facts.py): what one run scored or prepared, kept
# for the deployment's next runs in the instances table, one item per fact, kind KIND_WARM, no
# request_id attribute (the by-request index never returns it). The table's TTL attribute is set
# to the fact's expiry, and readers check the expiry themselves: DynamoDB deletes expired items
# only within a few days.
# - "warm#facts#<region>#<instance type>": the AZs offering the type, their spot prices and zone
#   ids, the Spot Advisor tier (ScoreRegion's answer for one type).
# - "warm#launch#<region>": the region's image, root snapshot size, security group and a subnet
#   per AZ looked up (PrepareRegion's answer).
# Spot placement scores were already shared by every run of the deployment for 10 minutes
# (adapters/placement_scores.py, the capacity table).
KIND_WARM = "warm"
WARM_FACTS_KEY_PREFIX = "warm#facts#"
WARM_LAUNCH_KEY_PREFIX = "warm#launch#"
# How long a fact is used. Spot prices move gradually (AWS smooths them over days), and a run
# ranks with facts scored at its start anyway: 10 minutes, the placement scores' own sharing
# time, covers back-to-back requests without ranking on a market older than that. The launch
# settings change only when a DLAMI is released or a person changes the regions config, the
# security group or the subnets: 15 minutes bounds how long such a change waits to be seen
# (`"facts": "fresh"` sees it at once). A launch never depends on a fact being right: the
# launch call reads capacity itself, and a stale image is resolved again (InvalidAMIID).
WARM_SCORING_TTL_SECONDS = 10 * 60
WARM_LAUNCH_TTL_SECONDS = 15 * 60
# A fact stamped this far ahead of the reader's clock is taken as written now (Lambda clocks
# agree within milliseconds); further ahead, it is not trusted at all.
WARM_CLOCK_SKEW_SECONDS = 5

# The facts refresh (policy/facts_refresh.py, handlers/refresh_facts.py): one Lambda outside the
# state machine, run by EventBridge Scheduler in the deployment's schedule group every
# FACTS_REFRESH_DEFAULT_MINUTES (deployment setting `facts_refresh_every`). It scores again and
# prepares again what runs used within FACTS_REFRESH_WINDOW_SECONDS, before the facts reach their
# TTL, so a run after an idle spell meets warm facts. Spot placement scores are not refreshed:
# AWS asks for a fresh score per capacity request and limits new configurations per 24 hours.
REFRESH_TASK = "RefreshFacts"
REFRESH_FUNCTIONS = {REFRESH_TASK: "gpufill.handlers.refresh_facts.handler"}
# Shorter than the scoring facts' TTL, so a refreshed fact is still fresh when the next pass comes.
FACTS_REFRESH_DEFAULT_MINUTES = 5
FACTS_REFRESH_MIN_MINUTES = 1  # Scheduler's shortest rate
FACTS_REFRESH_MAX_MINUTES = WARM_SCORING_TTL_SECONDS // 60 - 1
# The schedule's Input names its interval (`every_seconds`): a fact is refreshed when it would
# otherwise reach its TTL before the next pass (plus FACTS_REFRESH_MARGIN_SECONDS for Scheduler's
# delivery and the pass itself).
FACTS_REFRESH_MARGIN_SECONDS = 60
# Only what a run used this recently is refreshed: a deployment no run used for a day costs nothing.
FACTS_REFRESH_WINDOW_SECONDS = 24 * 3600
# What runs used: one item in the instances table, kind KIND_WARM, one attribute per use (the
# (region, type) scored, whether blended scoring wanted zone ids, the region launched in and its
# AZs), its TTL a window after the last use.
WARM_USED_KEY = "warm#used"
METRIC_FACTS_REFRESHED = "FactsRefreshed"  # RefreshFacts, dimension `kind` (scoring, launch)


def facts_refresh_schedule_name(env: str) -> str:
    return f"gpufill-{env}-facts-refresh"
