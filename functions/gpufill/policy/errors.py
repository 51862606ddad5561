"""Which EC2 error codes mean what for the fill loop (docs/architecture.md, "Errors")."""

from gpufill.models.run import Outcome

# EC2's answers that a pool has nothing to give now (EC2 sends most of them as HTTP 500).
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientAddressCapacity",
        "InsufficientReservedInstanceCapacity",
        # A launch into a capacity reservation that has no room left (another launch took it).
        "ReservationCapacityExceeded",
        "Unsupported",
    }
)
QUOTA_CODES = frozenset({"MaxSpotInstanceCountExceeded", "VcpuLimitExceeded", "InstanceLimitExceeded"})
# EC2 was busy or briefly broken: the pool was not answered for, the same ask may work later.
# A fleet lists them per override too; they never mean "no capacity".
THROTTLE_CODES = frozenset({"RequestLimitExceeded", "InternalError", "InternalFailure", "Unavailable", "ServiceUnavailable"})
# EC2 does not know a resource the call names. Right after gpufill created it, this is EC2's
# eventual consistency ("its ID might not have propagated throughout the system"): the same call
# is sent again shortly; once that bound is spent the pool counts as not answered, never as empty.
NOT_VISIBLE_CODES = frozenset(
    {
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateId.VersionNotFound",
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidPlacementGroup.Unknown",
        "InvalidGroup.NotFound",
    }
)
# EC2 refuses the launch itself, the same way in every pool: trying another pool cannot help,
# so the run stops at once with LAUNCH_REJECTED instead of walking every pool.
REJECTION_CODES = frozenset(
    {
        "UnauthorizedOperation",
        "AuthFailure",
        "Blocked",
        "InvalidBlockDeviceMapping",
        "InvalidUserData.Malformed",
        "InvalidParameter",
        "InvalidParameterValue",
        "InvalidParameterCombination",
        # The region's launch template holds EC2's 10,000 versions: no fleet can launch there
        # until versions are deleted, and gpufill deletes its own as it goes, so the operator acts.
        "VersionLimitExceeded",
    }
)
# AuthFailure.ServiceLinkedRoleCreationNotPermitted: the launch role may not create the Spot service-linked role.
REJECTION_PREFIXES = ("InvalidParameter", "InvalidKMSKey", "KMS.", "Client.InvalidKMSKey", "AuthFailure.")
# The region cannot be used for this run: its endpoint could not be reached (the call never
# arrived, so nothing launched there), it has no network to launch into, or it is not enabled.
# The run skips the region for this market, like a region with no capacity.
REGION_UNUSABLE_CODES = frozenset({"EndpointConnectionError", "ConnectTimeoutError", "NetworkSetupError", "OptInRequired"})


def classify(code: str) -> Outcome:
    if code in CAPACITY_CODES:
        return "capacity"
    if code in QUOTA_CODES:
        return "quota"
    if code in THROTTLE_CODES or code in NOT_VISIBLE_CODES:
        return "throttled"
    return "error"


def not_visible_yet(code: str | None) -> bool:
    return code in NOT_VISIBLE_CODES


def is_stale_ami(code: str | None) -> bool:
    return bool(code) and code.startswith("InvalidAMIID")


def is_rejection(code: str | None) -> bool:
    return bool(code) and (code in REJECTION_CODES or code.startswith(REJECTION_PREFIXES) or "KMS" in code)


def region_unusable(code: str | None) -> bool:
    return code in REGION_UNUSABLE_CODES


def quota_group(instance_type: str) -> str:
    """The EC2 vCPU quota an instance type counts against, per region and market.

    EC2 pools quotas by family letter: "Running On-Demand G and VT instances", "All P Spot
    Instance Requests" and so on. A quota error closes that group, not the whole region.
    """
    letter = instance_type[:1].upper()
    return "G and VT" if letter in ("G", "V") else letter
