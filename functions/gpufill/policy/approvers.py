"""Who may answer an approval, and what an answer sent to the AnswerApproval function URL says.

No AWS calls here. The caller's ARN comes from the function URL's event, where AWS put it after
checking the request's SigV4 signature and the caller's lambda:InvokeFunctionUrl grant; these
functions add the deployment's own rules on top: the `approvers` patterns and `separate_approver`.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

from gpufill.constants import APPROVED

DECISIONS = (APPROVED, "rejected")
MAX_REASON = 500
MAX_PATTERNS = 50
# An IAM or STS ARN pattern: arn:PARTITION:iam|sts::ACCOUNT:RESOURCE, wildcards allowed in each part.
_PATTERN = re.compile(r"arn:[a-z*?-]+:(iam|sts|\*)::[0-9*?]{1,12}:\S+")
_ASSUMED_ROLE = re.compile(r"arn:([a-z-]+):sts::(\d{12}):assumed-role/([^/]+)/(.+)")


class BadAnswer(ValueError):
    """The request to the function is malformed; the message names the field."""


class BadApprovers(ValueError):
    """The `approvers` setting is not a list of IAM ARN patterns; the message says which entry."""


@dataclass(frozen=True)
class AnswerRequest:
    approval: str  # the approval's execution name (or ARN)
    decision: str
    reason: str | None


def parse_answer(event: dict) -> AnswerRequest:
    """The body of a function URL request: {"approval": NAME, "decision": "approved"|"rejected", "reason": TEXT}."""
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        try:
            body = base64.b64decode(body).decode()
        except (ValueError, UnicodeDecodeError):
            raise BadAnswer("body: not valid base64-encoded UTF-8") from None
    try:
        fields = json.loads(body) if body else None
    except json.JSONDecodeError as error:
        raise BadAnswer(f"body: not JSON ({error.msg})") from None
    if not isinstance(fields, dict):
        raise BadAnswer('body: send a JSON object {"approval": NAME, "decision": "approved"|"rejected", "reason": TEXT}')
    approval = fields.get("approval")
    if not isinstance(approval, str) or not approval.strip():
        raise BadAnswer("approval: give the approval's execution name (gpufill status lists them)")
    decision = fields.get("decision")
    if decision not in DECISIONS:
        raise BadAnswer(f"decision: {decision!r} is neither 'approved' nor 'rejected'")
    reason = fields.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise BadAnswer("reason: give text")
    if reason is not None and len(reason) > MAX_REASON:
        raise BadAnswer(f"reason: {len(reason)} characters; at most {MAX_REASON}")
    return AnswerRequest(approval=approval.strip(), decision=decision, reason=(reason or "").strip() or None)


def caller_arn(event: dict) -> str | None:
    """The ARN AWS authenticated the request with (requestContext.authorizer.iam.userArn)."""
    iam = ((event.get("requestContext") or {}).get("authorizer") or {}).get("iam") or {}
    arn = iam.get("userArn")
    return arn if isinstance(arn, str) and arn.startswith("arn:") else None


def parse_approvers(value: Any) -> tuple[str, ...]:
    """The `approvers` setting: a list of IAM ARN patterns (JSON text, or a list); empty means the default."""
    if value in (None, ""):
        return ()
    if isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text) if text.startswith("[") else [p.strip() for p in text.split(",") if p.strip()]
        except json.JSONDecodeError as error:
            raise BadApprovers(f"approvers: not a JSON list ({error.msg})") from None
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise BadApprovers("approvers: give a list of IAM ARN patterns, e.g. [\"arn:aws:iam::123456789012:role/Approvers\"]")
    if len(value) > MAX_PATTERNS:
        raise BadApprovers(f"approvers: {len(value)} patterns; at most {MAX_PATTERNS}")
    for pattern in value:
        if not _PATTERN.fullmatch(pattern):
            raise BadApprovers(
                f"approvers: {pattern!r} is not an IAM ARN pattern (arn:aws:iam::ACCOUNT:role/NAME, "
                "arn:aws:iam::ACCOUNT:user/NAME or arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION; * and ? match)"
            )
    return tuple(value)


def default_approvers(account: str) -> tuple[str, ...]:
    """Anyone of the account that IAM lets call the function URL (the approver policy decides)."""
    return (f"arn:*:iam::{account}:*", f"arn:*:sts::{account}:*")


def identities(arn: str) -> tuple[str, ...]:
    """The ARNs a caller may be named by in a pattern: its own and, for a role session, its role's
    (a pattern names a role, arn:aws:iam::ACCOUNT:role/NAME, more often than a session)."""
    match = _ASSUMED_ROLE.fullmatch(arn)
    if match is None:
        return (arn,)
    partition, account, role, _ = match.groups()
    return (arn, f"arn:{partition}:iam::{account}:role/{role}")


def may_answer(arn: str, patterns: tuple[str, ...]) -> bool:
    """IAM's wildcard matching (case-sensitive; * any run of characters, ? one) of any of the caller's names."""
    return any(re.fullmatch(_glob(p), name) for p in patterns for name in identities(arn))


def _glob(pattern: str) -> str:
    # Not fnmatch: it also reads [...] as a class, which IAM does not.
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)


def same_principal(a: str | None, b: str | None) -> bool:
    """Whether two ARNs name the same person: the same user, or the same role session (an SSO
    person is a session of a shared role, told apart by the session name)."""
    return bool(a) and bool(b) and a == b
