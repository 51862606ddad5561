"""startup.sh on a pretend instance: stub commands on PATH, every path under tmp_path."""

import os
import re
import stat

import pytest
from startup_sandbox import STARTUP_DIR

REGION = "ap-northeast-1"
BUCKET = "gpufill-startup-123456789012"
IMAGE = "vllm/vllm-openai:v0.10.1.1"
MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct"
ARGS = ("--region", REGION, "--bucket", BUCKET, "--image", IMAGE, "--model-id", MODEL)
TIMESTAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ gpufill-startup: \S")


def start(sandbox, *args, **env):
    result = sandbox.run("startup.sh", *(args or ARGS), **env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def docker_run_args(sandbox):
    (run,) = sandbox.calls_to("docker", "run")
    return run[2:]


def option(args, name):
    return args[args.index(name) + 1]


def test_storage_then_watchdog_then_parallel_fetch_then_server(sandbox):
    start(sandbox)
    nvme = sandbox.env["GPUFILL_NVME_DIR"]

    # Storage: the unformatted instance-store disk (not the EBS root) is formatted and
    # mounted, and docker's and containerd's data move onto it.
    assert sandbox.calls_to("mkfs.ext4") == [["mkfs.ext4", "-q", "-L", "gpufill-nvme", "/dev/nvme1n1"]]
    assert ["mount", "-o", "noatime", "/dev/nvme1n1", nvme] in sandbox.calls()
    for daemon_dir, name in (("GPUFILL_DOCKER_DIR", "docker"), ("GPUFILL_CONTAINERD_DIR", "containerd")):
        assert ["mount", "--bind", f"{nvme}/{name}", sandbox.env[daemon_dir]] in sandbox.calls()
    assert sandbox.index("systemctl", "stop") < sandbox.index("mount", "--bind") < sandbox.index("systemctl", "start")
    storage_done = sandbox.index("systemctl", "start", "containerd.service", "docker.service")

    # The watchdog is in place before the long fetch, so a stuck boot still powers off.
    watchdog_enabled = sandbox.index("systemctl", "enable", "gpufill-idle-watchdog.timer")
    assert storage_done < sandbox.index("systemctl", "daemon-reload") < watchdog_enabled

    # Pull and sync both start before either finishes, and both finish before the server.
    pull = sandbox.index("docker", "pull")
    sync = sandbox.index("aws", "s3", "sync")
    pulled = sandbox.index("docker:done", "pull")
    synced = sandbox.index("aws:done", "s3", "sync")
    assert watchdog_enabled < min(pull, sync)
    assert max(pull, sync) < min(pulled, synced), "pull and sync ran one after the other"
    assert max(pulled, synced) < sandbox.index("docker", "run")
    assert sandbox.calls_to("aws", "s3", "sync")[0][3:5] == [
        f"s3://{BUCKET}/models/{MODEL}/",
        f"{nvme}/models/{MODEL}",
    ]
    first_probe = next(n for n, c in enumerate(sandbox.calls()) if c[0] == "curl" and c[-1].startswith("http://127.0.0.1:"))
    assert sandbox.index("docker", "run") < first_probe


def test_server_container_arguments(sandbox):
    start(sandbox)
    args = docker_run_args(sandbox)
    assert option(args, "--publish") == "127.0.0.1:8000:8000"
    assert option(args, "--gpus") == "all"
    assert "--ipc=host" in args
    assert option(args, "--name") == "gpufill-vllm"
    assert option(args, "--volume") == f"{sandbox.env['GPUFILL_NVME_DIR']}/models:/models:ro"
    server_args = args[args.index(IMAGE) + 1:]
    assert option(server_args, "--model") == f"/models/{MODEL}"
    assert option(server_args, "--served-model-name") == MODEL
    assert option(server_args, "--gpu-memory-utilization") == "0.90"
    assert option(server_args, "--max-model-len") == "16384"
    assert "--enable-auto-tool-choice" in server_args
    assert option(server_args, "--tool-call-parser") == "hermes"
    assert option(server_args, "--tensor-parallel-size") == "1"
    assert ["curl", "--silent", "--fail", "--max-time", "5", "--output", "/dev/null",
            "http://127.0.0.1:8000/v1/models"] in sandbox.calls()


def test_watchdog_units_written_and_enabled(sandbox):
    start(sandbox)
    units = sandbox.path("GPUFILL_SYSTEMD_DIR")
    watchdog = sandbox.path("GPUFILL_HOME") / "idle-watchdog.sh"
    service = (units / "gpufill-idle-watchdog.service").read_text()
    timer = (units / "gpufill-idle-watchdog.timer").read_text()

    assert watchdog.read_bytes() == (STARTUP_DIR / "idle-watchdog.sh").read_bytes()
    assert watchdog.stat().st_mode & stat.S_IXUSR
    assert ["aws", "s3", "cp", f"s3://{BUCKET}/scripts/idle-watchdog.sh", str(watchdog),
            "--region", REGION, "--only-show-errors"] in sandbox.calls()
    assert f"ExecStart={watchdog}\n" in service
    assert 'Environment="GPUFILL_IDLE_MINUTES=60"' in service
    assert 'Environment="GPUFILL_CONTAINER_NAME=gpufill-vllm"' in service
    assert "OnUnitActiveSec=5min\n" in timer
    assert "WantedBy=timers.target" in timer
    assert ["systemctl", "enable", "gpufill-idle-watchdog.timer"] in sandbox.calls()
    assert (sandbox.path("GPUFILL_STATE_DIR") / "last-activity").exists()


def step_lines(lines):
    """Each step's messages in the order they were written: `image` and `model` run in
    parallel, so only the order within a step is promised, not how the two interleave."""
    steps = {}
    for line in lines:
        message = line.split(" gpufill-startup: ", 1)[1]
        steps.setdefault(message.split(":", 1)[0], []).append(line)
    return steps


def test_every_step_is_logged_with_a_timestamp(sandbox):
    result = start(sandbox)
    log = sandbox.path("GPUFILL_LOG_FILE").read_text().splitlines()
    assert log and all(TIMESTAMPED.match(line) for line in log), log
    # stdout and the log carry the same lines; the parallel steps may interleave differently.
    assert sorted(result.stdout.splitlines()) == sorted(log)
    steps = step_lines(log)
    assert step_lines(result.stdout.splitlines()) == steps
    assert list(steps) in (
        ["starting", "storage", "watchdog", "image", "model", "server", "ready"],
        ["starting", "storage", "watchdog", "model", "image", "server", "ready"],
    ), list(steps)
    messages = {step: [line.split(f"gpufill-startup: {step}: ", 1)[1] for line in lines]
                for step, lines in steps.items()}
    assert messages["image"] == [f"pulling {IMAGE}", f"pulled {IMAGE}"]
    assert [m.split(" ", 1)[0] for m in messages["model"]] == ["syncing", "synced"]
    # Sequential steps come whole: nothing of a later step is logged before an earlier one ends.
    position = {line: i for i, line in enumerate(log)}
    order = ["starting", "storage", "watchdog", ("image", "model"), "server", "ready"]
    for before, after in zip(order, order[1:]):
        before_lines = [ln for s in (before if isinstance(before, tuple) else (before,)) for ln in steps[s]]
        after_lines = [ln for s in (after if isinstance(after, tuple) else (after,)) for ln in steps[s]]
        assert max(map(position.get, before_lines)) < min(map(position.get, after_lines)), (before, after)
    for lines in steps.values():
        stamps = [line.split(" ", 1)[0] for line in lines]
        assert stamps == sorted(stamps), lines


def test_second_run_is_idempotent(sandbox):
    start(sandbox)
    units = sandbox.path("GPUFILL_SYSTEMD_DIR")
    first_units = {p.name: p.read_text() for p in units.iterdir()}
    sandbox.forget_calls()

    start(sandbox)
    assert sandbox.calls_to("mkfs.ext4") == [], "a mounted disk must never be formatted again"
    assert sandbox.calls_to("mount") == []
    assert sandbox.calls_to("systemctl", "stop") == []
    assert sandbox.index("docker", "rm", "--force", "gpufill-vllm") < sandbox.index("docker", "run")
    assert len(sandbox.calls_to("docker", "run")) == 1
    assert {p.name: p.read_text() for p in units.iterdir()} == first_units
    assert ["systemctl", "restart", "gpufill-idle-watchdog.timer"] in sandbox.calls()


def test_formatted_but_unmounted_disk_is_mounted_not_formatted(sandbox):
    (sandbox.state / "formatted").write_text("/dev/nvme1n1\n")
    start(sandbox)
    assert sandbox.calls_to("mkfs.ext4") == []
    assert ["mount", "-o", "noatime", "/dev/nvme1n1", sandbox.env["GPUFILL_NVME_DIR"]] in sandbox.calls()


def test_dlami_instance_store_is_used_as_mounted(sandbox):
    (sandbox.state / "mounts").write_text(sandbox.env["GPUFILL_NVME_DIR"] + "\n")
    start(sandbox)
    assert sandbox.calls_to("mkfs.ext4") == []
    assert sandbox.calls_to("lsblk") == []
    assert [c[-1] for c in sandbox.calls_to("mount", "--bind")] == [
        sandbox.env["GPUFILL_DOCKER_DIR"], sandbox.env["GPUFILL_CONTAINERD_DIR"],
    ]


def test_without_instance_store_the_root_volume_is_used(sandbox):
    (sandbox.state / "disks").write_text("/dev/nvme0n1 Amazon Elastic Block Store\n")
    result = start(sandbox)
    assert sandbox.calls_to("mkfs.ext4") == []
    assert "no free NVMe instance store" in result.stdout
    assert sandbox.calls_to("mount") == [] and sandbox.calls_to("systemctl", "stop") == []
    assert sandbox.calls_to("docker", "run")


def test_failed_model_sync_stops_with_a_clear_message(sandbox):
    result = sandbox.run("startup.sh", *ARGS, STUB_FAIL_SYNC="1")
    assert result.returncode != 0
    assert f"model sync failed (exit 1) for model {MODEL} from s3://{BUCKET}/models/{MODEL}/" in result.stderr
    assert "AccessDenied" in result.stderr  # the CLI's own reason is kept
    assert sandbox.calls_to("docker:done", "pull"), "the pull is awaited, not abandoned"
    assert sandbox.calls_to("docker", "run") == []
    log = sandbox.path("GPUFILL_LOG_FILE").read_text().splitlines()
    assert any("model sync failed" in line for line in log)
    assert "FAILED (exit 1)" in log[-1]


def test_failed_image_pull_stops_with_a_clear_message(sandbox):
    result = sandbox.run("startup.sh", *ARGS, STUB_FAIL_PULL="1")
    assert result.returncode != 0
    assert f"image pull failed (exit 1) for {IMAGE}" in result.stderr
    assert sandbox.calls_to("aws:done", "s3", "sync"), "the sync is awaited, not abandoned"
    assert sandbox.calls_to("docker", "run") == []


def test_model_missing_from_the_bucket_is_named(sandbox):
    # A sync of a prefix nobody uploaded to succeeds and brings nothing.
    result = sandbox.run("startup.sh", *ARGS[:6], "--model-id", "acme/not-uploaded", STUB_EMPTY_PREFIX="1")
    assert result.returncode != 0
    assert (
        f"model acme/not-uploaded has no config.json under s3://{BUCKET}/models/acme/not-uploaded/;"
        f" upload it with: aws s3 sync ./MODEL_DIR s3://{BUCKET}/models/acme/not-uploaded/"
    ) in result.stderr
    assert sandbox.calls_to("docker", "run") == []


def test_environment_overrides_model_and_port(sandbox):
    start(sandbox, "--region", REGION, "--bucket", BUCKET, "--image", IMAGE,
          GPUFILL_MODEL_ID="meta-llama/Llama-3.1-8B-Instruct", GPUFILL_PORT="9000",
          GPUFILL_MAX_MODEL_LEN="8192", GPUFILL_GPU_MEMORY_UTILIZATION="0.85")
    args = docker_run_args(sandbox)
    assert option(args, "--publish") == "127.0.0.1:9000:8000"
    assert option(args, "--model") == "/models/meta-llama/Llama-3.1-8B-Instruct"
    assert option(args, "--served-model-name") == "meta-llama/Llama-3.1-8B-Instruct"
    assert option(args, "--max-model-len") == "8192"
    assert option(args, "--gpu-memory-utilization") == "0.85"
    assert sandbox.calls_to("aws", "s3", "sync")[0][3] == f"s3://{BUCKET}/models/meta-llama/Llama-3.1-8B-Instruct/"
    probes = [c[-1] for c in sandbox.calls_to("curl") if "169.254.169.254" not in c[-1]]  # not the metadata service
    assert probes[0] == "http://127.0.0.1:9000/v1/models"


def test_options_win_over_environment(sandbox):
    start(sandbox, *ARGS, "--port", "9100", "--tool-call-parser", "llama3_json",
          "--idle-minutes", "30", "--idle-check-minutes", "2",
          GPUFILL_PORT="9000", GPUFILL_TOOL_CALL_PARSER="mistral", GPUFILL_IDLE_MINUTES="90")
    args = docker_run_args(sandbox)
    assert option(args, "--publish") == "127.0.0.1:9100:8000"
    assert option(args, "--tool-call-parser") == "llama3_json"
    units = sandbox.path("GPUFILL_SYSTEMD_DIR")
    assert 'Environment="GPUFILL_IDLE_MINUTES=30"' in (units / "gpufill-idle-watchdog.service").read_text()
    assert "OnUnitActiveSec=2min\n" in (units / "gpufill-idle-watchdog.timer").read_text()


def test_tensor_parallel_uses_the_gpus_the_model_divides_over(sandbox):
    # 28 attention heads, 4 KV heads (the stub's config.json): 8 GPUs -> 4, not 7 or 8.
    start(sandbox, STUB_GPUS="8")
    assert option(docker_run_args(sandbox), "--tensor-parallel-size") == "4"


def test_ecr_image_logs_in_to_its_registry_first(sandbox):
    registry = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
    start(sandbox, "--region", REGION, "--bucket", BUCKET, "--image", f"{registry}/vllm-openai:v1")
    assert ["aws", "ecr", "get-login-password", "--region", "us-west-2"] in sandbox.calls()
    login = sandbox.index("docker", "login", "--username", "AWS", "--password-stdin", registry)
    assert login < sandbox.index("docker", "pull")


def test_public_image_needs_no_login(sandbox):
    start(sandbox)
    assert sandbox.calls_to("docker", "login") == []
    assert sandbox.calls_to("aws", "ecr") == []


def test_server_that_never_answers_fails_with_its_log(sandbox):
    result = sandbox.run("startup.sh", *ARGS, STUB_FAIL_CURL="1", GPUFILL_READY_TIMEOUT_SECONDS="0")
    assert result.returncode != 0
    assert "did not answer on 127.0.0.1:8000" in result.stderr
    assert ["docker", "logs", "--tail", "50", "gpufill-vllm"] in sandbox.calls()


@pytest.mark.parametrize(
    "args, message",
    [
        (("--region", REGION, "--image", IMAGE), "no bucket"),
        (("--bucket", BUCKET, "--image", IMAGE), "no region"),
        ((*ARGS, "--model-id", "../../etc"), "is not of the form ORG/NAME"),
        ((*ARGS, "--port", "80000"), "is not a TCP port"),
        ((*ARGS, "--gpu-memory-utilization", "90"), "is not a fraction"),
        ((*ARGS, "--idle-minutes", "0"), "idle minutes '0'"),
    ],
)
def test_unusable_settings_stop_before_touching_the_machine(sandbox, args, message):
    result = sandbox.run("startup.sh", *args)
    assert result.returncode != 0
    assert message in result.stderr
    assert sandbox.calls() == []


def test_unknown_option_is_refused(sandbox):
    result = sandbox.run("startup.sh", *ARGS, "--gpus", "2")
    assert result.returncode == 2
    assert "unknown option: --gpus" in result.stderr


def test_help_lists_every_setting(sandbox):
    result = sandbox.run("startup.sh", "--help")
    assert result.returncode == 0
    script = (STARTUP_DIR / "startup.sh").read_text()
    for variable in set(re.findall(r"\$\{(GPUFILL_[A-Z_]+):-", script)):
        assert variable in result.stdout, f"{variable} is read but not documented"
    assert sandbox.calls() == []


def test_sandbox_never_leaves_tmp_path(sandbox):
    # Guard for the tests themselves: every path the script writes is redirected.
    for name, value in sandbox.env.items():
        if name.startswith("GPUFILL_") and name.endswith(("_DIR", "_FILE", "_HOME")):
            assert os.path.commonpath([value, str(sandbox.root)]) == str(sandbox.root)
