"""Curves as PNG files with matplotlib (headless: the Agg backend), titled and labelled."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (no display on a robot workstation)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def plot_curves(series: Mapping[str, Sequence[tuple[float, float]]], out: str | Path, title: str, xlabel: str,
                ylabel: str, percent: bool = False) -> Path:
    """One line per named series of (x, y) points, with a legend; ``percent``: y in [0, 1]
    shown as 0-100 %."""
    plt = pyplot()
    from matplotlib.ticker import PercentFormatter
    fig, ax = plt.subplots(figsize=(7.5, 4.2), layout='constrained')
    for name, pts in series.items():
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker='o', markersize=3, linewidth=1.6, label=name)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if percent:
        ax.set_ylim(-0.03, 1.03)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.grid(True, alpha=0.3)
    ax.legend(loc='best')
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


__all__ = ['pyplot', 'plot_curves']
