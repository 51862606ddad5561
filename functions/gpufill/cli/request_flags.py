"""The request flags of `run`, `up` and `simulate`: --count, --gpu, --type, --market, --regions,
--model override the request file's fields, or make the whole request when no file is given."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from gpufill import catalog
from gpufill.cli.common import UsageError, read_request
from gpufill.constants import SUPPORTED_ARCHITECTURE

MARKETS = ("spot", "on-demand", "spot-then-on-demand")
# --gpu NAME picks the smallest types carrying it: more would let a one-GPU request spill onto
# 64-vCPU hosts at several times the price; --type names any list exactly.
GPU_TYPES_PICKED = 3
GPU_SPEC = re.compile(r"^(?:(?P<lead>\d+)x)?(?P<model>[A-Za-z][A-Za-z0-9]*)(?::(?P<trail>\d+))?$")


def add_request_options(parser: argparse.ArgumentParser, *, market_flags: tuple[str, ...] = ("--market", "--buy")) -> None:
    group = parser.add_argument_group("request flags (override the file's fields, or make the request without one)")
    group.add_argument("--count", type=int, default=None, metavar="N", help="how many instances")
    kinds = group.add_mutually_exclusive_group()
    kinds.add_argument(
        "--gpu",
        default=None,
        metavar="GPU[:N]",
        help=f"a GPU by name ({', '.join(_runnable_models())}); :N or Nx for N GPUs per instance "
        f"(default the fewest any type carries); picks the {GPU_TYPES_PICKED} smallest types that carry it",
    )
    kinds.add_argument("--type", default=None, metavar="TYPE[,TYPE]", help="instance types in preference order")
    group.add_argument(
        *market_flags, dest="request_market", choices=MARKETS, default=None, metavar="MARKET",
        help="spot, on-demand or spot-then-on-demand",
    )
    group.add_argument("--regions", default=None, metavar="REGION[,REGION]", help="the regions to search")
    group.add_argument("--model", default=None, metavar="REPO", help="the Hugging Face model id to serve")


def given(args: argparse.Namespace) -> bool:
    return any(getattr(args, name, None) is not None for name in ("count", "gpu", "type", "request_market", "regions", "model"))


def build(args: argparse.Namespace, path: Path | None) -> dict:
    """The request file (or an empty provisioning request) with the flags written over it."""
    if path is None and not given(args):
        raise UsageError("give a REQUEST file, or request flags such as --gpu L4 --count 2 (see --help)")
    request = dict(read_request(path)) if path is not None else {}
    if args.count is not None:
        request["count"] = args.count
    types = gpu_types(args.gpu) if args.gpu is not None else _types(args.type) if args.type is not None else None
    if types is not None:
        request.pop("instance_type", None)
        request["instance_types"] = types
    if args.request_market is not None:
        request["market"] = args.request_market
    if args.regions is not None:
        request["regions"] = _listed(args.regions) or _empty("--regions", "us-east-1,us-west-2")
    if args.model is not None:
        request["model_id"] = args.model
    return request


def gpu_types(spec: str) -> list[str]:
    """`L4`, `L4:4` or `4xL4` as the instance types that carry that many of that GPU, smallest first."""
    match = GPU_SPEC.match(spec.strip())
    models = _runnable_models()
    if not match:
        raise UsageError(f"--gpu {spec!r}: give a GPU name, optionally with GPUs per instance (L4, L4:4, 4xL4); known: {', '.join(models)}")
    name = match["model"]
    carriers = [t for t in catalog.types_with_gpu(name) if catalog.architecture(t) == SUPPORTED_ARCHITECTURE]
    if not carriers:
        raise UsageError(f"--gpu {spec!r}: {name!r} is not a GPU gpufill knows; known: {', '.join(models)}")
    counts = sorted({catalog.gpus(t) for t in carriers})
    wanted = int(match["lead"] or match["trail"] or counts[0])
    fitting = [t for t in carriers if catalog.gpus(t) == wanted]
    if not fitting:
        offered = ", ".join(str(c) for c in counts)
        raise UsageError(f"--gpu {spec!r}: no type carries {wanted} {catalog.gpu_model(carriers[0])}; they come {offered} per instance")
    return fitting[:GPU_TYPES_PICKED]


def _runnable_models() -> list[str]:
    return [
        m for m in catalog.known_gpu_models()
        if any(catalog.architecture(t) == SUPPORTED_ARCHITECTURE for t in catalog.types_with_gpu(m))
    ]


def _types(text: str) -> list[str]:
    types = _listed(text)
    if not types:  # `--type ""` must not fall back to the default type without a word
        _empty("--type", "g6.xlarge,g5.xlarge")
    return types


def _empty(flag: str, example: str):
    raise UsageError(f"{flag} is empty: name one or more, e.g. {flag} {example}")


def _listed(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]
