"""Which AWS API calls a Lambda handler can reach, read from the source (no imports, no AWS).

Starting at a handler function, follow calls and references to functions of the same module
and of other gpufill modules, and collect the boto3 operations they make. Each operation maps
to the IAM action it needs. A boto3-looking call this map does not know fails the test that
uses it, so a new kind of call cannot slip past the permission check unnoticed.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "functions"

# boto3 operation (client method, paginator name, or resource method) -> IAM actions it needs.
ACTIONS: dict[str, tuple[str, ...]] = {
    "describe_instance_type_offerings": ("ec2:DescribeInstanceTypeOfferings",),
    "describe_spot_price_history": ("ec2:DescribeSpotPriceHistory",),
    "describe_capacity_reservations": ("ec2:DescribeCapacityReservations",),
    "describe_capacity_block_offerings": ("ec2:DescribeCapacityBlockOfferings",),
    "purchase_capacity_block": ("ec2:PurchaseCapacityBlock", "ec2:CreateTags"),
    "describe_availability_zones": ("ec2:DescribeAvailabilityZones",),
    "describe_instances": ("ec2:DescribeInstances",),
    "describe_images": ("ec2:DescribeImages",),
    "describe_vpcs": ("ec2:DescribeVpcs",),
    "describe_subnets": ("ec2:DescribeSubnets",),
    "describe_security_groups": ("ec2:DescribeSecurityGroups",),
    "create_security_group": ("ec2:CreateSecurityGroup", "ec2:CreateTags"),
    # Tags at launch, the instance profile passes its role, and an account's first spot
    # request has EC2 create its Spot service-linked role.
    "run_instances": ("ec2:RunInstances", "ec2:CreateTags", "iam:PassRole", "iam:CreateServiceLinkedRole"),
    # A fleet launches from a launch template with RunInstances' own checks, tags and role.
    "create_fleet": (
        "ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateTags", "iam:PassRole", "iam:CreateServiceLinkedRole",
    ),
    "describe_fleets": ("ec2:DescribeFleets",),
    "create_launch_template": ("ec2:CreateLaunchTemplate", "ec2:CreateTags"),
    "create_launch_template_version": ("ec2:CreateLaunchTemplateVersion",),
    "delete_launch_template_versions": ("ec2:DeleteLaunchTemplateVersions",),
    "terminate_instances": ("ec2:TerminateInstances",),
    "create_placement_group": ("ec2:CreatePlacementGroup", "ec2:CreateTags"),
    "describe_placement_groups": ("ec2:DescribePlacementGroups",),
    "delete_placement_group": ("ec2:DeletePlacementGroup",),
    "get_spot_placement_scores": ("ec2:GetSpotPlacementScores",),
    "get_parameter": ("ssm:GetParameter",),
    "get_item": ("dynamodb:GetItem",),
    "put_item": ("dynamodb:PutItem",),
    "update_item": ("dynamodb:UpdateItem",),
    "delete_item": ("dynamodb:DeleteItem",),
    "query": ("dynamodb:Query",),
    "scan": ("dynamodb:Scan",),
    "batch_get_item": ("dynamodb:BatchGetItem",),
    "batch_writer": ("dynamodb:BatchWriteItem",),
    "batch_write_item": ("dynamodb:BatchWriteItem",),
    # The topic is encrypted with the deployment's own key: SNS uses it on the publisher's behalf.
    "publish": ("sns:Publish", "kms:GenerateDataKey", "kms:Decrypt"),
    "send_task_success": ("states:SendTaskSuccess",),
    "send_task_failure": ("states:SendTaskFailure",),
    "start_execution": ("states:StartExecution",),
    "describe_execution": ("states:DescribeExecution",),
    "get_execution_history": ("states:GetExecutionHistory",),
    "lookup_events": ("cloudtrail:LookupEvents",),
    # A schedule runs with a role the caller passes to Scheduler.
    "create_schedule": ("scheduler:CreateSchedule", "iam:PassRole"),
    "update_schedule": ("scheduler:UpdateSchedule", "iam:PassRole"),
    "delete_schedule": ("scheduler:DeleteSchedule",),
}
# Method names shaped like AWS operations: one of these not in ACTIONS is reported as unknown.
_OPERATION = re.compile(r"(describe|get|put|create|delete|run|terminate|update|batch|send|list|start|stop)_[a-z_]+")
_NOT_AWS = {"get_paginator", "get_remaining_time_in_millis", "get_logger", "get_correlation_id", "get_close_matches"}


class Reach:
    def __init__(self) -> None:
        self.actions: set[str] = set()
        self.unknown: set[str] = set()
        self._seen: set[tuple[str, str]] = set()

    def visit(self, module: str, function: str) -> None:
        if (module, function) in self._seen:
            return
        self._seen.add((module, function))
        parsed = _module(module)
        if parsed is None or function not in parsed.functions:
            return
        for node in ast.walk(parsed.functions[function]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                self._operation(node)
            if isinstance(node, ast.Name):
                if node.id in parsed.functions:
                    self.visit(module, node.id)
                elif node.id in parsed.imported_names:
                    self.visit(*parsed.imported_names[node.id])
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id in parsed.imported_modules:
                    self.visit(parsed.imported_modules[node.value.id], node.attr)

    def _operation(self, call: ast.Call) -> None:
        name = call.func.attr
        if name == "get_paginator" and call.args and isinstance(call.args[0], ast.Constant):
            name = call.args[0].value
        if name in ACTIONS:
            self.actions.update(ACTIONS[name])
        elif _OPERATION.fullmatch(name) and name not in _NOT_AWS:
            self.unknown.add(name)


class _Parsed:
    def __init__(self, tree: ast.Module, package: str) -> None:
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.imported_modules: dict[str, str] = {}
        self.imported_names: dict[str, tuple[str, str]] = {}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gpufill"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if _path(full) is not None:
                        self.imported_modules[alias.asname or alias.name] = full
                    else:
                        self.imported_names[alias.asname or alias.name] = (node.module, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("gpufill") and alias.asname:
                        self.imported_modules[alias.asname] = alias.name


def _path(module: str) -> Path | None:
    base = PACKAGE_ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def _module(module: str) -> _Parsed | None:
    path = _path(module)
    return None if path is None else _Parsed(ast.parse(path.read_text()), module)


def reachable(handler_path: str) -> Reach:
    """`gpufill.handlers.launch_batch.handler` -> the AWS calls that handler can make."""
    module, function = handler_path.rsplit(".", 1)
    reach = Reach()
    reach.visit(module, function)
    return reach
