"""Spot Advisor interruption tiers, fetched once per function's execution environment.

The advisor feed is a public JSON file; when it cannot be had within the timeout
every tier is unknown (0 interruption points) and the run goes on.
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

from aws_lambda_powertools import Logger

from gpufill.adapters import container
from gpufill.constants import ENV_SPOT_ADVISOR_URL, SPOT_ADVISOR_TIMEOUT_SECONDS, SPOT_ADVISOR_URL

logger = Logger(child=True)
# Each function's own copy of the feed, fetched the first time it asks ({"document": ...}).
_documents: container.PerFunction[dict[str, dict[str, Any]]] = container.PerFunction(dict)
# A known document each function gets instead of fetching the feed (tests, the local engine).
_stand_in: dict[str, Any] | None = None


def fetch_document() -> dict[str, Any]:
    url = os.environ.get(ENV_SPOT_ADVISOR_URL, SPOT_ADVISOR_URL)
    with urllib.request.urlopen(url, timeout=SPOT_ADVISOR_TIMEOUT_SECONDS) as response:  # noqa: S310 (fixed https URL)
        return json.loads(response.read())


def _load() -> dict[str, Any]:
    mine = _documents.mine()
    if "document" not in mine:
        try:
            mine["document"] = fetch_document() if _stand_in is None else _stand_in
        except Exception as error:  # noqa: BLE001 (any failure means "unknown", never a failed run)
            logger.warning("Spot Advisor unavailable; interruption tiers unknown", extra={"error": str(error)})
            mine["document"] = {}
    return mine["document"]


def tier(region: str, instance_type: str) -> int | None:
    entry = _load().get("spot_advisor", {}).get(region, {}).get("Linux", {}).get(instance_type)
    return entry.get("r") if isinstance(entry, dict) else None


def reset(document: dict[str, Any] | None = None) -> None:
    """Forget every function's copy of the feed; with a document, every fetch from now on
    answers it instead of the feed (tests, local engine)."""
    global _stand_in
    _stand_in = document
    _documents.forget_all()
