"""Reference data shipped with gpufill: on-demand prices, inter-region latency, type sizes and architectures.

Each JSON file names its source and date; code never carries these figures as literals.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def _load(name: str) -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath(name).read_text())


def known_regions() -> frozenset[str]:
    return frozenset(_load("latency.json")["rtt_ms"])


def on_demand_price(instance_type: str, region: str) -> float | None:
    return _load("on_demand_prices.json")["prices"].get(instance_type, {}).get(region)


def latency_ms(origin: str, region: str) -> int | None:
    return _load("latency.json")["rtt_ms"].get(origin, {}).get(region)


def vcpus(instance_type: str) -> int | None:
    spec = _load("instance_types.json")["types"].get(instance_type)
    return spec["vcpus"] if spec else None


def known_instance_types() -> tuple[str, ...]:
    """Every type gpufill knows, in the catalog's order (x86_64 and arm64 alike)."""
    return tuple(_load("instance_types.json")["types"])


def architecture(instance_type: str) -> str | None:
    spec = _load("instance_types.json")["types"].get(instance_type)
    return spec["architecture"] if spec else None


def supports_efa(instance_type: str) -> bool:
    """Types built for tightly coupled multi-node work (EFA): a same-az gang of them goes in a cluster placement group."""
    spec = _load("instance_types.json")["types"].get(instance_type)
    return bool(spec and spec.get("efa"))


def gpus(instance_type: str) -> int | None:
    spec = _load("instance_types.json")["types"].get(instance_type)
    return spec["gpus"] if spec else None


def gpu_model(instance_type: str) -> str | None:
    """The GPU an instance type carries (`L4` for g6.xlarge), from its family."""
    return _load("gpu_models.json")["families"].get(instance_type.split(".")[0])


def known_gpu_models() -> tuple[str, ...]:
    return tuple(dict.fromkeys(_load("gpu_models.json")["families"].values()))


def types_with_gpu(model: str) -> tuple[str, ...]:
    """Every known type carrying `model` (case-insensitive), fewest GPUs and vCPUs first."""
    wanted = model.upper()
    found = [t for t in known_instance_types() if (gpu_model(t) or "").upper() == wanted]
    return tuple(sorted(found, key=lambda t: (gpus(t) or 0, vcpus(t) or 0)))
