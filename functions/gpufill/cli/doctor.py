"""`gpufill doctor`: is this account ready for a deployed gpufill to launch GPUs?

One line per check, each with a verdict: `ok`, `warn` (gpufill works, with less room than it
could have) or `fail` (a run would be refused). Exit 1 on any failure. Checks, in order:
- the deployment's stack and its regions;
- the deployed roles' grants, asked of IAM itself (SimulatePrincipalPolicy) for every call the
  local engine's runs needed (catalog/iam_needs.json, written by `make iam-report`);
- per region: the Spot and On-Demand vCPU quotas of the G and P families, and the Deep Learning AMI
  that the public parameter names;
- the service-linked roles Spot and EC2 Fleet use;
- the Powertools layer the functions carry against AWS's public parameter for the pinned release.

`--probe` instead has each deployed function make its own EC2 calls with DryRun (cli/probe.py).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

from gpufill import catalog, constants
from gpufill.cli import aws
from gpufill.cli.common import EXIT_FAILED, EXIT_OK, print_json

OK, WARN, FAIL = "ok", "warn", "fail"
# Service Quotas codes of the vCPU quotas EC2 counts GPU instances against, per family and market.
QUOTA_CODES = {
    ("G", "spot"): "L-3819A6DF",  # All G and VT Spot Instance Requests
    ("G", "on-demand"): "L-DB2E81BA",  # Running On-Demand G and VT instances
    ("P", "spot"): "L-7212CCBC",  # All P Spot Instance Requests
    ("P", "on-demand"): "L-417A185B",  # Running On-Demand P instances
}
# Spot creates the first, EC2 Fleet the second, on first use, when the caller may create them.
SERVICE_LINKED_ROLES = {
    "AWSServiceRoleForEC2Spot": "spot.amazonaws.com",
    "AWSServiceRoleForEC2Fleet": "ec2fleet.amazonaws.com",
}
IAM_NEEDS = Path(__file__).resolve().parents[1] / "catalog" / "iam_needs.json"


@dataclass
class Check:
    check: str
    target: str
    verdict: str
    detail: str
    fix: str | None = None


def add_parser(verbs) -> None:
    doctor = verbs.add_parser(
        "doctor",
        help="check that the account is ready: IAM grants, GPU quotas, AMIs, service-linked roles, the Powertools layer",
        description="Reads the deployment and asks AWS, one line per check; exit 1 when any check fails.",
    )
    doctor.add_argument("--json", action="store_true", help="print the checks as one JSON document")
    doctor.add_argument(
        "--probe", action="store_true",
        help="instead: have each deployed function make its own EC2 calls with DryRun in every region "
             "(granted, refused with the reason, or not probeable); exit 1 when any is refused",
    )
    aws.add_deployment_options(doctor)
    doctor.set_defaults(handler=doctor_verb)


def doctor_verb(args: argparse.Namespace) -> int:
    deployment = aws.find(args)
    if args.probe:
        return probe_verb(deployment, as_json=args.json)
    checks = run_checks(deployment)
    failed = any(c.verdict == FAIL for c in checks)
    if args.json:
        print_json({"deployment": deployment.env, "region": deployment.region, "ok": not failed,
                    "checks": [asdict(c) for c in checks]})
    else:
        print(render(checks))
    return EXIT_FAILED if failed else EXIT_OK


def probe_verb(deployment: aws.Deployment, *, as_json: bool) -> int:
    from gpufill.cli import probe
    from gpufill.policy.probe import failing, summary

    checks: list[Check] = []
    regions = _guarded(checks, "regions", deployment.env, lambda: _regions(deployment))
    if regions is None:
        print(render(checks))
        return EXIT_FAILED
    needs = json.loads(IAM_NEEDS.read_text())["principals"] if IAM_NEEDS.exists() else {}
    rows = probe.run_probe(deployment, needs, regions)
    failed = bool(failing(rows)) or not rows
    if as_json:
        print_json({"deployment": deployment.env, "regions": regions["regions"], "ok": not failed,
                    "summary": summary(rows), "calls": rows})
    else:
        print(probe.render(rows))
    return EXIT_FAILED if failed else EXIT_OK


def render(checks: list[Check]) -> str:
    width = max(len(c.check) for c in checks)
    target_width = max(len(c.target) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.verdict.upper():4}  {c.check:{width}}  {c.target:{target_width}}  {c.detail}")
        if c.fix and c.verdict != OK:
            lines.append(f"{'':4}  {'':{width}}  {'':{target_width}}  fix: {c.fix}")
    failed = sum(c.verdict == FAIL for c in checks)
    warned = sum(c.verdict == WARN for c in checks)
    lines.append(f"{len(checks)} checks: {failed} failed, {warned} warnings" if failed or warned else f"{len(checks)} checks: all ok")
    return "\n".join(lines)


def run_checks(deployment: aws.Deployment) -> list[Check]:
    checks: list[Check] = []
    regions = _guarded(checks, "regions", deployment.env, lambda: _regions(deployment))
    if regions is None:
        return checks
    checks.append(Check("regions", deployment.env, OK, ", ".join(regions["regions"])))
    checks.extend(iam_checks(deployment))
    for region in regions["regions"]:
        checks.extend(quota_checks(deployment, region))
        override = (regions.get("overrides") or {}).get(region, {}).get("ami")
        checks.append(_guarded_check("ami", region, lambda r=region, o=override: ami_check(deployment, r, o)))
    for role, service in SERVICE_LINKED_ROLES.items():
        checks.append(_guarded_check("service-linked role", role, lambda r=role, s=service: role_check(deployment, r, s)))
    checks.append(_guarded_check("powertools layer", deployment.region, lambda: layer_check(deployment)))
    return checks


# --- the checks ------------------------------------------------------------------------------


def _regions(deployment: aws.Deployment) -> dict:
    ssm = deployment.client("ssm")
    value = ssm.get_parameter(Name=constants.regions_parameter_name(deployment.env))["Parameter"]["Value"]
    return json.loads(value)


def quota_checks(deployment: aws.Deployment, region: str) -> list[Check]:
    quotas = deployment.session.client("service-quotas", region_name=region, endpoint_url=deployment.endpoint_url)
    checks = []
    for (family, market), code in QUOTA_CODES.items():
        smallest = smallest_vcpus(family)
        target = f"{region} {family} {market}"

        def one(code=code, smallest=smallest, family=family, market=market) -> Check:
            value = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
            return quota_verdict(region, family, market, code, value, smallest)

        checks.append(_guarded_check("vcpu quota", target, one))
    return checks


def quota_verdict(region: str, family: str, market: str, code: str, value: float, smallest: int) -> Check:
    target = f"{region} {family} {market}"
    if value >= smallest:
        return Check("vcpu quota", target, OK, f"{value:g} vCPUs ({code}): room for {int(value // smallest)} of the smallest {family} type")
    return Check(
        "vcpu quota", target, WARN,
        f"{value:g} vCPUs ({code}): not one {family} instance ({smallest} vCPUs) can launch here",
        f"aws service-quotas request-service-quota-increase --region {region} --service-code ec2 "
        f"--quota-code {code} --desired-value {max(smallest, 4 * smallest)}",
    )


def smallest_vcpus(family: str) -> int:
    """vCPUs of the smallest x86_64 type of a quota family gpufill knows (its AMI is x86_64)."""
    sizes = [
        catalog.vcpus(t) for t in catalog.known_instance_types()
        if t[0].upper() == family and catalog.architecture(t) == constants.SUPPORTED_ARCHITECTURE
    ]
    return min(s for s in sizes if s)


def ami_check(deployment: aws.Deployment, region: str, override: str | None) -> Check:
    ec2 = deployment.session.client("ec2", region_name=region, endpoint_url=deployment.endpoint_url)
    if override:
        image, source = override, "regions config override"
    else:
        ssm = deployment.session.client("ssm", region_name=region, endpoint_url=deployment.endpoint_url)
        image, source = ssm.get_parameter(Name=constants.DLAMI_PARAMETER)["Parameter"]["Value"], "public parameter"
    images = ec2.describe_images(ImageIds=[image]).get("Images", [])
    if not images or images[0].get("State") != "available":
        return Check("ami", region, FAIL, f"{image} ({source}) is not an available image here",
                     "name an AMI in cdk.json region_overrides, or drop the region")
    return Check("ami", region, OK, f"{image} ({source}): {images[0].get('Name', '')}".rstrip(": "))


def role_check(deployment: aws.Deployment, role: str, service: str) -> Check:
    from botocore.exceptions import ClientError

    try:
        deployment.client("iam").get_role(RoleName=role)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "NoSuchEntity":
            raise
        return Check("service-linked role", role, WARN, "missing: EC2 creates it at the first launch that needs it, "
                     "if that launch may create it", f"aws iam create-service-linked-role --aws-service-name {service}")
    return Check("service-linked role", role, OK, "present")


def layer_check(deployment: aws.Deployment) -> Check:
    from botocore.exceptions import ClientError

    name = constants.powertools_layer_parameter()
    try:
        published = deployment.client("ssm").get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError:
        published = None
    function = constants.function_name(deployment.env, "LaunchBatchFunctionArn")
    layers = [layer["Arn"] for layer in deployment.client("lambda").get_function_configuration(FunctionName=function).get("Layers", [])]
    carried = [arn for arn in layers if ":layer:AWSLambdaPowertoolsPython" in arn]
    if not carried:
        return Check("powertools layer", deployment.region, FAIL, f"{function} carries no Powertools layer",
                     "deploy again: npx cdk deploy --all")
    if published is None:
        return Check("powertools layer", deployment.region, WARN,
                     f"{carried[0]}; AWS publishes no {name} here to compare with")
    if carried[0] != published:
        return Check("powertools layer", deployment.region, FAIL,
                     f"{function} carries {carried[0]}, but Powertools {constants.POWERTOOLS_VERSION} is {published}",
                     "deploy again: npx cdk deploy --all")
    return Check("powertools layer", deployment.region, OK, f"{published} (Powertools {constants.POWERTOOLS_VERSION})")


def iam_checks(deployment: aws.Deployment) -> list[Check]:
    """Every (role, action, resource, context) the local engine's runs were granted, asked of IAM
    against the deployed role: the grants on AWS, judged by AWS."""
    if not IAM_NEEDS.exists():
        return [Check("iam", deployment.env, WARN, f"no {IAM_NEEDS.name}: run `make iam-report` to record what runs need")]
    needs = json.loads(IAM_NEEDS.read_text())
    iam = deployment.client("iam")
    account = deployment.state_machine_arn.split(":")[4]
    names = {"${Account}": account, "${Env}": deployment.env, "${HomeRegion}": deployment.state_machine_arn.split(":")[3],
             "${StartupBucket}": deployment.outputs.get(constants.OUTPUT_STARTUP_BUCKET, "")}
    checks = []
    for principal, calls in sorted(needs["principals"].items()):
        if principal == constants.FORWARDING_PRINCIPAL:
            # One role per region other than home, each made from the same template.
            regions = _guarded(checks, "iam", principal, lambda: _regions(deployment)["regions"]) or []
            for region in regions:
                if region != deployment.region:
                    checks.append(_guarded_check("iam", f"{principal} {region}", partial(
                        _forwarding_check, deployment, iam, names, region, calls)))
            continue

        def one(principal=principal, calls=calls) -> Check:
            role_arn = principal_role_arn(deployment, principal)
            if "${InstanceRoleArn}" not in names:
                names["${InstanceRoleArn}"] = principal_role_arn(deployment, "Instance")
            if "${SchedulerRoleArn}" not in names:
                names["${SchedulerRoleArn}"] = principal_role_arn(deployment, "Scheduler")
            denied = _denied(iam, role_arn, partial(_filled, names), calls)
            if denied:
                return Check("iam", principal, FAIL, f"{len(denied)} of {len(calls)} calls denied: " + "; ".join(denied[:3]),
                             "deploy this version of gpufill: npx cdk deploy --all")
            return Check("iam", principal, OK, f"{len(calls)} calls allowed")

        checks.append(_guarded_check("iam", principal, one))
    return checks


def _forwarding_check(deployment: aws.Deployment, iam, names: dict[str, str], region: str, calls: list[dict]) -> Check:
    partition, account = deployment.state_machine_arn.split(":")[1], names["${Account}"]
    from botocore.exceptions import ClientError

    role = constants.forwarding_role_name(deployment.env, region)
    target = f"{constants.FORWARDING_PRINCIPAL} {region}"
    try:
        denied = _denied(iam, f"arn:{partition}:iam::{account}:role/{role}", partial(_filled, names), calls)
    except ClientError as error:
        if error.response["Error"]["Code"] != "NoSuchEntity":
            raise
        return Check("iam", target, FAIL, f"no role {role}: {region}'s EC2 interruptions never reach StartRefill",
                     f"deploy the region's stack {constants.forwarding_stack_name(deployment.env, region)}: npx cdk deploy --all")
    if denied:
        return Check("iam", target, FAIL, f"{len(denied)} of {len(calls)} calls denied: " + "; ".join(denied[:3]),
                     "deploy this version of gpufill: npx cdk deploy --all")
    return Check("iam", target, OK, f"{len(calls)} calls allowed")


def _denied(iam, role_arn: str, fill: Callable[[str], str], calls: list[dict]) -> list[str]:
    """The calls IAM would refuse the role, each as `<action> on <resource> (<decision>)`."""
    denied = []
    for call in calls:
        answer = iam.simulate_principal_policy(
            PolicySourceArn=role_arn,
            ActionNames=[call["action"]],
            ResourceArns=[fill(call["resource"])],
            ContextEntries=[
                {"ContextKeyName": k, "ContextKeyValues": [fill(x) for x in v] if isinstance(v, list) else [fill(v)],
                 "ContextKeyType": "stringList" if isinstance(v, list) else "string"}
                for k, v in call.get("context", {}).items()
            ],
        )
        decision = answer["EvaluationResults"][0]["EvalDecision"]
        if decision != "allowed":
            denied.append(f"{call['action']} on {call['resource']} ({decision})")
    return denied


def principal_role_arn(deployment: aws.Deployment, principal: str) -> str:
    """The deployed role of a principal the needs file names: a function by its task
    (`LaunchBatch`), the state machine, the instances, or EventBridge Scheduler's role."""
    if principal == "StateMachine":
        return deployment.client("stepfunctions").describe_state_machine(stateMachineArn=deployment.state_machine_arn)["roleArn"]
    if principal in ("Instance", "Scheduler"):
        launcher = constants.function_name(deployment.env, "LaunchBatchFunctionArn")
        variables = deployment.client("lambda").get_function_configuration(FunctionName=launcher)["Environment"]["Variables"]
        if principal == "Scheduler":
            return variables[constants.ENV_SCHEDULER_ROLE_ARN]
        profile = variables[constants.ENV_INSTANCE_PROFILE_ARN].rsplit("/", 1)[-1]
        return deployment.client("iam").get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]["Roles"][0]["Arn"]
    function = constants.function_name(deployment.env, principal)
    return deployment.client("lambda").get_function_configuration(FunctionName=function)["Role"]


def _filled(names: dict[str, str], text: str) -> str:
    for placeholder, value in names.items():
        text = text.replace(placeholder, value)
    return text


# --- plumbing ----------------------------------------------------------------------------------


def _guarded(checks: list[Check], name: str, target: str, read: Callable[[], Any]) -> Any:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return read()
    except (ClientError, BotoCoreError, ValueError, KeyError) as error:
        checks.append(Check(name, target, FAIL, f"could not read: {_reason(error)}"))
        return None


def _guarded_check(name: str, target: str, check: Callable[[], Check]) -> Check:
    """A check whose own AWS call failed fails, saying why; the other checks still run."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return check()
    except (ClientError, BotoCoreError) as error:
        return Check(name, target, FAIL, f"could not check: {_reason(error)}")


def _reason(error: BaseException) -> str:
    response = getattr(error, "response", None)
    if isinstance(response, dict) and "Error" in response:
        return f"{response['Error'].get('Code')}: {response['Error'].get('Message')}"
    return str(error)
