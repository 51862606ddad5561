"""Ids a person types: any unique prefix of a known id stands for the whole id.

Request ids, execution names, approval ids and instance ids are long (a file name and a
timestamp, 17 hex digits), and people paste or type the start of them. `resolve` is the one rule
every verb applies: an exact match wins; a prefix that starts exactly one known id is that id; a
prefix that starts several is refused listing them (exit 2, nothing started); no match is left to
the verb, which keeps its own message. The `known_*` functions gather what a deployment knows;
they are asked only when the id as typed is not known exactly, so a whole id costs no listing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpufill import constants
from gpufill.cli.common import UsageError
from gpufill.policy.execution_names import INSTANCE_ID_PREFIX
from gpufill.policy.lifetime import EXPIRY_SUFFIX
from gpufill.policy.waiting import is_successor_name

CANDIDATES_SHOWN = 10  # an ambiguous prefix lists this many of the ids it starts, then "and N more"
# The names the command line makes for its own status and teardown executions (common.fresh_name):
# they are executions, not requests, so a request id's prefix is not ambiguous because of them.
_WHOLE_INSTANCE_ID = re.compile(r"i-[0-9a-f]{17}")
_OLD_INSTANCE_ID = re.compile(r"i-[0-9a-f]{8}")  # EC2's ids before 2016
INSTANCE_ID_START = re.compile(r"i-[0-9a-f]{1,17}")  # what may start an instance id
_GENERATED = re.compile(r"(status|teardown-.+)-\d{8}T\d{9}")


class AmbiguousId(UsageError):
    """A prefix that starts more than one known id: they are listed, nothing is chosen."""

    def __init__(self, message: str, candidates: list[str]):
        super().__init__(message, [{"field": "id", "problem": message.splitlines()[0]}])
        self.candidates = candidates


def matches(given: str, known: Iterable[str]) -> list[str]:
    """The known ids `given` names, sorted: [given] when it is one of them, else every id it is a
    prefix of. An empty `given` names nothing (it would start every id)."""
    ids = set(known)
    if given in ids:
        return [given]
    if not given:
        return []
    return sorted(i for i in ids if i.startswith(given))


def resolve(given: str, known: Iterable[str], what: str, *, nothing: str = "nothing was started") -> str | None:
    """The one known id `given` names (itself or the id it uniquely starts), None when it starts
    none. Raises AmbiguousId (a usage error) when it starts several; `what` names them ("request
    id", "instance id") in the message, `nothing` says what did not happen."""
    found = matches(given, known)
    if len(found) > 1:
        raise AmbiguousId(ambiguous_message(given, found, what, nothing), found)
    return found[0] if found else None


def ambiguous_message(given: str, found: list[str], what: str, nothing: str = "nothing was started") -> str:
    shown = found[:CANDIDATES_SHOWN]
    more = f"\n  ... and {len(found) - len(shown)} more" if len(found) > len(shown) else ""
    listed = "\n".join(f"  {i}" for i in shown)
    return f"{given!r} is the start of {len(found)} {what}s; {nothing}. Type more of the one you mean:\n{listed}{more}"


def approval_ref(given: str, items: list[dict], now) -> str | None:
    """The approval id of the one approval `given` starts a name of (its approval id, its execution's
    name, or the request it concerns), among the pending approvals, else among all: so a prefix of an
    answered one still reaches it and is refused saying what its answer did. None when it starts none,
    and when `given` is itself a whole name of one (the exact match wins, whatever the verb made of it).
    A prefix of a request two pending approvals concern lists both (as a whole request id does)."""
    from gpufill.policy import answers

    if not given or any(given in _names(i) for i in items):
        return None  # a whole id, name or request: what the verb found for it stands
    for group in ([i for i in items if answers.is_pending(i, now)], items):
        found = sorted({answers.approval_id(i) for i in group if any(n.startswith(given) for n in _names(i))})
        if len(found) > 1:
            raise AmbiguousId(ambiguous_message(given, found, "approval", "nothing changed"), found)
        if found:
            return found[0]
    return None


def _names(item: dict) -> list[str]:
    from gpufill.policy import answers

    request = answers.target_of(item).get("request_id")
    return [answers.approval_id(item), item["execution_name"], *([request] if isinstance(request, str) else [])]


def is_request_name(name: str) -> bool:
    """Whether an execution of this name runs a request of its own: not a status or teardown the command
    line started, nor the executions gpufill starts on a request's behalf (continued, lifetime, refill)."""
    return not (
        _GENERATED.fullmatch(name)
        or is_successor_name(name)
        or name.endswith(EXPIRY_SUFFIX)
        or constants.REFILL_NAME_INFIX + INSTANCE_ID_PREFIX in name
    )


# --- what a deployment knows (AWS reads; each is asked only for an id not known exactly) ---------


def execution_names(deployment) -> list[str]:
    """Every execution name of the deployment's state machine Step Functions still lists
    (ListExecutions keeps closed executions for 90 days)."""
    names: list[str] = []
    pages = deployment.client("stepfunctions").get_paginator("list_executions")
    # 1,000 a page (ListExecutions' most): a deployment runs a status execution per `gpufill status`.
    for page in pages.paginate(stateMachineArn=deployment.state_machine_arn, PaginationConfig={"PageSize": 1000}):
        names.extend(e["name"] for e in page.get("executions", []))
    return names


def recorded(deployment) -> tuple[set[str], set[str]]:
    """(request ids, instance ids) the deployment's table records: its instance records and the
    request ids its approvals name."""
    requests: set[str] = set()
    instances: set[str] = set()
    table = deployment.table()
    kwargs: dict = {
        "ProjectionExpression": "#key, #request",
        "ExpressionAttributeNames": {"#key": constants.INSTANCES_TABLE_KEY, "#request": "request_id"},
    }
    while True:
        page = table.scan(**kwargs)
        for item in page.get("Items", []):
            key = str(item.get(constants.INSTANCES_TABLE_KEY, ""))
            if key.startswith(INSTANCE_ID_PREFIX):
                instances.add(key)
            if isinstance(item.get("request_id"), str):
                requests.add(item["request_id"])
        if "LastEvaluatedKey" not in page:
            return requests, instances
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def request_id(deployment, given: str) -> str:
    """The request id `given` names in this deployment: itself when an execution or a record has it,
    else the one request id it starts (listed executions and records); unchanged when it starts none,
    so the verb says the request is unknown in its own words."""
    if _execution_exists(deployment, given):
        return given
    requests, _ = recorded(deployment)
    known = requests | {n for n in execution_names(deployment) if is_request_name(n)}
    return resolve(given, known, "request id") or given


def execution_name(deployment, given: str) -> str:
    """The execution `given` names (a name or a unique start of one; an ARN as it is)."""
    if given.startswith("arn:") or _execution_exists(deployment, given):
        return given
    return resolve(given, execution_names(deployment), "execution name") or given


def instance_ids(deployment, given: list[str]) -> list[str]:
    """Each id as typed, or the one recorded instance id of the deployment it starts. Whole ids (17
    hex digits, as EC2 makes them now) are taken as they are, without reading the table."""
    if all(_WHOLE_INSTANCE_ID.fullmatch(i) or not i.startswith(INSTANCE_ID_PREFIX) for i in given):
        return given
    _, known = recorded(deployment)
    resolved = [resolve(i, known, "instance id") or i for i in given]
    # An old-style id (8 hex digits) may be whole; any other length can only be a start of one.
    unknown = [i for i in resolved if i.startswith(INSTANCE_ID_PREFIX) and i not in known
               and not (_WHOLE_INSTANCE_ID.fullmatch(i) or _OLD_INSTANCE_ID.fullmatch(i))]
    if unknown:
        message = (f"{', '.join(map(repr, unknown))}: not a whole instance id (i- and 17 hex digits) and the start of "
                   "none of the instance ids this deployment records; nothing was started. "
                   "`gpufill status --instances` lists them")
        raise UsageError(message, [{"field": "--instances", "problem": message}])
    return resolved


def _execution_exists(deployment, name: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        deployment.client("stepfunctions").describe_execution(executionArn=deployment.execution_arn(name))
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("ExecutionDoesNotExist", "InvalidArn"):
            return False
        raise
    return True
