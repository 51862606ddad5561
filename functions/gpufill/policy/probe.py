"""What `gpufill doctor --probe` makes of each answer to a DryRun call: pure, no AWS.

EC2 answers a call made with `DryRun=True` without doing it: `DryRunOperation` when the caller
may make it, `UnauthorizedOperation` (with an encoded authorization failure message) when not.
Any other answer (a resource the call names does not exist, a parameter EC2 rejects) proves
neither: the call is unproven, with EC2's code.
"""

from __future__ import annotations

GRANTED, REFUSED, UNPROVEN, NOT_PROBEABLE = "granted", "refused", "unproven", "not probeable"
# The function could not be asked at all (not deployed, its probe alias missing, it failed).
FAILED = "failed"
RESULTS = (GRANTED, REFUSED, UNPROVEN, NOT_PROBEABLE, FAILED)
# What fails `gpufill doctor --probe`.
FAILING = frozenset({REFUSED, FAILED})

DRY_RUN_ALLOWED = "DryRunOperation"
# EC2's refusal, and the codes other services refuse with (a probe only asks EC2 today).
REFUSALS = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "AuthorizationError"})
ENCODED_MARKER = "Encoded authorization failure message:"
# Calls AWS offers no DryRun for: the probe lists them, IAM's simulation judges them.
NO_DRY_RUN = {
    "dynamodb": "DynamoDB has no DryRun",
    "states": "Step Functions has no DryRun",
    "scheduler": "EventBridge Scheduler has no DryRun",
    "sns": "SNS has no DryRun",
    "ssm": "SSM has no DryRun",
    "s3": "S3 has no DryRun",
    "iam": "checked by the launch calls that pass the role",
    "events": "EventBridge has no DryRun",
    "lambda": "Lambda has no DryRun",
}


def classify(code: str | None, message: str = "") -> tuple[str, str]:
    """(result, detail) of one DryRun answer: its error code (None: EC2 did the call, which a
    DryRun never does, so the answer is wrong) and message."""
    if code == DRY_RUN_ALLOWED:
        return GRANTED, DRY_RUN_ALLOWED
    if code in REFUSALS:
        return REFUSED, f"{code}: {plain_reason(message)}"
    if code is None:
        return UNPROVEN, "EC2 answered as if DryRun were not set"
    return UNPROVEN, f"{code}: {message}" if message else code


def plain_reason(message: str) -> str:
    """The readable part of a refusal's message, without the encoded blob."""
    return message.partition(ENCODED_MARKER)[0].strip().rstrip(".")


def encoded_message(message: str) -> str | None:
    """The encoded authorization failure message EC2 put in a refusal, if any."""
    words = message.partition(ENCODED_MARKER)[2].split()
    return words[0] if words else None


def decoded_reason(document: dict) -> str:
    """One line from STS DecodeAuthorizationMessage's document: the action, the resource, and
    whether an explicit Deny refused it or no statement allowed it."""
    context = document.get("context") or {}
    why = "an explicit deny" if document.get("explicitDeny") else "no statement allows it"
    conditions = []
    for item in (context.get("conditions") or {}).get("items", []):
        key = str(item.get("key"))
        if key.startswith("aws:Principal"):  # the caller, named already by the refusal
            continue
        values = [str(v.get("value", "")) for v in (item.get("values") or {}).get("items") or []]
        conditions.append(f"{key}={','.join(values)}")
    line = f"{context.get('action', '?')} on {context.get('resource', '?')}: {why}"
    return f"{line} (context {'; '.join(conditions)})" if conditions else line


def dry_runnable(action: str) -> bool:
    """EC2 calls take DryRun; tags given at creation are judged with the call that creates them."""
    return action.startswith("ec2:") and action != "ec2:CreateTags"


def not_probeable(action: str) -> str:
    """Why a call the function makes cannot be asked with DryRun."""
    if action == "ec2:CreateTags":
        return "tags given at creation: judged with the call that creates"
    service = action.partition(":")[0]
    return NO_DRY_RUN.get(service, f"{service} has no DryRun")


def failing(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("result") in FAILING]


def summary(rows: list[dict]) -> str:
    """`12 calls: 9 granted, 1 refused, 2 unproven, 5 not probeable` (only the counts there are)."""
    counts = [(result, sum(r.get("result") == result for r in rows)) for result in RESULTS]
    return f"{len(rows)} calls: " + ", ".join(f"{n} {result}" for result, n in counts if n)
