"""Spot Advisor interruption tiers, fetched once per container.

The advisor feed is a public JSON file; when it cannot be had within the timeout
every tier is unknown (0 interruption points) and the run goes on.
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

from aws_lambda_powertools import Logger

from gpufill.constants import ENV_SPOT_ADVISOR_URL, SPOT_ADVISOR_TIMEOUT_SECONDS, SPOT_ADVISOR_URL

logger = Logger(child=True)
_document: dict[str, Any] | None = None


def fetch_document() -> dict[str, Any]:
    url = os.environ.get(ENV_SPOT_ADVISOR_URL, SPOT_ADVISOR_URL)
    with urllib.request.urlopen(url, timeout=SPOT_ADVISOR_TIMEOUT_SECONDS) as response:  # noqa: S310 (fixed https URL)
        return json.loads(response.read())


def _load() -> dict[str, Any]:
    global _document
    if _document is None:
        try:
            _document = fetch_document()
        except Exception as error:  # noqa: BLE001 (any failure means "unknown", never a failed run)
            logger.warning("Spot Advisor unavailable; interruption tiers unknown", extra={"error": str(error)})
            _document = {}
    return _document


def tier(region: str, instance_type: str) -> int | None:
    entry = _load().get("spot_advisor", {}).get(region, {}).get("Linux", {}).get(instance_type)
    return entry.get("r") if isinstance(entry, dict) else None


def reset(document: dict[str, Any] | None = None) -> None:
    """Forget the cached feed, or put a known one in its place (tests, local engine)."""
    global _document
    _document = document
