"""Operations: the deployment's alarms and its CloudWatch dashboard (docs/operations.md).

Every alarm notifies the deployment's topic (Notifications), the one approvers already read.
The metrics are AWS's own (AWS/States for the state machine, AWS/Lambda per function) and
gpufill's (namespace constants.METRICS_NAMESPACE, emitted by the handlers with Powertools, each
with the dimensions `service` and `deployment`); every gpufill metric named here is one a
handler emits (tests/infra checks it against the code).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct
from gpufill import constants

# A failed, timed-out or aborted run, a function error or throttle: looked at over five minutes.
RUN_PERIOD = Duration.minutes(5)
# The dashboard's lines: one point an hour shows a day; the sweep's gauges use its own interval.
DASHBOARD_PERIOD = Duration.hours(1)


class Operations(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        env: str,
        topic: sns.ITopic,
        state_machine: sfn.IStateMachine,
        functions: Mapping[str, lambda_.IFunction],
        sweep_every_minutes: int | None,
        alarm_spend_per_hour: float | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.env = env
        self.action = actions.SnsAction(topic)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        # The sweep's gauges are written once a pass: read over one interval (at least CloudWatch's 5 minutes).
        sweep_period = Duration.minutes(max(sweep_every_minutes or constants.SWEEP_DEFAULT_MINUTES, 5))

        for outcome, metric in {
            "failed": state_machine.metric_failed(period=RUN_PERIOD, statistic="Sum"),
            "timed-out": state_machine.metric_timed_out(period=RUN_PERIOD, statistic="Sum"),
            "aborted": state_machine.metric_aborted(period=RUN_PERIOD, statistic="Sum"),
        }.items():
            self._alarm(f"runs-{outcome}", metric, 1, f"gpufill ({env}): a run ended {outcome}; `gpufill runs` lists it")
        for placeholder, function in sorted(functions.items()):
            task = placeholder.removesuffix("FunctionArn")
            self._alarm(
                f"{task}-errors",
                function.metric_errors(period=RUN_PERIOD, statistic="Sum"),
                1,
                f"gpufill ({env}): {task} failed an invocation; its log group /aws/lambda/{constants.function_name(env, placeholder)} says why",
            )
            self._alarm(
                f"{task}-throttles",
                function.metric_throttles(period=RUN_PERIOD, statistic="Sum"),
                1,
                f"gpufill ({env}): Lambda throttled {task}; the account's concurrency is used up",
            )
        self._alarm(
            "approvals-not-published",
            self.metric(constants.METRIC_APPROVALS_NOT_PUBLISHED, "Sum", RUN_PERIOD),
            1,
            f"gpufill ({env}): the approval topic refused an approval request; the approval still waits: "
            "`gpufill status` lists it, `gpufill approve|reject` answer it",
        )
        if sweep_every_minutes is not None:
            self._alarm(
                "untracked-instances",
                self.metric(constants.METRIC_UNTRACKED_INSTANCES, "Maximum", sweep_period),
                1,
                f"gpufill ({env}): instances tagged for this deployment run without a request; the sweep asked for their teardown",
            )
            self._alarm(
                "approvals-waiting",
                self.metric(constants.METRIC_STALE_APPROVALS, "Maximum", sweep_period),
                1,
                f"gpufill ({env}): an approval has waited past half its deadline; answer it with gpufill approve|reject",
            )
        if alarm_spend_per_hour is not None:
            self._alarm(
                "spend-per-hour",
                self.metric(constants.METRIC_HOURLY_COST, "Maximum", sweep_period),
                alarm_spend_per_hour,
                f"gpufill ({env}): the running instances cost more than {alarm_spend_per_hour:g} USD per hour; "
                "`gpufill status` lists them",
                above=True,
            )
        self.dashboard = self._dashboard(state_machine, sweep_period)

    def metric(self, name: str, statistic: str, period: Duration) -> cloudwatch.Metric:
        """A gpufill metric of this deployment (Powertools writes `service` and `deployment` on each)."""
        return cloudwatch.Metric(
            namespace=constants.METRICS_NAMESPACE,
            metric_name=name,
            dimensions_map={"service": constants.SERVICE_NAME, constants.METRIC_DIMENSION_DEPLOYMENT: self.env},
            statistic=statistic,
            period=period,
        )

    def search(self, name: str, dimensions: list[str], label: str, period: Duration) -> cloudwatch.MathExpression:
        """Every dimension value of a metric (a line per outcome, or per region and type)."""
        keys = ",".join(sorted(["service", constants.METRIC_DIMENSION_DEPLOYMENT, *dimensions]))
        expression = (
            f"SEARCH('{{{constants.METRICS_NAMESPACE},{keys}}} MetricName=\"{name}\" "
            f"{constants.METRIC_DIMENSION_DEPLOYMENT}=\"{self.env}\"', 'Sum', {int(period.to_seconds())})"
        )
        return cloudwatch.MathExpression(expression=expression, label=label, period=period, using_metrics={})

    def _alarm(self, suffix: str, metric: cloudwatch.IMetric, threshold: float, description: str, *, above: bool = False) -> None:
        alarm = cloudwatch.Alarm(
            self,
            f"Alarm-{suffix}",
            alarm_name=f"{constants.alarm_name_prefix(self.env)}{suffix}",
            alarm_description=description,
            metric=metric,
            threshold=threshold,
            evaluation_periods=1,
            comparison_operator=(
                cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
                if above
                else cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
            ),
            # No data is no run, no invocation, or no sweep: nothing wrong to say.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(self.action)
        self.alarms[suffix] = alarm

    def _dashboard(self, state_machine: sfn.IStateMachine, sweep_period: Duration) -> cloudwatch.Dashboard:
        hour = DASHBOARD_PERIOD
        dashboard = cloudwatch.Dashboard(
            self, "Dashboard", dashboard_name=constants.dashboard_name(self.env), default_interval=Duration.days(7)
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Runs by outcome (executions ending each hour)",
                left=[
                    state_machine.metric_succeeded(period=hour, statistic="Sum", label="succeeded"),
                    state_machine.metric_failed(period=hour, statistic="Sum", label="failed"),
                    state_machine.metric_timed_out(period=hour, statistic="Sum", label="timed out"),
                    state_machine.metric_aborted(period=hour, statistic="Sum", label="aborted"),
                ],
                right=[self.search(constants.METRIC_RUNS_FINISHED, ["outcome"], "provisioning runs by result", hour)],
                width=12,
            ),
            # Runs that ended with instances only (ReportResult's TimeToFillSeconds): the state
            # machine's ExecutionTime would mix in failed runs, rejected purchases and status views.
            cloudwatch.GraphWidget(
                title="Time to fill (runs that ended with instances, seconds)",
                left=[
                    self.metric(constants.METRIC_TIME_TO_FILL, "p50", hour).with_(label="median"),
                    self.metric(constants.METRIC_TIME_TO_FILL, "p90", hour).with_(label="p90"),
                ],
                width=12,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Capacity answers by region, type and outcome",
                left=[self.search(constants.METRIC_CAPACITY_ANSWERS, ["region", "instance_type", "outcome"], "", hour)],
                width=24,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Instances running and their cost",
                left=[self.metric(constants.METRIC_RUNNING_INSTANCES, "Maximum", sweep_period).with_(label="running instances")],
                right=[self.metric(constants.METRIC_HOURLY_COST, "Maximum", sweep_period).with_(label="USD per hour")],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Approvals waiting",
                left=[
                    self.metric(constants.METRIC_PENDING_APPROVALS, "Maximum", sweep_period).with_(label="pending"),
                    self.metric(constants.METRIC_STALE_APPROVALS, "Maximum", sweep_period).with_(label="past half their deadline"),
                ],
                width=12,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="The sweep's findings",
                left=[
                    self.metric(constants.METRIC_UNTRACKED_INSTANCES, "Maximum", sweep_period).with_(label="untracked instances"),
                    self.metric(constants.METRIC_EXPIRED_INSTANCES, "Maximum", sweep_period).with_(label="past max_lifetime"),
                    self.metric(constants.METRIC_ENDING_BLOCK_INSTANCES, "Maximum", sweep_period).with_(label="in a Capacity Block ending within the hour"),
                    self.metric(constants.METRIC_STALE_APPROVALS, "Maximum", sweep_period).with_(label="approvals past half their deadline"),
                    self.metric(constants.METRIC_STALE_RUNS, "Maximum", sweep_period).with_(label="ended runs with pending records"),
                ],
                width=12,
            ),
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=12),
        )
        return dashboard
