"""EC2 refuses a filter name it does not know ("The filter 'zone_type' is invalid"); moto ignores
some (DescribeAvailabilityZones) and answers nothing to others (DescribeInstanceTypeOfferings).
The engine refuses them as EC2 does, so a misspelt filter in an adapter fails locally as it would
in AWS instead of silently widening or emptying an answer.

The names EC2 accepts per action are the ones its API reference lists, which botocore carries
in the documentation of each request's Filters member.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

from botocore.model import OperationNotFoundError
from moto.core.utils import get_service_model
from moto.ec2.exceptions import EC2ClientError

_LISTED_NAME = re.compile(r"<li>\s*<p>\s*<code>([^<]+)</code>")
# "tag:<key>" (any tag key) is listed as the literal `tag:&lt;key&gt;` or as `tag`.
_ANY_TAG = {"tag", "tag:&lt;key&gt;"}


@cache
def documented(action: str) -> frozenset[str] | None:
    """The filter names EC2's API reference lists for `action`; None when it lists none."""
    # moto's own EC2 model (loaded once per process, the one moto parses requests with): a new
    # botocore session per action would list every service's directory and build the model again.
    model = get_service_model("ec2")
    try:
        shape = model.operation_model(action).input_shape
    except OperationNotFoundError:
        return None
    member = shape.members.get("Filters") or shape.members.get("Filter") if shape is not None else None
    names = frozenset(_LISTED_NAME.findall(member.documentation or "")) if member is not None else frozenset()
    return names or None


def check(action: str, names: Iterable[str]) -> None:
    allowed = documented(action)
    if allowed is None:
        return
    for name in names:
        if name in allowed or (name.startswith("tag:") and allowed & _ANY_TAG):
            continue
        raise EC2ClientError("InvalidParameterValue", f"The filter '{name}' is invalid")
