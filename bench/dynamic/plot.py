"""bench/results/dynamic/time-to-n.png and dollars.png: the dynamic bench's figures."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on CI or a server
import matplotlib.pyplot as plt  # noqa: E402

from bench.dynamic.generate import HORIZON_SECONDS  # noqa: E402
from bench.dynamic.measure import Outcome  # noqa: E402
from bench.dynamic.report import all_filled, by_strategy  # noqa: E402

STYLE = {"skypilot": ("tab:red", "-."), "karpenter": ("tab:purple", "--"), "broker": ("tab:gray", "--"),
         "classic": ("tab:orange", "-"), "gpufill": ("tab:blue", "-")}


def time_to_n(outcomes: list[Outcome], path: Path, caption: str) -> None:
    """Share of requests holding all N instances by each modelled time: higher and further left is better."""
    figure, axis = plt.subplots(figsize=(8, 4.8))
    for strategy, mine in by_strategy(outcomes).items():
        times = sorted(max(o.time_to_n, 1.0) / 3600 for o in mine if o.filled)
        xs = [1 / 3600] + [t for t in times for _ in (0, 1)] + [HORIZON_SECONDS / 3600]
        ys = [0.0] + [v for n in range(len(times)) for v in (n / len(mine), (n + 1) / len(mine))] + [len(times) / len(mine)]
        colour, style = STYLE[strategy]
        axis.plot(xs, ys, color=colour, linestyle=style, label=strategy)
    axis.set_xscale("log")
    axis.set_xlabel("modelled time since the request, hours (log)")
    axis.set_ylabel("share of requests with all N running")
    axis.set_ylim(0, 1)
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(loc="upper left")
    axis.set_title(f"Time to N GPUs on dynamic markets ({caption})")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(figure)


def dollars(outcomes: list[Outcome], path: Path, caption: str) -> None:
    """Σ $ of instances on the markets every strategy filled: held idle before the fleet was
    complete, and the fleet's first hour of work."""
    common = all_filled(outcomes)
    grouped = by_strategy(outcomes)
    names = list(grouped)
    idle = [sum(o.idle_dollars for o in grouped[s] if o.case in common) for s in names]
    working = [sum(o.dollars - o.idle_dollars for o in grouped[s] if o.case in common) for s in names]
    figure, axis = plt.subplots(figsize=(8, 4.8))
    axis.bar(names, working, color=[STYLE[s][0] for s in names], label="the fleet's first hour of work")
    axis.bar(names, idle, bottom=working, color="none", edgecolor="black", hatch="//",
             label="held before the fleet was complete")
    for n, (w, i) in enumerate(zip(working, idle)):
        axis.text(n, w + i, f"${w + i:,.0f}", ha="center", va="bottom", fontsize=9)
    axis.set_ylabel("$ of instances, summed")
    axis.set_ylim(0, max(w + i for w, i in zip(working, idle)) * 1.3 or 1)
    axis.legend(loc="upper left", ncol=2, fontsize=9)
    axis.set_title(f"$ per strategy on the {len(common)} markets all filled ({caption})")
    figure.tight_layout()
    figure.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(figure)
