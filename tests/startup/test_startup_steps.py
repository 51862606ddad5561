"""startup.sh reports each step in its own instance's tag gpufill:startup-step (ready_timeout):
in order, "serving" last, "failed: <step>" when it stops, and never stops because a report failed."""

import json

from startup_sandbox import STARTUP_DIR, Sandbox

from gpufill.local.scenario import STARTUP_TIMELINE

REGION = "ap-northeast-1"
BUCKET = "gpufill-startup-123456789012"
IMAGE = "vllm/vllm-openai:v0.10.1.1"
MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct"
ARGS = ("--region", REGION, "--bucket", BUCKET, "--image", IMAGE, "--model-id", MODEL)
INSTANCE = "i-0123456789abcdef0"
IMDS = "http://169.254.169.254"
FETCH_STEPS = {"pulling image and syncing model"}


def reported(sandbox: Sandbox) -> list[str]:
    """The steps startup.sh tagged its instance with, in order; each call is checked whole."""
    steps = []
    for call in sandbox.calls_to("aws", "ec2", "create-tags"):
        assert call[3:7] == ["--region", "us-west-2", "--resources", INSTANCE], call
        assert call[9:] == ["--cli-connect-timeout", "5", "--cli-read-timeout", "10"], call
        (tag,) = json.loads(call[call.index("--tags") + 1])
        assert tag["Key"] == "gpufill:startup-step"
        steps.append(tag["Value"])
    return steps


def test_every_step_is_reported_in_order_and_serving_comes_last(sandbox):
    result = sandbox.run("startup.sh", *ARGS)
    assert result.returncode == 0, result.stderr
    steps = reported(sandbox)
    # The pull and the sync run at once: the step then names whichever is still running.
    assert steps[:3] == ["preparing storage", "installing watchdog", "pulling image and syncing model"]
    assert steps[3] in ("syncing model", "pulling image")
    assert steps[4:] == ["starting vLLM", "loading model", "serving"]


def test_each_report_comes_when_its_step_begins(sandbox):
    assert sandbox.run("startup.sh", *ARGS).returncode == 0

    def tagged(step):
        return next(n for n, c in enumerate(sandbox.calls())
                    if c[:3] == ["aws", "ec2", "create-tags"] and json.loads(c[8])[0]["Value"] == step)

    assert tagged("preparing storage") < sandbox.index("mkfs.ext4")
    assert sandbox.index("systemctl", "start") < tagged("installing watchdog") < sandbox.index("systemctl", "daemon-reload")
    assert tagged("pulling image and syncing model") < min(sandbox.index("docker", "pull"), sandbox.index("aws", "s3", "sync"))
    assert max(sandbox.index("docker:done", "pull"), sandbox.index("aws:done", "s3", "sync")) < tagged("starting vLLM")
    assert tagged("starting vLLM") < sandbox.index("docker", "run") < tagged("loading model")
    probes = [n for n, c in enumerate(sandbox.calls()) if c[0] == "curl" and c[-1].startswith("http://127.0.0.1:")]
    assert tagged("loading model") < probes[0] <= probes[-1] < tagged("serving")


def test_the_instance_is_found_through_imdsv2(sandbox):
    assert sandbox.run("startup.sh", *ARGS).returncode == 0
    imds = [c for c in sandbox.calls_to("curl") if c[-1].startswith(IMDS)]
    assert [c[-1] for c in imds] == [f"{IMDS}/latest/api/token", f"{IMDS}/latest/meta-data/instance-id",
                                     f"{IMDS}/latest/meta-data/placement/region"]
    assert "PUT" in imds[0] and "X-aws-ec2-metadata-token-ttl-seconds: 21600" in imds[0]
    assert all("X-aws-ec2-metadata-token: stub-imds-token" in c for c in imds[1:])


def test_a_failed_report_never_stops_the_startup(sandbox):
    result = sandbox.run("startup.sh", *ARGS, STUB_FAIL_TAGGING="1")
    assert result.returncode == 0, result.stderr
    assert sandbox.calls_to("docker", "run"), "the server still starts"
    log = sandbox.path("GPUFILL_LOG_FILE").read_text()
    assert "WARNING: could not report step 'preparing storage' in tag gpufill:startup-step; startup goes on" in log
    assert "WARNING: could not report step 'serving'" in log
    assert log.splitlines()[-1].endswith("could not report step 'serving' in tag gpufill:startup-step; startup goes on")


def test_without_the_metadata_service_steps_are_logged_not_reported(sandbox):
    result = sandbox.run("startup.sh", *ARGS, STUB_NO_IMDS="1")
    assert result.returncode == 0, result.stderr
    assert reported(sandbox) == []
    assert "did not say which instance this is; steps are logged but not reported" in result.stdout
    assert sandbox.calls_to("docker", "run")


def test_a_failed_sync_reports_the_step_it_stopped_at(sandbox):
    result = sandbox.run("startup.sh", *ARGS, STUB_FAIL_SYNC="1")
    assert result.returncode != 0
    assert reported(sandbox)[-1] == "failed: syncing model"
    assert "serving" not in reported(sandbox)


def test_a_failed_pull_reports_the_pull_even_when_the_sync_finished_last(sandbox):
    result = sandbox.run("startup.sh", *ARGS, STUB_FAIL_PULL="1")
    assert result.returncode != 0
    assert reported(sandbox)[-1] == "failed: pulling image"


def test_a_server_that_never_answers_reports_failed_while_loading(sandbox):
    result = sandbox.run("startup.sh", *ARGS, STUB_FAIL_CURL="1", GPUFILL_READY_TIMEOUT_SECONDS="0")
    assert result.returncode != 0
    assert reported(sandbox)[-2:] == ["loading model", "failed: loading model"]


def test_an_unusable_setting_reports_nothing(sandbox):
    result = sandbox.run("startup.sh", *ARGS, "--port", "80000")
    assert result.returncode != 0
    assert reported(sandbox) == [] and sandbox.calls() == []


def test_the_local_engine_models_the_steps_startup_sh_reports():
    script = (STARTUP_DIR / "startup.sh").read_text()
    for step, _ in STARTUP_TIMELINE:
        assert f'report_step "{step}"' in script or f"report_step {step}\n" in script, step
