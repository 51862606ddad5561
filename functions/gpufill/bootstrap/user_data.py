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

# A Hugging Face repo id, as the Hub itself checks it: `owner/name`, each part letters, digits,
# `-`, `_` and `.`, neither starting nor ending with `-` or `.`, no `--` or `..`, at most 96
# characters. The model lands in S3 under models/<model_id>/, so `..` must never reach a path.
_HF_PART = r"(?!.*(?:--|\.\.))[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?"
MODEL_ID_PATTERN = re.compile(rf"(?!.*/.*/)(?:{_HF_PART})/(?:{_HF_PART})", re.ASCII)
MAX_MODEL_ID_LENGTH = 2 * 96 + 1

# An OCI image reference per the distribution reference grammar
# (github.com/distribution/reference): [registry[:port]/]path[:tag][@sha256:digest], the path in
# lowercase components joined by `.`, `_`, `__` or dashes. IPv6 registry hosts are not accepted.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_REGISTRY = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?"
_IMAGE_NAME = rf"(?:{_REGISTRY}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
IMAGE_PATTERN = re.compile(rf"{_IMAGE_NAME}(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?(?:@sha256:[0-9a-f]{{64}})?", re.ASCII)
# The name part may be 255 characters; a 128-character tag and a digest come on top.
MAX_IMAGE_NAME_LENGTH = 255
MAX_IMAGE_LENGTH = MAX_IMAGE_NAME_LENGTH + 1 + 128 + 1 + 71


def image_name(reference: str) -> str:
    """The [registry/]path of an image reference, without its tag and digest."""
    name = reference.split("@", 1)[0]
    registry_and_path, _, last = name.rpartition("/")
    return f"{registry_and_path}/{last.split(':', 1)[0]}" if registry_and_path else last.split(":", 1)[0]

# Every value lands inside double quotes in a shell script: allow no character that a
# shell would interpret there ($, `, ", \) and no whitespace. The image and model id patterns
# above allow none either.
SAFE_VALUES = {
    "region": re.compile(r"[a-z]{2}(-[a-z]+)+-\d+"),
    "bucket": re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"),
    "image": IMAGE_PATTERN,
    "model_id": MODEL_ID_PATTERN,
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
