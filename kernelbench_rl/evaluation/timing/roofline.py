"""The roofline of a set of timed kernels: how far each is from what its GPU allows.

Left: arithmetic intensity (FLOPs per byte moved) against achieved FLOP/s, under the GPU's roof
(min(peak, intensity x DRAM bandwidth)), for the problems whose FLOPs PyTorch counts (matrix products,
convolutions, attention). Right: every problem's share of the speed of light (floor / measured time,
evaluation/timing/floor.py), memory- and compute-bound apart, so elementwise and reduction problems (no counted FLOPs)
are seen too. Orchestrator side (matplotlib).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelbench_rl.evaluation.timing.floor import gpu_peaks

_COLOURS = {"memory": "tab:blue", "compute": "tab:orange"}


def best_timed(results: Sequence[Any]) -> dict[str, Any]:
    """Per problem, the correct result with the highest share of the speed of light (the run's best kernel)."""
    best: dict[str, Any] = {}
    for result in results:
        if not result.correct or result.sol_fraction is None:
            continue
        if result.problem_id not in best or result.sol_fraction > best[result.problem_id].sol_fraction:
            best[result.problem_id] = result
    return best


def roofline_plot(results: Sequence[Any], path: str | Path, title: str = "Speed of light") -> Path:
    """Draw the run's best kernels (see the module's docstring) into `path` (PNG); a note when none was timed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    best = best_timed(results)
    fig, (roof_ax, sol_ax) = plt.subplots(1, 2, figsize=(11, 4))
    if not best:
        for ax in (roof_ax, sol_ax):
            ax.text(0.5, 0.5, "no timed correct kernels\n(CPU runs time nothing)", ha="center", va="center",
                    transform=ax.transAxes)
            ax.set_axis_off()
    else:
        sols = [r.speed_of_light for r in best.values()]
        peaks = gpu_peaks(sols[0]["gpu"])
        arithmetic = sols[0].get("arithmetic") or "tf32"
        peak = peaks.flops_per_s.get(arithmetic, peaks.flops_per_s["fp32"])
        counted = [(pid, r.speed_of_light) for pid, r in best.items() if r.speed_of_light.get("flops")]
        if counted:
            intensities = [s["flops"] / s["bytes"] for _, s in counted]
            low, high = min(intensities + [1.0]) / 4, max(intensities + [peak / peaks.dram_bytes_per_s]) * 4
            xs = [low * (high / low) ** (i / 200) for i in range(201)]
            roof_ax.loglog(xs, [min(peak, x * peaks.dram_bytes_per_s) for x in xs], color="k", linewidth=1,
                           label=f"{peaks.name} roof ({arithmetic})")
            for (pid, s), x in zip(counted, intensities):
                roof_ax.scatter([x], [s["achieved_flops_per_s"]], s=18, color=_COLOURS[s["bound"]])
                roof_ax.annotate(pid, (x, s["achieved_flops_per_s"]), fontsize=7, xytext=(3, 2), textcoords="offset points")
            roof_ax.set_xlabel("arithmetic intensity (FLOP / byte)")
            roof_ax.set_ylabel("achieved FLOP/s")
            roof_ax.legend(fontsize=8)
        else:
            roof_ax.text(0.5, 0.5, "no problem with counted FLOPs", ha="center", va="center", transform=roof_ax.transAxes)
            roof_ax.set_axis_off()
        ordered = sorted(best.items(), key=lambda item: -item[1].sol_fraction)
        colours = [_COLOURS[r.speed_of_light["bound"]] for _, r in ordered]
        sol_ax.bar(range(len(ordered)), [r.sol_fraction for _, r in ordered], color=colours)
        sol_ax.set_xticks(range(len(ordered)), [pid for pid, _ in ordered], rotation=90, fontsize=7)
        sol_ax.axhline(1.0, color="k", linestyle="--", linewidth=1)
        sol_ax.set_ylabel("share of the speed of light")
        sol_ax.set_title("blue: memory-bound, orange: compute-bound (both panels)", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
