"""EC2's error catalogue: the HTTP status each error code comes with, and the errors an
instant fleet lists per override, with the messages EC2 gives them.

EC2's API reference splits its codes into client errors (HTTP 4xx) and server errors (HTTP
5xx). The server errors include the capacity answers a scarce market gives every day
(InsufficientInstanceCapacity and its kin), so a client that reads "5xx" as "try the same
call again" retries a sold-out pool. moto answers every EC2 error with 400; `patches()`
gives each code its server status, for the market's own answers and the injected faults alike.
"""

from __future__ import annotations

from unittest import mock

# EC2's server errors (API reference, "Server error codes"): 503 when EC2 is busy, 500 otherwise.
SERVER_ERRORS = {
    "InsufficientInstanceCapacity": 500,
    "InsufficientCapacity": 500,
    "InsufficientHostCapacity": 500,
    "InsufficientAddressCapacity": 500,
    "InsufficientReservedInstanceCapacity": 500,
    "InternalError": 500,
    "InternalFailure": 500,
    "Unavailable": 503,
    "ServiceUnavailable": 503,
    "RequestLimitExceeded": 503,
}

# What a successful CreateFleet of type instant may list in its Errors, per override or for the
# whole fleet (no LaunchTemplateAndOverrides): the code and EC2's message.
FLEET_ERRORS = {
    "RequestLimitExceeded": "Request limit exceeded.",
    "InternalError": "An internal error has occurred.",
    "InsufficientInstanceCapacity": "We currently do not have sufficient capacity in the Availability Zone you requested.",
    "UnfulfillableCapacity": (
        "Unable to fulfill capacity due to your request configuration. Please adjust your request and try again."
    ),
    "MaxFleetCountExceeded": "You've reached the limit on the number of fleets that you can have.",
    "InsufficientFreeAddressesInSubnet": "There are not enough free addresses in subnet to satisfy the requested number of instances.",
    "AuthFailure.ServiceLinkedRoleCreationNotPermitted": (
        "The provided credentials do not have permission to create the service-linked role for EC2 Spot Instances."
    ),
    "UnauthorizedOperation": "You are not authorized to perform this operation.",
}


def status(code: str) -> int:
    """The HTTP status EC2 answers `code` with."""
    return SERVER_ERRORS.get(code, 400)


def patches() -> mock._patch:
    """moto's EC2 errors with EC2's status: a server error code is answered 5xx."""
    from moto.core.serialize import EC2Serializer

    original = EC2Serializer._serialized_error_to_response

    def with_status(serializer, resp, error, shape, serialized_error):
        resp = original(serializer, resp, error, shape, serialized_error)
        code = getattr(error, "code", None) or serialized_error.get("Code")
        if code in SERVER_ERRORS:
            resp["status_code"] = SERVER_ERRORS[code]
        return resp

    return mock.patch.object(EC2Serializer, "_serialized_error_to_response", with_status)
