"""A training run's metrics.jsonl -> a learning-curve PNG (matplotlib): success rate, reward
per step, the losses, entropy and KL (PPO) or critic and actor loss, Q, temperature and UTD
(RLPD) against the update, one panel each.

    python -m rl_traj_ros.cli learning-curve RUN_DIR --out curve.png
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .curves import pyplot

PANELS = (('success_rate', 'success rate (training episodes)'), ('reward_per_step', 'reward per step'),
          ('policy_loss', 'policy loss'), ('value_loss', 'value loss'), ('entropy', 'entropy'),
          ('approx_kl', 'approx. KL'),   # PPO's; RLPD's:
          ('critic_loss', 'critic loss'), ('actor_loss', 'actor loss'), ('q_mean', 'mean Q'),
          ('temperature', 'temperature (alpha)'), ('utd', 'critic steps per control step'))


def learning_curve(run_dir: str | Path, out: str | Path) -> Path:
    lines = [json.loads(x) for x in (Path(run_dir) / 'metrics.jsonl').read_text().splitlines() if x.strip()]
    if not lines:
        raise ValueError(f'{run_dir}/metrics.jsonl has no updates')
    panels = [(k, t) for k, t in PANELS if any(k in m for m in lines)]
    plt = pyplot()
    cols = 2 if len(panels) > 1 else 1
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 2.9 * rows), layout='constrained', squeeze=False)
    updates = list(range(1, len(lines) + 1))
    for ax, (key, title) in zip(axes.flat, panels):
        ys = [float(m.get(key, float('nan'))) for m in lines]
        ax.plot(updates, ys, marker='o', markersize=3, linewidth=1.5, label=f'last {ys[-1]:.4g}')
        ax.set(title=title, xlabel='update', ylabel=key)
        ax.grid(True, alpha=0.3)
        ax.legend(loc='best', fontsize='small')
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(f'{Path(run_dir).resolve().name}: {len(lines)} updates')
    out = Path(out)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('run_dir')
    ap.add_argument('--out', default='learning_curve.png')
    args = ap.parse_args(argv)
    print(learning_curve(args.run_dir, args.out))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
