"""Deterministic ClientTokens: the same launch step always sends the same token, so a retry launches nothing new.

The token is derived from the deployment (its state machine ARN), the request id and the
attempt number, so two deployments in one account that run the same execution name never
share a token, and no token is reused for another call.
"""

import hashlib

MAX_TOKEN_LENGTH = 64


def client_token(deployment: str, request_id: str, attempt_number: int) -> str:
    digest = hashlib.sha256(f"{deployment}\n{request_id}\n{attempt_number}".encode()).hexdigest()[:40]
    return f"gpufill-{digest}-{attempt_number}"[:MAX_TOKEN_LENGTH]
