"""Deterministic ClientTokens: the same launch step always sends the same token, so a retry launches nothing new."""

import hashlib

MAX_TOKEN_LENGTH = 64


def client_token(request_id: str, attempt_number: int) -> str:
    digest = hashlib.sha256(f"{request_id}/{attempt_number}".encode()).hexdigest()[:40]
    return f"gpufill-{digest}-{attempt_number}"[:MAX_TOKEN_LENGTH]
