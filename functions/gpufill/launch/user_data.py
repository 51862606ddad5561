"""User data for a gpufill instance: the 3-line bootstrap that fetches and runs startup.sh.

The canonical template is ``startup/bootstrap.sh``. Lambda only ships the ``gpufill``
package, so a byte-identical copy lives beside this module as ``bootstrap.sh.tmpl``
(package data); ``tests/startup`` fails when the two differ. A copy checked by a test is
simpler and more honest than a runtime path lookup that works on a laptop and breaks
in Lambda. Pure Python: no boto3.
"""

from __future__ import annotations

import base64
import re
import string
from importlib import resources

# --- DEFAULTS (names other parts share will move to gpufill.constants) ---------------
DEFAULT_IMAGE = "vllm/vllm-openai:v0.10.1.1"
DEFAULT_MODEL_ID = "Qwen/Qwen2.5-Coder-7B-Instruct"
MODEL_SERVER_PORT = 8000  # vLLM listens on 127.0.0.1:8000; reach it through SSM port forwarding
STARTUP_SCRIPT_KEY = "scripts/startup.sh"
MODELS_PREFIX = "models/"
BOOTSTRAP_TEMPLATE = "bootstrap.sh.tmpl"
# EC2 documents 16 KB of raw user data. We hold the base64-encoded form, which is what
# travels in the RunInstances call, to the same number: stricter, so never rejected.
MAX_USER_DATA_BYTES = 16 * 1024
# --------------------------------------------------------------------------------------

# Every value lands inside double quotes in a shell script: allow no character that a
# shell would interpret there ($, `, ", \) and no whitespace.
SAFE_VALUES = {
    "region": re.compile(r"[a-z]{2}(-[a-z]+)+-\d+"),
    "bucket": re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"),
    "image": re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*"),
    "model_id": re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*"),
}


def encoded_size(user_data: str) -> int:
    """Bytes the user data takes once base64-encoded for RunInstances."""
    return len(base64.b64encode(user_data.encode("utf-8")))


def check_user_data_size(user_data: str) -> int:
    """Return the encoded size; raise ValueError naming it when over MAX_USER_DATA_BYTES."""
    size = encoded_size(user_data)
    if size > MAX_USER_DATA_BYTES:
        raise ValueError(
            f"user data is {size} bytes base64-encoded, over the EC2 limit of "
            f"{MAX_USER_DATA_BYTES} bytes; keep it a bootstrap and move logic to startup.sh"
        )
    return size


def _template() -> string.Template:
    text = resources.files(__package__).joinpath(BOOTSTRAP_TEMPLATE).read_text(encoding="utf-8")
    return string.Template(text)


def render_user_data(
    *,
    region: str,
    bucket: str,
    image: str,
    model_id: str,
) -> str:
    """Render the bootstrap for one instance.

    ``region`` is the startup bucket's region (the AWS CLI on the instance calls S3
    there); ``bucket`` holds ``scripts/startup.sh`` and ``models/<model_id>/``;
    ``image`` is the vLLM serving image (DEFAULT_IMAGE unless a request names one);
    ``model_id`` the model to sync and serve (DEFAULT_MODEL_ID likewise).
    Raises ValueError for a value that is not safe to place in the script, or when the
    result is too big for EC2.
    """
    values = {"region": region, "bucket": bucket, "image": image, "model_id": model_id}
    bad = [
        f"{name}={value!r}"
        for name, value in values.items()
        if not isinstance(value, str) or not SAFE_VALUES[name].fullmatch(value) or ".." in value
    ]
    if bad:
        raise ValueError("cannot put into user data: " + ", ".join(bad))
    user_data = _template().substitute(values)
    check_user_data_size(user_data)
    return user_data
