"""The execution names gpufill keeps for the executions it starts itself.

A request id is its execution's name. Three forms belong to executions gpufill starts on a
request's behalf; a person's run that took one would take (and break) that execution's name:
- `<request>-c<n>`: the continued execution of a run that waits for capacity;
- `<request>-expired`: the teardown a request's `max_lifetime` asks for;
- `<request>-refill-i-…`: the refill of an instance EC2 took back.
"""

from __future__ import annotations

from gpufill.constants import REFILL_NAME_INFIX
from gpufill.policy.lifetime import EXPIRY_SUFFIX
from gpufill.policy.waiting import is_successor_name

# EC2's instance ids begin so; the refill's name carries the id after the infix.
INSTANCE_ID_PREFIX = "i-"


def reserved_problem(name: str, request: dict) -> str | None:
    """Why `name` may not be the execution name of `request` (None when it may). A lifetime's
    teardown and a refill run (its input says `refill`) carry their own forms."""
    action = request.get("action")
    if is_successor_name(name):
        return (
            f"{name!r} ends like a continued execution's name (<request>-c<n>), which wait_for_capacity "
            "keeps for itself; choose a name that does not end in -c and a number"
        )
    if name.endswith(EXPIRY_SUFFIX) and action != "teardown":
        return (
            f"{name!r} ends in {EXPIRY_SUFFIX!r}, which max_lifetime keeps for the teardown it "
            "starts when a request expires; choose another name"
        )
    if f"{REFILL_NAME_INFIX}{INSTANCE_ID_PREFIX}" in name and "refill" not in request:
        return (
            f"{name!r} holds {REFILL_NAME_INFIX + INSTANCE_ID_PREFIX!r}, which refills keep for the run that replaces "
            "an instance EC2 took back; choose another name"
        )
    return None
