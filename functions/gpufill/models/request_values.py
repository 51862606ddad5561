"""The rules of a request's single values (docs/request.md): the patterns and limits its fields are
held to, the choices a field may take, the checks of instance types and tags, and the words a
problem quotes a user's value in."""

from __future__ import annotations

import difflib
import re
from typing import Any, Literal

from gpufill import catalog
from gpufill.constants import (
    DEFAULT_INSTANCE_TYPE,
    EC2_MAX_TAG_KEY_LENGTH,
    EC2_MAX_TAG_VALUE_LENGTH,
    EC2_MAX_TAGS,
    GPUFILL_TAG_COUNT,
    SUPPORTED_ARCHITECTURE,
)

INSTANCE_TYPE_PATTERN = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
# A request id is the execution name of a provisioning run: 1..80 characters, none of the
# ones Step Functions refuses in a name (whitespace, brackets, wildcards, $, /, ...).
REQUEST_ID_PATTERN = re.compile(r"^[^\s<>{}\[\]?*\"#%\\^|~`$&,;:/]{1,80}$")
INSTANCE_ID_PATTERN = re.compile(r"^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
CAPACITY_RESERVATION_ID_PATTERN = re.compile(r"^cr-[0-9a-f]{17}$")
MAX_CAPACITY_RESERVATION_IDS = 20
MAX_TEARDOWN_IDS = 1000
RESERVED_TAG_PREFIXES = ("gpufill:", "aws:")
# The characters every AWS service accepts in a tag (EC2 itself is more lenient, but the same
# tags are read by Cost Explorer, Resource Groups and IAM conditions): letters, digits, spaces
# and + - = . _ : / @.
TAG_TEXT_PATTERN = re.compile(r"^[\w +\-=.:/@]*$")
MAX_USER_TAGS = EC2_MAX_TAGS - GPUFILL_TAG_COUNT

Action = Literal["provision", "plan", "teardown", "status"]
# "capacity-block": straight to a Capacity Block for ML (docs/capacity-blocks.md).
Market = Literal["spot", "on-demand", "spot-then-on-demand", "capacity-block"]
LaunchMode = Literal["partial", "exact", "fleet"]
OnDemandStrategy = Literal["cost", "latency"]
Scoring = Literal["price-capacity", "blended", "classic"]
# "warm": rank from what an earlier run of the deployment scored and prepared while it is fresh
# (policy/warm_facts.py); "fresh": score every region and prepare every region anew.
Facts = Literal["warm", "fresh"]
Placement = Literal["any", "same-region", "same-az"]
# On-Demand Capacity Reservations (docs/capacity-reservations.md): "open" uses this deployment's
# reservations with room before Spot/On-Demand, "only" launches into them alone, "none" ignores them.
CapacityReservations = Literal["none", "open", "only"]


def check_types(names: list[str]) -> None:
    """Every type must be one gpufill knows and can run: its AMI and serving image are x86_64 only."""
    known = catalog.known_instance_types()
    problems = []
    for name in names:
        if name not in known:
            problems.append(_unknown_type(name, known))
        elif (arch := catalog.architecture(name)) != SUPPORTED_ARCHITECTURE:
            problems.append(
                f"{name!r} is an {arch} type; gpufill's machine image and serving image are "
                f"{SUPPORTED_ARCHITECTURE} only, so choose an {SUPPORTED_ARCHITECTURE} GPU type such as {DEFAULT_INSTANCE_TYPE!r}"
            )
    if problems:
        raise ValueError("; ".join(problems))


def _unknown_type(name: str, known: tuple[str, ...]) -> str:
    carriers = [t for t in catalog.types_with_gpu(name) if catalog.architecture(t) == SUPPORTED_ARCHITECTURE]
    if carriers:
        # A GPU's name where an instance type goes ("L4", "H100"): say which types carry it.
        listed = ", ".join(f"{t} ({catalog.gpus(t)})" for t in carriers)
        return f"{name!r} is a GPU, not an instance type; the types that carry it (GPUs each): {listed}"
    if not INSTANCE_TYPE_PATTERN.match(name):
        return f"{shorten(name)} is not an EC2 instance type name such as {DEFAULT_INSTANCE_TYPE!r}"
    runnable = [t for t in known if catalog.architecture(t) == SUPPORTED_ARCHITECTURE]
    close = difflib.get_close_matches(name, runnable, n=1)
    families = dict.fromkeys(t.split(".")[0] for t in runnable)
    hint = f"did you mean {close[0]!r}?" if close else f"gpufill knows {', '.join(families)} types"
    return f"{name!r} is not a GPU instance type gpufill knows: {hint}"


def check_no_repeats(values: list[str]) -> None:
    repeated = [v for n, v in enumerate(values) if v in values[:n]]
    if repeated:
        raise ValueError(f"lists {', '.join(map(repr, dict.fromkeys(repeated)))} more than once")


def check_tags(tags: dict[str, str]) -> None:
    """EC2's tag rules, with gpufill's own tags counted in the 50 a resource may carry."""
    problems = []
    if len(tags) > MAX_USER_TAGS:
        problems.append(
            f"{len(tags)} tags, at most {MAX_USER_TAGS}: EC2 allows {EC2_MAX_TAGS} per instance "
            f"and gpufill adds {GPUFILL_TAG_COUNT} of its own"
        )
    for key, value in tags.items():
        if not 1 <= len(key) <= EC2_MAX_TAG_KEY_LENGTH:
            problems.append(f"key {shorten(key)} is {len(key)} characters; a tag key has 1 to {EC2_MAX_TAG_KEY_LENGTH}")
        elif key.lower().startswith(RESERVED_TAG_PREFIXES):
            problems.append(f"key {key!r}: keys starting with 'gpufill:' or 'aws:' are reserved")
        elif not TAG_TEXT_PATTERN.match(key):
            problems.append(f"key {key!r} {_TAG_CHARACTERS}")
        if len(value) > EC2_MAX_TAG_VALUE_LENGTH:
            problems.append(f"the value of {shorten(key)} is {len(value)} characters; at most {EC2_MAX_TAG_VALUE_LENGTH}")
        elif not TAG_TEXT_PATTERN.match(value):
            problems.append(f"the value of {shorten(key)} {_TAG_CHARACTERS}")
    if problems:
        raise ValueError("; ".join(problems))


_TAG_CHARACTERS = "may only hold letters, digits, spaces and + - = . _ : / @"


def shorten(text: str, limit: int = 40) -> str:
    """Quote a user's value in a message without echoing a whole oversized field back."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "…"


def duration_words(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} seconds"


def iso_duration(value: Any, examples: str) -> Any:
    """A duration field's value as given, once it is an ISO 8601 duration ("PT6H"): pydantic would
    also read a bare number of seconds or "HH:MM:SS", and docs/request.md promises ISO 8601 alone."""
    if not isinstance(value, str) or not value.startswith("P"):
        raise ValueError(f"must be an ISO 8601 duration such as {examples}, got {shown(value)}")
    return value


def shown(value: Any) -> str:
    return shorten(value) if isinstance(value, str) else json_kind(value)


def json_kind(value: Any) -> str:
    """What a value is, in the words of the JSON the user wrote."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    for kind, name in ((str, "a string"), (int, "a number"), (float, "a number"), (list, "a list"), (dict, "an object")):
        if isinstance(value, kind):
            return name
    return type(value).__name__
