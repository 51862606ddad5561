"""`python -m bench.engine_speed`: the local engine of this tree against a base commit's, side by side.

The base commit (default: the merge-base with main; `--engine-base REV`) is checked out in a
temporary git worktree; both trees run with this venv's Python, on the same request and market
(`make demo`'s), alternating base and head on every repetition so that both meet the same load.
Each repetition measures, in fresh processes:

- `demo`: the whole `gpufill simulate` command, wall time (Python start-up and output included);
- `cold start` / `warm start`: entering `LocalEngine(...)` the first time in a process and again;
- `per transition`: the warm engine's run of the request, divided by its state transitions.

The medians are printed with the ratio base / head (above 1: this tree is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).with_name("engine_probe.py")
REQUEST = ROOT / "examples" / "requests" / "provision-spot.json"
MARKET = ROOT / "examples" / "markets" / "first-az-sold-out.json"
# (label, unit, how a sample becomes the number shown)
METRICS = (
    ("demo simulate", "s", lambda s: s["demo_s"]),
    ("cold start", "s", lambda s: s["cold_start_s"]),
    ("warm start", "s", lambda s: s["warm_start_s"]),
    ("per transition", "ms", lambda s: 1000 * s["warm_run_s"] / s["transitions"]),
)


def summarise(base: list[dict], head: list[dict]) -> list[dict]:
    """One row per metric: the median of each side and base / head (above 1: head is faster)."""
    rows = []
    for label, unit, value in METRICS:
        b = statistics.median(value(s) for s in base)
        h = statistics.median(value(s) for s in head)
        rows.append({"metric": label, "unit": unit, "base": b, "head": h, "ratio": b / h if h else float("inf")})
    return rows


def render(rows: list[dict], base_label: str, head_label: str, repeat: int) -> str:
    width = max(len(r["metric"]) for r in rows) + 5
    lines = [f"local engine, median of {repeat}: base {base_label} vs head {head_label}",
             f"{'':{width}}{'base':>10}{'head':>10}{'base/head':>12}"]
    for r in rows:
        digits = 0 if r["unit"] == "ms" else 2
        lines.append(f"{r['metric'] + ' (' + r['unit'] + ')':{width}}{r['base']:>10.{digits}f}"
                     f"{r['head']:>10.{digits}f}{r['ratio']:>11.2f}x")
    return "\n".join(lines)


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


def default_base() -> str:
    return _git("merge-base", "HEAD", "main")


def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = f"{tree / 'functions'}{os.pathsep}{tree}"
    return env


def measure(tree: Path) -> dict:
    """One repetition on `tree`: the demo command, then the probe, each in a fresh process."""
    env = _env(tree)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpufill.cli", "simulate", str(REQUEST), "--market", str(MARKET)],
                   cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    demo = time.perf_counter() - started
    probe = subprocess.run([sys.executable, str(PROBE), str(REQUEST), str(MARKET)],
                           cwd=tree, env=env, check=True, capture_output=True, text=True)
    sample = json.loads(probe.stdout.strip().splitlines()[-1])
    if sample["status"] != "SUCCEEDED":
        raise SystemExit(f"{tree}: the demo request ended {sample['status']}")
    return {"demo_s": demo, **sample}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine_speed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine-base", default=None, metavar="REV",
                        help="the commit to compare against (default: the merge-base of HEAD and main)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions on each side (default %(default)s)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    base_rev = _git("rev-parse", "--short", args.engine_base or default_base())
    head_label = _git("rev-parse", "--short", "HEAD") + (" (+ changes)" if _git("status", "--porcelain", "--untracked-files=no") else "")
    with tempfile.TemporaryDirectory(prefix="gpufill-engine-base-") as scratch:
        base_tree = Path(scratch) / "base"
        _git("worktree", "add", "--detach", "--quiet", str(base_tree), base_rev)
        try:
            base, head = [], []
            for i in range(args.repeat):
                base.append(measure(base_tree))
                head.append(measure(ROOT))
                print(f"  [{i + 1}/{args.repeat}] demo {base[-1]['demo_s']:.2f} s base, {head[-1]['demo_s']:.2f} s head",
                      file=sys.stderr, flush=True)
        finally:
            _git("worktree", "remove", "--force", str(base_tree))
    print(render(summarise(base, head), base_rev, head_label, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
