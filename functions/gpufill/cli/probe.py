"""`gpufill doctor --probe`: each deployed function makes its own EC2 calls with DryRun.

The grants proved on the user's own account, by EC2, with each function's real role: doctor
invokes every function that makes EC2 calls through its probe alias (the only way it may invoke
one), with the regions to ask in and each region's image; the function answers with one row per
call and region (adapters/probe.py). A refusal's encoded authorization failure message is decoded
with STS DecodeAuthorizationMessage when the caller may. Calls without DryRun (DynamoDB, Step
Functions, Scheduler, SNS...) are listed as not probeable: `gpufill doctor` asks IAM's simulation
about those.
"""

from __future__ import annotations

import json

from gpufill import constants
from gpufill.cli import aws
from gpufill.policy import probe as verdicts


def run_probe(deployment: aws.Deployment, needs: dict[str, list[dict]], regions: dict) -> list[dict]:
    """Every row of the probe, each naming its function: `needs` is catalog/iam_needs.json's
    principals, `regions` the deployment's regions config."""
    facts = {region: {"image_id": _image(deployment, region, regions)} for region in regions["regions"]}
    lam = deployment.client("lambda")
    rows: list[dict] = []
    # Every function with a probe alias: the state machine's tasks, StartRefill, the sweep and the facts refresh.
    for placeholder in (*constants.LAMBDA_TASKS, *constants.EVENT_FUNCTIONS, *constants.SWEEP_FUNCTIONS, *constants.REFRESH_FUNCTIONS):
        task = placeholder.removesuffix("FunctionArn")
        actions = sorted({call["action"] for call in needs.get(task, [])})
        if not any(verdicts.dry_runnable(a) for a in actions):
            rows.extend(_row(task, a, "*", verdicts.NOT_PROBEABLE, verdicts.not_probeable(a)) for a in actions)
            continue
        rows.extend({"function": task, **row} for row in _invoke(lam, deployment.env, placeholder, facts))
    _decode(deployment, rows)
    return rows


def _invoke(lam, env: str, placeholder: str, facts: dict) -> list[dict]:
    from botocore.exceptions import BotoCoreError, ClientError

    name = constants.function_name(env, placeholder)
    try:
        reply = lam.invoke(FunctionName=name, Qualifier=constants.PROBE_ALIAS,
                           Payload=json.dumps({constants.PROBE_EVENT_KEY: {"regions": facts}}).encode())
        answer = json.loads(reply["Payload"].read() or b"null")
    except (ClientError, BotoCoreError, ValueError) as error:
        missing = isinstance(error, ClientError) and error.response.get("Error", {}).get("Code") == "ResourceNotFoundException"
        hint = " (a deployment older than the probe alias: npx cdk deploy --all)" if missing else ""
        return [_failed(f"could not invoke {name}:{constants.PROBE_ALIAS}: {_reason(error)}{hint}")]
    if "FunctionError" in reply or not isinstance(answer, dict) or not isinstance(answer.get("calls"), list):
        why = answer.get("errorMessage") if isinstance(answer, dict) else answer
        return [_failed(f"{name}:{constants.PROBE_ALIAS} failed: {why}")]
    return answer["calls"]


def _decode(deployment: aws.Deployment, rows: list[dict]) -> None:
    """A refusal's encoded reason, decoded by STS for the caller (sts:DecodeAuthorizationMessage)."""
    from botocore.exceptions import BotoCoreError, ClientError

    sts = None
    for row in rows:
        encoded = row.pop("encoded", None)
        if row["result"] != verdicts.REFUSED or not encoded:
            continue
        sts = sts or deployment.client("sts")
        try:
            document = json.loads(sts.decode_authorization_message(EncodedMessage=encoded)["DecodedMessage"])
        except (ClientError, BotoCoreError, ValueError) as error:
            row["decoded"] = f"not decoded ({_reason(error)}): needs sts:DecodeAuthorizationMessage"
            continue
        row["decoded"] = verdicts.decoded_reason(document)
        row["detail"] = row["detail"].split(":", 1)[0]  # the decoded reason says it all, shorter


def _image(deployment: aws.Deployment, region: str, regions: dict) -> str | None:
    """The image the deployment launches in `region` (the override, else AWS's public parameter):
    a launch probe names it, so EC2 judges the grant on the image too."""
    from botocore.exceptions import BotoCoreError, ClientError

    override = (regions.get("overrides") or {}).get(region, {}).get("ami")
    if override:
        return override
    try:
        ssm = deployment.session.client("ssm", region_name=region, endpoint_url=deployment.endpoint_url)
        return ssm.get_parameter(Name=constants.DLAMI_PARAMETER)["Parameter"]["Value"]
    except (ClientError, BotoCoreError):
        return None  # the launch rows then say EC2 could not find the placeholder image


def render(rows: list[dict]) -> str:
    widths = [max([len(h)] + [len(str(r.get(k, ""))) for r in rows]) for k, h in
              (("function", "function"), ("region", "region"), ("call", "call"), ("result", "result"))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(("function", "region", "call", "result"), widths)) + "  detail"]
    for r in rows:
        cells = [str(r.get(k, "")) for k in ("function", "region", "call", "result")]
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths)) + f"  {r.get('detail', '')}")
        if r.get("decoded"):
            lines.append(f"    why: {r['decoded']}")
    lines.append(verdicts.summary(rows))
    return "\n".join(lines)


def _row(function: str, call: str, region: str, result: str, detail: str) -> dict:
    return {"function": function, "call": call, "region": region, "result": result, "detail": detail}


def _failed(detail: str) -> dict:
    return {"call": "*", "region": "*", "result": verdicts.FAILED, "detail": detail}


def _reason(error: BaseException) -> str:
    response = getattr(error, "response", None)
    if isinstance(response, dict) and "Error" in response:
        return f"{response['Error'].get('Code')}: {response['Error'].get('Message')}"
    return str(error)
