"""A change to the CDK app reaches the local engine with no change to the engine: it deploys
whatever the synthesized template says (its own module: it opens its own simulated account)."""

import copy
from unittest import mock

import pytest

from gpufill.local.deploy import model, synth
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.engine.simulated_account import MARKET
from tests.engine.test_engine_stack import CONTEXT, template_functions


def test_a_change_to_the_app_reaches_the_engine_with_no_engine_change():
    changed = copy.deepcopy(synth.templates(CONTEXT))
    functions = template_functions(changed)
    functions["gpufill-local-LaunchBatch"]["Timeout"] = 45
    functions["gpufill-local-RankPools"]["MemorySize"] = 2048
    functions["gpufill-local-ValidateRequest"]["Environment"]["Variables"]["NEW_SETTING"] = "on"
    with mock.patch.object(model, "load", lambda env, **_: model.from_assembly(env, changed)):
        with LocalEngine(MarketScenario.model_validate(MARKET)) as engine:
            lam = engine.client("lambda")
            assert lam.get_function_configuration(FunctionName="gpufill-local-LaunchBatch")["Timeout"] == 45
            assert lam.get_function_configuration(FunctionName="gpufill-local-RankPools")["MemorySize"] == 2048
            variables = lam.get_function_configuration(FunctionName="gpufill-local-ValidateRequest")["Environment"]["Variables"]
            assert variables["NEW_SETTING"] == "on"


def test_a_malformed_grant_fails_the_deploy_as_iam_refuses_it():
    changed = copy.deepcopy(synth.templates(CONTEXT))
    [home] = [s for s in changed["stacks"] if s["name"] == "gpufill-local"]
    policy = next(
        r for r in home["template"]["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy" and r["Properties"]["PolicyName"].startswith("FunctionsLaunchBatchPolicy")
    )
    policy["Properties"]["PolicyDocument"]["Statement"][0]["Effect"] = "Maybe"
    with mock.patch.object(model, "load", lambda env, **_: model.from_assembly(env, changed)):
        with pytest.raises(Exception, match="MalformedPolicyDocument|Effect"):
            with LocalEngine(MarketScenario.model_validate(MARKET)):
                pass
    # nothing of the failed start is left: the next account starts empty, with the app as it is
    with LocalEngine(MarketScenario.model_validate(MARKET)) as engine:
        assert engine.client("lambda").get_function(FunctionName="gpufill-local-LaunchBatch")
