"""Context checking: what `-c key=value` and cdk.json may say, and what fails synth with the key named."""

from __future__ import annotations

import json

import pytest


class Context:
    def __init__(self, **values):
        self.values = values

    def try_get_context(self, key):
        return self.values.get(key)


def settings(**overrides):
    # Imported here, not at collection: every pytest-xdist worker collects this module, and the
    # CDK's modules start jsii's Node runtime (tests/infra/conftest.py).
    from gpufill_stack.deployment import cdk_json_context
    from gpufill_stack.settings import DeploySettings

    return DeploySettings.from_context(Context(**{**cdk_json_context(), **overrides}))


def test_cdk_json_defaults():
    s = settings()
    assert s.env == "dev"
    assert s.regions_config.regions == ["ap-northeast-1", "us-west-2", "us-east-1", "us-east-2", "eu-central-1"]
    assert s.approval_email is None
    assert s.powertools_layer_version is None  # the layer AWS publishes for the pinned release
    assert s.ebs_kms_key_arn is None
    assert s.alarm_spend_per_hour is None and s.sweep_every_minutes == 15
    assert json.loads(s.regions_config_json()) == {"regions": s.regions_config.regions}


def test_command_line_strings():
    s = settings(
        env="prod",
        regions="us-west-2, us-east-1",
        region_overrides='{"us-west-2": {"subnets": {"us-west-2a": "subnet-1"}, "security_group": "sg-1", "ami": "ami-1"}}',
        approval_email="ops@example.com",
        powertools_layer_version="41",
    )
    assert s.env == "prod" and s.approval_email == "ops@example.com"
    assert s.powertools_layer_version == 41
    assert json.loads(s.regions_config_json()) == {
        "regions": ["us-west-2", "us-east-1"],
        "overrides": {"us-west-2": {"subnets": {"us-west-2a": "subnet-1"}, "security_group": "sg-1", "ami": "ami-1"}},
    }


def test_the_wait_backoff_of_a_deployment_reaches_every_function_only_when_set():
    assert (settings().wait_first_delay_seconds, settings().wait_max_delay_seconds) == (None, None)
    assert settings().wait_environment() == {}
    s = settings(wait_first_delay="30", wait_max_delay=600)
    assert s.wait_environment() == {"WAIT_FIRST_DELAY_SECONDS": "30", "WAIT_MAX_DELAY_SECONDS": "600"}
    assert settings(wait_max_delay=" 300 ").wait_environment() == {"WAIT_MAX_DELAY_SECONDS": "300"}


def test_operations_settings():
    assert settings(alarm_spend_per_hour="40.5", sweep_every="30").alarm_spend_per_hour == 40.5
    assert settings(sweep_every="off").sweep_every_minutes is None
    assert settings(sweep_every=60).sweep_every_minutes == 60


def test_the_facts_refresh_is_on_every_5_minutes_unless_turned_off_and_never_as_long_as_the_ttl():
    from gpufill_stack.settings import SettingsError

    assert settings().facts_refresh_every_minutes == 5
    assert settings(facts_refresh_every="PT3M").facts_refresh_every_minutes == 3
    assert settings(facts_refresh_every=9).facts_refresh_every_minutes == 9
    assert all(settings(facts_refresh_every=v).facts_refresh_every_minutes is None for v in ("off", "OFF", "0", 0, "PT0M"))
    for bad in ("10", "PT10M", "PT1H", "-1", "5m", True, 1.5):
        with pytest.raises(SettingsError, match="context 'facts_refresh_every' is .*1-9.*'off'"):
            settings(facts_refresh_every=bad)


def test_an_ebs_kms_key_names_its_region():
    s = settings(ebs_kms_key_arn="arn:aws:kms:eu-central-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab")
    assert s.ebs_kms_key_region == "eu-central-1"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"env": "Prod_1"}, "context 'env'"),
        ({"regions": []}, "context 'regions' is missing"),
        ({"regions": ["us-west-2", "mars-north-1"]}, "mars-north-1"),
        ({"regions": ["us-west-2", "us-west-2"]}, "more than once"),
        ({"region_overrides": {"us-west2": {"ami": "ami-1"}}}, "us-west2"),
        ({"region_overrides": {"us-west-2": {"amis": "ami-1"}}}, "amis"),
        ({"region_overrides": "{not json"}, "not valid JSON"),
        ({"approval_email": "ops"}, "approval_email"),
        ({"powertools_layer_version": "latest"}, "powertools_layer_version"),
        ({"ebs_kms_key_arn": "alias/aws/ebs"}, "context 'ebs_kms_key_arn'.*not an alias"),
        ({"ebs_kms_key_arn": "arn:aws:kms:us-east-1:123456789012:alias/ebs"}, "ebs_kms_key_arn"),
        ({"alarm_spend_per_hour": "lots"}, "context 'alarm_spend_per_hour'"),
        ({"alarm_spend_per_hour": -3}, "alarm_spend_per_hour"),
        ({"sweep_every": "2"}, "context 'sweep_every'"),
        ({"sweep_every": "often"}, "sweep_every"),
        ({"sweep_every": "off", "alarm_spend_per_hour": 40}, "alarm_spend_per_hour' needs the sweep"),
        ({"wait_max_delay": "5"}, "context 'wait_max_delay' is '5': give whole seconds from 10 to 21600"),
        ({"wait_first_delay": "PT1M"}, "context 'wait_first_delay'"),
        ({"wait_max_delay": True}, "context 'wait_max_delay'"),
        ({"wait_first_delay": 600, "wait_max_delay": 300}, "'wait_first_delay' is 600 s, longer than the cap 'wait_max_delay'"),
    ],
)
def test_bad_context_fails_with_the_key_named(overrides, message):
    from gpufill_stack.settings import SettingsError

    with pytest.raises(SettingsError, match=message):
        settings(**overrides)
