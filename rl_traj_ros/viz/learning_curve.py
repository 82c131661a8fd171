"""A training run's metrics.jsonl -> a learning-curve PNG (success rate, reward per step,
policy and value loss against the update), drawn with Pillow (no plotting stack needed).

    python -m rl_traj_ros.cli learning-curve RUN_DIR --out curve.png
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from PIL import Image, ImageDraw

PANELS = (('success_rate', 'success rate'), ('reward_per_step', 'reward / step'),
          ('policy_loss', 'policy loss'), ('value_loss', 'value loss'))
W, H, PAD = 360, 220, 36


def learning_curve(run_dir: str | Path, out: str | Path) -> Path:
    lines = [json.loads(x) for x in (Path(run_dir) / 'metrics.jsonl').read_text().splitlines() if x.strip()]
    if not lines:
        raise ValueError(f'{run_dir}/metrics.jsonl has no updates')
    img = Image.new('RGB', (2 * W, 2 * H), 'white')
    draw = ImageDraw.Draw(img)
    for i, (key, title) in enumerate(PANELS):
        x0, y0 = (i % 2) * W, (i // 2) * H
        ys = [float(m.get(key, 0.0)) for m in lines]
        lo, hi = min(ys), max(ys)
        if hi - lo < 1e-12:
            lo, hi = lo - 0.5, hi + 0.5
        left, top, right, bottom = x0 + PAD, y0 + 20, x0 + W - 10, y0 + H - PAD
        draw.rectangle([left, top, right, bottom], outline='black')
        draw.text((x0 + PAD, y0 + 4), f'{title} (last {ys[-1]:.4g})', fill='black')
        draw.text((x0 + 2, top), f'{hi:.3g}', fill='gray')
        draw.text((x0 + 2, bottom - 10), f'{lo:.3g}', fill='gray')
        draw.text((left, bottom + 4), 'update 1', fill='gray')
        draw.text((right - 60, bottom + 4), f'update {len(ys)}', fill='gray')
        n = max(len(ys) - 1, 1)
        pts = [(left + (right - left) * j / n, bottom - (bottom - top) * (y - lo) / (hi - lo))
               for j, y in enumerate(ys)]
        if len(pts) > 1:
            draw.line(pts, fill=(31, 119, 180), width=2)
        for p in pts:
            draw.ellipse([p[0] - 2, p[1] - 2, p[0] + 2, p[1] + 2], fill=(31, 119, 180))
    out = Path(out)
    img.save(out)
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
