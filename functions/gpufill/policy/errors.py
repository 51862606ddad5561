"""Which EC2 error codes mean what for the fill loop (DESIGN.md, "EC2 error classes")."""

from gpufill.models.run import Outcome

CAPACITY_CODES = frozenset({"InsufficientInstanceCapacity", "InsufficientCapacity", "Unsupported"})
QUOTA_CODES = frozenset({"MaxSpotInstanceCountExceeded", "VcpuLimitExceeded", "InstanceLimitExceeded"})
THROTTLE_CODES = frozenset({"RequestLimitExceeded"})


def classify(code: str) -> Outcome:
    if code in CAPACITY_CODES:
        return "capacity"
    if code in QUOTA_CODES:
        return "quota"
    if code in THROTTLE_CODES:
        return "throttled"
    return "error"


def is_stale_ami(code: str) -> bool:
    return code.startswith("InvalidAMIID")
