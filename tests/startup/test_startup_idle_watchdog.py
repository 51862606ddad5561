"""idle-watchdog.sh: power off only after the idle window passed without a POST /v1 request."""

import os
import time

import pytest

ACCESS_LOG = (
    'INFO:     172.17.0.1:51234 - "GET /v1/models HTTP/1.1" 200 OK\n'
    'INFO:     172.17.0.1:51240 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
)


@pytest.fixture
def watchdog(sandbox):
    state_dir = sandbox.path("GPUFILL_STATE_DIR")
    state_dir.mkdir(parents=True)
    last_activity = state_dir / "last-activity"

    def run(idle_for_minutes: float, docker_logs: str = "", **env: str):
        last_activity.touch()
        then = time.time() - idle_for_minutes * 60
        os.utime(last_activity, (then, then))
        (sandbox.state / "docker-logs").write_text(docker_logs)
        sandbox.forget_calls()
        result = sandbox.run("idle-watchdog.sh", **env)
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    run.powered_off = lambda: ["systemctl", "poweroff"] in sandbox.calls()
    run.last_activity = last_activity
    run.sandbox = sandbox
    return run


def test_requests_in_the_window_keep_the_instance_up(watchdog):
    result = watchdog(idle_for_minutes=120, docker_logs=ACCESS_LOG)
    assert not watchdog.powered_off()
    assert "1 POST /v1 request(s) in the last 60 min" in result.stdout
    assert time.time() - watchdog.last_activity.stat().st_mtime < 60, "the idle clock moves on"
    assert ["docker", "logs", "--since", "60m", "gpufill-vllm"] in watchdog.sandbox.calls()


def test_no_requests_for_the_idle_window_powers_off(watchdog):
    result = watchdog(idle_for_minutes=61, docker_logs='INFO: "GET /v1/models HTTP/1.1" 200 OK\n')
    assert watchdog.powered_off()
    assert "powering off" in result.stdout


def test_no_requests_but_within_the_window_stays_up(watchdog):
    result = watchdog(idle_for_minutes=20)
    assert not watchdog.powered_off()
    assert "idle for 20 of 60 min" in result.stdout


def test_missing_container_counts_as_idle(watchdog):
    watchdog(idle_for_minutes=61, STUB_DOCKER_LOGS_FAIL="1")
    assert watchdog.powered_off()


def test_idle_window_is_configurable(watchdog):
    watchdog(idle_for_minutes=11, GPUFILL_IDLE_MINUTES="10", GPUFILL_CONTAINER_NAME="my-vllm")
    assert watchdog.powered_off()
    assert ["docker", "logs", "--since", "10m", "my-vllm"] in watchdog.sandbox.calls()


def test_busy_log_is_read_whole(watchdog):
    # Thousands of lines after the request: a grep that stopped early would break the
    # pipe and, under pipefail, misread a busy server as idle.
    busy = ACCESS_LOG + "".join(f"INFO: token throughput line {i}\n" for i in range(20000))
    watchdog(idle_for_minutes=120, docker_logs=busy)
    assert not watchdog.powered_off()
