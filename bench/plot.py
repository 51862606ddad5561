"""bench/results/scarcity.png: Launch calls and modelled time to fill against scarcity."""

from __future__ import annotations

from pathlib import Path
from statistics import median

import matplotlib

matplotlib.use("Agg")  # no display on CI or a server
import matplotlib.pyplot as plt  # noqa: E402

from bench.analysis import Row  # noqa: E402
from bench.cases import TIERS  # noqa: E402
from bench.outcome import SIMULATED, STRATEGIES  # noqa: E402
from bench.tables import tier_series  # noqa: E402

STYLE = {"broker": ("tab:gray", "s"), "karpenter": ("tab:purple", "v"), "classic": ("tab:orange", "^"), "gpufill": ("tab:blue", "o"), "oracle": ("tab:green", "D")}


def draw(rows: list[Row], path: Path, caption: str) -> None:
    tiers = [t for t in TIERS if any(r.case.tier == t for r in rows)]
    shares = [median(r.case.sold_out_share for r in rows if r.case.tier == t) for t in tiers]
    labels = [f"{t}\n({s:.0%} sold out)" for t, s in zip(tiers, shares)]
    panels = [
        ("launch calls per case (mean)", tier_series(rows, lambda r: r.outcome.launch_calls)),
        ("modelled time to fill, s (mean)", tier_series(rows, lambda r: r.outcome.modelled_seconds)),
    ]
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for axis, (title, series) in zip(axes, panels):
        for strategy in STRATEGIES:
            values = [v for t, v in zip(TIERS, series[strategy]) if t in tiers]
            colour, marker = STYLE[strategy]
            label = strategy + (" (simulated)" if strategy in SIMULATED else "")
            axis.plot(labels, values, color=colour, marker=marker, label=label, linestyle="--" if strategy in SIMULATED else "-")
        axis.set_title(title)
        axis.set_yscale("log")
        axis.grid(True, which="both", alpha=0.3)
        axis.tick_params(axis="x", labelsize=8)
    axes[0].legend()
    figure.suptitle(f"gpufill scarcity benchmark: requests of 1, 4, 16 and 64 ({caption})")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(figure)
