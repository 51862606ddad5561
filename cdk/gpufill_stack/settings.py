"""What a deployment is told through CDK context (`cdk.json`, or `-c key=value` on the command line).

Everything is checked here, at synth: a typo in a region or an override fails `cdk synth`
with the field named, instead of failing the first run after a deploy.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from constructs import Node
from gpufill import catalog, constants
from gpufill.adapters.regions_config import RegionsConfig
from gpufill.policy.approvers import BadApprovers, parse_approvers
from pydantic import ValidationError

# The names derived from `env` (bucket, function, table, topic names) allow these characters.
_ENV_NAME = re.compile(r"[a-z][a-z0-9-]{0,19}")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
# A KMS key ARN (not an alias: IAM grants and EC2 need the key itself).
_KMS_KEY_ARN = re.compile(r"arn:aws[a-z-]*:kms:([a-z]{2}(?:-[a-z]+)+-\d):(\d{12}):key/[A-Za-z0-9-]{1,128}")
# A standard-tier SSM parameter holds at most 4 KB.
MAX_REGIONS_CONFIG_BYTES = 4096

# Used when neither context nor the CDK CLI names an account or region: synth works on a
# laptop with no AWS credentials. A real deploy gets the caller's account and region from
# the CLI (CDK_DEFAULT_ACCOUNT / CDK_DEFAULT_REGION), so these never reach AWS.
SYNTH_ONLY_ACCOUNT = "123456789012"
SYNTH_ONLY_REGION = "us-east-1"


class SettingsError(ValueError):
    """A context value that gpufill cannot deploy; the message names the key and the fix."""


@dataclass(frozen=True)
class DeploySettings:
    env: str
    regions_config: RegionsConfig
    approval_email: str | None = None
    # None: the layer carrying constants.POWERTOOLS_VERSION, found at deploy time through AWS's
    # public parameter; a number pins that layer version (a region where the parameter is missing).
    powertools_layer_version: int | None = None
    # A customer-managed key that encrypts the instances' EBS volumes (the account's default EBS
    # key, or one the launch names); None: the AWS-managed aws/ebs key, which needs no grant.
    ebs_kms_key_arn: str | None = None
    # The alarm on the running instances' cost: USD per hour (the sweep's HourlyCost metric);
    # None deploys no spend alarm.
    alarm_spend_per_hour: float | None = None
    # Minutes between two sweeps (EventBridge Scheduler); None: `off`, no sweep is scheduled.
    sweep_every_minutes: int | None = constants.SWEEP_DEFAULT_MINUTES
    # IAM ARN patterns allowed to answer approvals; () means the account's principals that hold
    # the approver policy (IAM decides who may call the function URL at all).
    approvers: tuple[str, ...] = ()
    # True: the principal that started a run may not answer its approvals.
    separate_approver: bool = False
    # wait_for_capacity's backoff for requests that do not set their own: the first wait and the
    # cap, in seconds (None: gpufill's, 60 s and 120 s, the cap the dynamic benchmark chose).
    wait_first_delay_seconds: int | None = None
    wait_max_delay_seconds: int | None = None
    # Minutes between two refreshes of the warm facts (EventBridge Scheduler); None: `off`.
    facts_refresh_every_minutes: int | None = constants.FACTS_REFRESH_DEFAULT_MINUTES

    def wait_environment(self) -> dict[str, str]:
        """The backoff settings as the functions read them (policy.waiting.deployment_backoff)."""
        found = {}
        if self.wait_first_delay_seconds is not None:
            found[constants.ENV_WAIT_FIRST_DELAY_SECONDS] = str(self.wait_first_delay_seconds)
        if self.wait_max_delay_seconds is not None:
            found[constants.ENV_WAIT_MAX_DELAY_SECONDS] = str(self.wait_max_delay_seconds)
        return found

    @property
    def ebs_kms_key_region(self) -> str | None:
        match = _KMS_KEY_ARN.fullmatch(self.ebs_kms_key_arn or "")
        return match.group(1) if match else None

    @classmethod
    def from_context(cls, node: Node) -> DeploySettings:
        context = node.try_get_context
        env = _text(context("env")) or "dev"
        if not _ENV_NAME.fullmatch(env):
            raise SettingsError(
                f"context 'env' is {env!r}: use 1-20 lowercase letters, digits or '-', starting with a letter"
            )
        regions = _json_or_list(context("regions"), "regions")
        if not regions:
            raise SettingsError("context 'regions' is missing or empty: list the regions to look for capacity in (cdk.json)")
        overrides = _json_or_list(context("region_overrides"), "region_overrides") or {}
        try:
            config = RegionsConfig.model_validate({"regions": regions, "overrides": overrides})
        except ValidationError as error:
            raise SettingsError(f"context 'regions'/'region_overrides' is not a regions config:\n{error}") from None
        _check_regions(config)
        email = _text(context("approval_email")) or None
        if email is not None and not _EMAIL.fullmatch(email):
            raise SettingsError(f"context 'approval_email' is {email!r}, which is not an email address")
        layer = context("powertools_layer_version")
        layer = None if layer in (None, "") else layer
        if layer is not None and (isinstance(layer, bool) or not str(layer).strip().isdigit() or int(layer) < 1):
            raise SettingsError(
                f"context 'powertools_layer_version' is {layer!r}: give the layer's version number, or leave it out "
                f"to use the layer AWS publishes for Powertools {constants.POWERTOOLS_VERSION}"
            )
        key = _text(context("ebs_kms_key_arn")) or None
        if key is not None and not _KMS_KEY_ARN.fullmatch(key):
            raise SettingsError(
                f"context 'ebs_kms_key_arn' is {key!r}: give the key's ARN, "
                "arn:aws:kms:REGION:ACCOUNT:key/KEY-ID (not an alias)"
            )
        spend = _spend_per_hour(context("alarm_spend_per_hour"))
        sweep = _sweep_every(context("sweep_every"))
        if spend is not None and sweep is None:
            raise SettingsError(
                "context 'alarm_spend_per_hour' needs the sweep, which measures the spend: "
                "leave 'sweep_every' on, or the spend alarm out"
            )
        try:
            approvers = parse_approvers(context("approvers"))
        except BadApprovers as error:
            raise SettingsError(f"context {error}") from None
        separate = context("separate_approver")
        if separate in (None, ""):
            separate = False
        elif isinstance(separate, str) and separate.strip().lower() in ("true", "false"):
            separate = separate.strip().lower() == "true"
        if not isinstance(separate, bool):
            raise SettingsError(f"context 'separate_approver' is {separate!r}: give true or false")
        first, cap = _wait_delay(context("wait_first_delay"), "wait_first_delay"), _wait_delay(context("wait_max_delay"), "wait_max_delay")
        if first is not None and cap is not None and first > cap:
            raise SettingsError(
                f"context 'wait_first_delay' is {first} s, longer than the cap 'wait_max_delay' ({cap} s): the waits grow from the first up to the cap"
            )
        refresh = _facts_refresh_every(context("facts_refresh_every"))
        settings = cls(
            env=env,
            facts_refresh_every_minutes=refresh,
            wait_first_delay_seconds=first,
            wait_max_delay_seconds=cap,
            alarm_spend_per_hour=spend,
            sweep_every_minutes=sweep,
            approvers=approvers,
            separate_approver=separate,
            regions_config=config,
            approval_email=email,
            powertools_layer_version=None if layer is None else int(layer),
            ebs_kms_key_arn=key,
        )
        size = len(settings.regions_config_json().encode())
        if size > MAX_REGIONS_CONFIG_BYTES:
            raise SettingsError(f"the regions config is {size} bytes; an SSM parameter holds {MAX_REGIONS_CONFIG_BYTES}")
        return settings

    def regions_config_json(self) -> str:
        """The SSM parameter value, in the shape gpufill.adapters.regions_config reads."""
        return self.regions_config.model_dump_json(exclude_defaults=True)


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _json_or_list(value: Any, key: str) -> Any:
    """cdk.json gives lists and objects; `-c key=...` gives a string: JSON, or comma-separated regions."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return None
    if text[0] in "[{":
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise SettingsError(f"context {key!r} is not valid JSON: {error}") from None
    return [part.strip() for part in text.split(",") if part.strip()]


def _check_regions(config: RegionsConfig) -> None:
    known = catalog.known_regions()
    unknown = [r for r in config.regions if r not in known]
    if unknown:
        raise SettingsError(f"context 'regions' names region(s) gpufill has no catalog data for: {', '.join(unknown)}")
    if len(set(config.regions)) != len(config.regions):
        raise SettingsError("context 'regions' lists a region more than once")
    # An override may serve a region that only some requests name, but never an unknown one (a typo).
    stray = sorted(r for r in config.overrides if r not in known)
    if stray:
        raise SettingsError(f"context 'region_overrides' names unknown region(s): {', '.join(stray)}")


def _spend_per_hour(value: Any) -> float | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        amount = float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        amount = None
    if amount is None or not amount > 0 or amount == float("inf"):
        raise SettingsError(
            f"context 'alarm_spend_per_hour' is {value!r}: give the USD per hour above which the spend alarm "
            "fires (a number above 0), or leave it out for no spend alarm"
        )
    return amount


def _sweep_every(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return constants.SWEEP_DEFAULT_MINUTES
    if isinstance(value, str) and value.strip().lower() == "off":
        return None
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or not (
        constants.SWEEP_MIN_MINUTES <= int(text) <= constants.SWEEP_MAX_MINUTES
    ):
        raise SettingsError(
            f"context 'sweep_every' is {value!r}: give the minutes between sweeps "
            f"({constants.SWEEP_MIN_MINUTES}-{constants.SWEEP_MAX_MINUTES}), or 'off'"
        )
    return int(text)


def _wait_delay(value: Any, key: str) -> int | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or not (
        constants.WAIT_MIN_DELAY_SECONDS <= int(text) <= constants.WAIT_LONGEST_DELAY_SECONDS
    ):
        raise SettingsError(
            f"context {key!r} is {value!r}: give whole seconds from {constants.WAIT_MIN_DELAY_SECONDS} to "
            f"{constants.WAIT_LONGEST_DELAY_SECONDS}, or leave it out for gpufill's"
        )
    return int(text)


_ISO_MINUTES = re.compile(r"PT(\d+)M", re.IGNORECASE)


def _facts_refresh_every(value: Any) -> int | None:
    """Minutes (`5`), an ISO 8601 duration in whole minutes (`PT5M`), or `off` / `0` for none."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return constants.FACTS_REFRESH_DEFAULT_MINUTES
    text = str(value).strip()
    if isinstance(value, str) and text.lower() in ("off", "0"):
        return None
    iso = _ISO_MINUTES.fullmatch(text)
    minutes = int(iso.group(1)) if iso else int(text) if text.isdigit() and not isinstance(value, bool) else None
    if minutes == 0 and not isinstance(value, bool):
        return None
    low, high = constants.FACTS_REFRESH_MIN_MINUTES, constants.FACTS_REFRESH_MAX_MINUTES
    if minutes is None or not low <= minutes <= high:
        raise SettingsError(
            f"context 'facts_refresh_every' is {value!r}: give the minutes between refreshes of the warm facts "
            f"({low}-{high}, shorter than their {constants.WARM_SCORING_TTL_SECONDS // 60}-minute TTL; `5` or `PT5M`), or 'off'"
        )
    return minutes
