"""Two gpufill deployments in one simulated account: each with its own functions,
Environment, tables, topic and state machine, as two `cdk deploy -c env=...` would leave."""

import pytest

from gpufill import constants
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario

from tests.engine.simulated_account import MARKET, WEST

REQUEST = {"count": 1, "regions": [WEST], "instance_types": ["g6.xlarge"], "market": "on-demand", "root_volume_gib": 100}


@pytest.fixture(scope="module")
def account():
    # "prod" is added to the running account (tests/faults and tests/workflow start with both):
    # the suite's one second deployment, whose synth (about 12 s of CPU on a fresh clone) they share.
    with LocalEngine(MarketScenario.model_validate(MARKET)) as engine:
        engine.deploy("prod")
        yield engine


def test_each_deployment_has_its_own_functions_with_their_own_environment(account):
    config = account.client("lambda").get_function_configuration(FunctionName="gpufill-prod-LaunchBatch")
    variables = config["Environment"]["Variables"]
    assert variables[constants.ENV_DEPLOYMENT] == "prod"
    assert variables[constants.ENV_INSTANCES_TABLE] == constants.instances_table_name("prod")
    assert account.deployments["local"].state_machine_arn != account.deployments["prod"].state_machine_arn


def records(account, env):
    table = account.client("dynamodb").scan(TableName=constants.instances_table_name(env))
    return [i for i in table["Items"] if "kind" not in i and i["instance_id"]["S"].startswith("i-")]


def test_a_run_of_one_deployment_writes_only_that_deployments_table(account):
    execution = account.run(REQUEST, name="same-name", env="prod")
    assert execution.status == "SUCCEEDED", execution.cause
    assert len(records(account, "prod")) == 1 and records(account, "local") == []
    # the same execution name in the other deployment is another state machine's execution
    other = account.run(REQUEST, name="same-name", env="local")
    assert other.arn != execution.arn and ":gpufill-provisioner-local:" in other.arn


def test_a_deployment_can_be_added_to_a_running_account(account):
    assert account.env_names == ("local",) and set(account.deployments) == {"local", "prod"}
    assert account.client("lambda").get_function(FunctionName="gpufill-prod-ValidateRequest")
    with pytest.raises(ValueError, match="env"):
        account.deploy("prod")


def test_between_invocations_the_environment_is_the_first_deployments_again(account):
    import os

    account.run(REQUEST, name="env-restored", env="prod")
    assert os.environ[constants.ENV_DEPLOYMENT] == "local"
    assert os.environ[constants.ENV_INSTANCES_TABLE] == constants.instances_table_name("local")
    with account.as_deployment("prod"):
        assert os.environ[constants.ENV_INSTANCES_TABLE] == constants.instances_table_name("prod")
    assert os.environ[constants.ENV_DEPLOYMENT] == "local"
