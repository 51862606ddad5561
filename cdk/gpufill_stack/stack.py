"""The gpufill stack: composes one construct per capability and publishes what users need."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aws_cdk import CfnOutput, Stack, Tags
from constructs import Construct
from gpufill import constants

from gpufill_stack.approval_answers import ApprovalAnswers
from gpufill_stack.event_forwarding import InterruptionRules
from gpufill_stack.facts_refresh import FactsRefresh
from gpufill_stack.functions import Functions
from gpufill_stack.instance_access import InstanceAccess
from gpufill_stack.notifications import Notifications
from gpufill_stack.operations import Operations
from gpufill_stack.paths import EXAMPLE_REQUEST
from gpufill_stack.settings import DeploySettings
from gpufill_stack.spend_guard import SpendGuard
from gpufill_stack.storage import Storage
from gpufill_stack.sweep import Sweep
from gpufill_stack.task_permissions import EVENT_TASKS, REFRESH_TASKS, REMINDER_TASKS, SWEEP_TASKS, TaskResources
from gpufill_stack.workflow import Workflow


class GpufillStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, settings: DeploySettings, **kwargs: Any) -> None:
        super().__init__(
            scope,
            construct_id,
            description=f"gpufill ({settings.env}): gets scarce GPU instances across AZs and regions",
            **kwargs,
        )
        Tags.of(self).add(constants.TAG_DEPLOYMENT, settings.env)

        storage = Storage(self, "Storage", settings=settings)
        instance_access = InstanceAccess(self, "InstanceAccess", startup_bucket=storage.startup_bucket, env=settings.env)
        notifications = Notifications(self, "Notifications", env=settings.env, approval_email=settings.approval_email)
        spend_guard = SpendGuard(self, "SpendGuard", env=settings.env)
        resources = TaskResources(
            scope=self,
            table=storage.table,
            capacity_table=storage.capacity_table,
            regions_parameter=storage.regions_parameter,
            instance_role=instance_access.role,
            approval_topic=notifications.approval_topic,
            env=settings.env,
            ebs_kms_key_arn=settings.ebs_kms_key_arn,
            ebs_kms_key_region=settings.ebs_kms_key_region,
            scheduler_role=spend_guard.role,
        )
        environment = {
            constants.ENV_INSTANCES_TABLE: storage.table.table_name,
            constants.ENV_CAPACITY_TABLE: storage.capacity_table.table_name,
            constants.ENV_REGIONS_PARAMETER: storage.regions_parameter.parameter_name,
            constants.ENV_INSTANCE_PROFILE_ARN: instance_access.instance_profile.attr_arn,
            constants.ENV_STARTUP_BUCKET: storage.startup_bucket.bucket_name,
            constants.ENV_APPROVAL_TOPIC_ARN: notifications.approval_topic.topic_arn,
            constants.ENV_DEPLOYMENT: settings.env,
            constants.ENV_SCHEDULE_GROUP: spend_guard.group_name,
            constants.ENV_SCHEDULER_ROLE_ARN: spend_guard.role.role_arn,
            constants.ENV_REMINDER_FUNCTION_ARN: spend_guard.reminder_function_arn,
            **({constants.ENV_EBS_KMS_KEY_ARN: settings.ebs_kms_key_arn} if settings.ebs_kms_key_arn else {}),
            **settings.wait_environment(),
            "POWERTOOLS_SERVICE_NAME": constants.SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": constants.METRICS_NAMESPACE,
        }
        functions = Functions(
            self,
            "Functions",
            env=settings.env,
            powertools_layer_version=settings.powertools_layer_version,
            resources=resources,
            environment=environment,
        )
        workflow = Workflow(self, "Workflow", env=settings.env, functions=functions.functions)

        arn = workflow.state_machine.state_machine_arn

        def outside_the_workflow(construct_id: str, tasks, specs) -> Functions:
            """Functions that start or answer the state machine rather than run in it."""
            return Functions(
                self,
                construct_id,
                env=settings.env,
                powertools_layer_version=settings.powertools_layer_version,
                resources=replace(resources, state_machine_arn=arn),
                environment={**environment, constants.ENV_STATE_MACHINE_ARN: arn},
                tasks=tasks,
                specs=specs,
            )

        # maintain: StartRefill (outside the state machine, which it starts) and the rules that invoke it.
        event_functions = outside_the_workflow("EventFunctions", constants.EVENT_FUNCTIONS, EVENT_TASKS)
        self.approval_answers = ApprovalAnswers(
            self,
            "ApprovalAnswers",
            settings=settings,
            resources=replace(resources, state_machine_arn=arn),
            environment={**environment, constants.ENV_STATE_MACHINE_ARN: arn},
        )
        self.interruption_rules = InterruptionRules(
            self, "InterruptionRules", env=settings.env, start_refill=event_functions.functions["StartRefill"]
        )
        # `sweep_every: off`: no Sweep function, no schedule, no alarm on its findings.
        sweep_functions = None
        # The approval reminders' target: publishes a reminder only while the approval waits.
        reminder_functions = outside_the_workflow("ReminderFunctions", constants.REMINDER_FUNCTIONS, REMINDER_TASKS)
        if settings.sweep_every_minutes is not None:
            sweep_functions = outside_the_workflow("SweepFunctions", constants.SWEEP_FUNCTIONS, SWEEP_TASKS)
            Sweep(
                self,
                "Sweep",
                env=settings.env,
                function=sweep_functions.functions["Sweep"],
                group=spend_guard.group,
                role=spend_guard.role,
                every_minutes=settings.sweep_every_minutes,
            )
        # `facts_refresh_every: off`: no RefreshFacts function and no schedule; runs keep facts on use only.
        refresh_functions = None
        if settings.facts_refresh_every_minutes is not None:
            refresh_functions = Functions(
                self,
                "RefreshFunctions",
                env=settings.env,
                powertools_layer_version=settings.powertools_layer_version,
                resources=resources,
                environment=environment,
                tasks=constants.REFRESH_FUNCTIONS,
                specs=REFRESH_TASKS,
            )
            FactsRefresh(
                self,
                "FactsRefresh",
                env=settings.env,
                function=refresh_functions.functions[constants.REFRESH_TASK],
                group=spend_guard.group,
                role=spend_guard.role,
                every_minutes=settings.facts_refresh_every_minutes,
            )
        self.operations = Operations(
            self,
            "Operations",
            env=settings.env,
            topic=notifications.approval_topic,
            state_machine=workflow.state_machine,
            functions={
                **functions.functions, **event_functions.functions,
                **(sweep_functions.functions if sweep_functions else {}), **reminder_functions.functions,
                **(refresh_functions.functions if refresh_functions else {}),
            },
            sweep_every_minutes=settings.sweep_every_minutes,
            alarm_spend_per_hour=settings.alarm_spend_per_hour,
        )
        CfnOutput(self, constants.OUTPUT_STATE_MACHINE_ARN, value=arn, description="The provisioner state machine")
        CfnOutput(self, constants.OUTPUT_INSTANCES_TABLE, value=storage.table.table_name)
        CfnOutput(self, constants.OUTPUT_STARTUP_BUCKET, value=storage.startup_bucket.bucket_name)
        CfnOutput(self, constants.OUTPUT_APPROVAL_TOPIC_ARN, value=notifications.approval_topic.topic_arn)
        CfnOutput(
            self,
            constants.OUTPUT_START_EXECUTION_COMMAND,
            description="Start a run from the repository root (pick a new --name for each run)",
            value=(
                f"aws stepfunctions start-execution --region {self.region} --state-machine-arn {arn} "
                f"--name my-run --input file://{EXAMPLE_REQUEST}"
            ),
        )

