"""Faults of the account around a run: a second deployment, a newer AMI published mid-run."""

from unittest import mock

from tests.support.audit import REQUEST, assert_exactly_once, live_instances


def test_two_deployments_running_the_same_execution_name_share_nothing(account):
    with account(env_names=("local", "prod")) as engine:
        dev = engine.run(REQUEST, name="same-name", env="local")
        prod = engine.run(REQUEST, name="same-name", env="prod")
        dev_ids, prod_ids = live_instances("same-name", deployment="local"), live_instances("same-name", deployment="prod")
        assert len(dev_ids) == len(prod_ids) == 4 and not dev_ids & prod_ids
        # A teardown in one deployment never ends the other's instances.
        teardown = engine.run({"action": "teardown", "request_id": "same-name"}, name="end-dev", env="local",
                              decision="approved")
        assert teardown.output["status"] == "TERMINATED"
        assert live_instances("same-name", deployment="prod") == prod_ids
        assert not live_instances("same-name", deployment="local")
    assert {i["instance_id"] for i in dev.output["instances"]} == dev_ids
    assert {i["instance_id"] for i in prod.output["instances"]} == prod_ids


def test_a_retried_launch_step_in_a_cold_container_sends_the_same_image(account):
    """Every resolution of the AMI answers a newer image (a cold container after a publish):
    the launch step never resolves, so its retry sends the identical call."""
    images = iter(f"ami-{n:017x}" for n in range(1, 100))
    with account() as engine:
        from gpufill.adapters import ami, ec2

        sent = []
        original = ec2.run_instances
        engine.faults.lambda_invoke("LaunchBatch", error="Sandbox.Timedout", after_handler=True)
        with mock.patch.object(ami, "image_for", side_effect=lambda region: next(images)):

            def spy(pool, **kwargs):
                sent.append(kwargs["spec"].image_id)
                return original(pool, **kwargs)

            with mock.patch.object(ec2, "run_instances", spy):
                execution = engine.run(REQUEST, name="cold-ami")
        assert_exactly_once(engine, execution, launched=4)
    assert len(set(sent)) == 1 and len(sent) >= 2  # the retry repeated the first step's calls
