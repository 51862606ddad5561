"""LaunchBatch stops starting launch calls when its function is close to its timeout; the next
step goes on where it stopped. Locally the time left is the deployed timeout minus the wall time
the invocation has taken, as on Lambda."""

from tests.support import tried, zone

# The three cheapest zones are sold out: one step tries four pools before one launches.
MARKET = {
    "regions": {
        "us-west-2": {
            "advisor_tier": {"g6.xlarge": 0},
            "zones": {
                "us-west-2a": zone(0.40, spot=0),
                "us-west-2b": zone(0.41, spot=0),
                "us-west-2c": zone(0.42, spot=0),
                "us-west-2d": zone(0.43, spot=5),
            },
        }
    }
}
REQUEST = {"instance_types": ["g6.xlarge"], "regions": ["us-west-2"], "launch_mode": "partial", "count": 1}
EXPECTED_TRIES = [
    ("us-west-2a", 1, 0, "capacity"),
    ("us-west-2b", 1, 0, "capacity"),
    ("us-west-2c", 1, 0, "capacity"),
    ("us-west-2d", 1, 1, "launched"),
]


def launch_steps(execution) -> int:
    return execution.entered().count("LaunchBatch")


def test_with_its_deployed_timeout_one_launch_step_tries_every_pool(local_account):
    with local_account(MARKET) as engine:
        deployed = engine.client("lambda").get_function_configuration(FunctionName="gpufill-local-LaunchBatch")
        assert deployed["Timeout"] == engine.functions["gpufill-local-LaunchBatch"].timeout_seconds > 60
        execution = engine.run(REQUEST, name="time-enough")
    assert execution.status == "SUCCEEDED", execution.cause
    assert tried(execution) == EXPECTED_TRIES
    assert launch_steps(execution) == 1


def test_a_launch_step_near_its_timeout_makes_one_call_and_the_next_step_goes_on(local_account):
    with local_account(MARKET) as engine:
        # Less than the 30 s LaunchBatch keeps for one more call: after its first call the step ends.
        engine.client("lambda").update_function_configuration(FunctionName="gpufill-local-LaunchBatch", Timeout=29)
        execution = engine.run(REQUEST, name="short-on-time")
    assert execution.status == "SUCCEEDED", execution.cause
    assert tried(execution) == EXPECTED_TRIES
    assert launch_steps(execution) == 4
    assert execution.metrics["launch_calls"] == 4
