"""Plots of benchmark results (matplotlib, drawn off-screen): WER against RTFx for a sweep, and
per-utterance WER distributions of runs on the same set."""

from __future__ import annotations

from pathlib import Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_sweep(result: dict, stem: Path) -> None:
    """WER (%) against RTFx (log scale), one line per system, each point labelled with its setting;
    the set, machine, date and load in the caption. Writes stem.png and stem.svg."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.2))
    by_system: dict[str, list[dict]] = {}
    for p in result["points"]:
        by_system.setdefault(p["system"], []).append(p)
    for name, pts in by_system.items():
        pts = sorted(pts, key=lambda p: p["rtfx"])
        ax.plot([p["rtfx"] for p in pts], [p["wer"] * 100 for p in pts], marker="o", label=name)
        for p in pts:
            ax.annotate(
                p["setting"],
                (p["rtfx"], p["wer"] * 100),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda x, _: f"{x:g}")
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(plain)
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_xlabel("RTFx (audio seconds per wall second; log scale)")
    ax.set_ylabel("WER (%)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    load = result["load_average"]
    caption = (
        f"{result['note']}\n{result['machine']}; {result['date']}; load average "
        f"{load['before'][0]:.2f} before, {load['after'][0]:.2f} after"
    )
    fig.text(0.01, 0.01, caption, fontsize=7, va="bottom")
    fig.subplots_adjust(bottom=0.2)
    fig.savefig(f"{stem}.png", dpi=120)
    fig.savefig(f"{stem}.svg")
    plt.close(fig)


def plot_wer_distributions(runs: dict[str, list[float]], path: Path, caption: str = "") -> None:
    """The per-utterance WER of each run as a cumulative distribution (share of utterances at or
    below each WER), one line per run; `path` ends in .png or .svg."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, wers in runs.items():
        xs = sorted(w * 100 for w in wers)
        ys = [(i + 1) / len(xs) * 100 for i in range(len(xs))]
        ax.step(xs, ys, where="post", label=f"{name} (mean {sum(xs) / max(len(xs), 1):.1f}%)")
    ax.set_xlabel("utterance WER (%)")
    ax.set_ylabel("utterances at or below (%)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    if caption:
        fig.text(0.01, 0.01, caption, fontsize=7, va="bottom")
        fig.subplots_adjust(bottom=0.18)
    fig.savefig(path, dpi=120)
    plt.close(fig)
