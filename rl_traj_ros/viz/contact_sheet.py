"""Replay-buffer trajectories -> one PNG contact sheet (headless), to eyeball what was stored.

    python -m rl_traj_ros.viz.contact_sheet BUFFER_DIR --out sheet.png [--field curr_obs/main_images]
Each tile is one stored sample (a chunk's observation), titled seq:row (the trajectory's
sequence number in the buffer and the row), reward and done; trajectories are sampled
evenly. Drawn with matplotlib; reads pt files with weights_only=True (safe).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ..storage.files import load_trajectory, read_json, trajectory_filename
from ..storage.index import INDEX_FILE, METADATA_FILE
from .curves import pyplot

IMAGE_FIELDS = ('curr_obs/main_images', 'obs/main_images', 'main_images', 'curr_obs/image', 'image')


def make_contact_sheet(buffer_dir: str, out: str, field: str | None = None, max_tiles: int = 48,
                       columns: int = 8, tile: int = 128) -> Path:
    d = Path(buffer_dir)
    meta = read_json(d / METADATA_FILE, 'metadata')
    seqs = read_json(d / INDEX_FILE, 'index')['trajectory_ids']
    if not seqs:
        raise ValueError(f'{d} holds no trajectories')
    fmt = meta['trajectory_format']
    per = max(1, max_tiles // len(seqs))
    tiles = []
    for seq in seqs[:: max(1, len(seqs) // max_tiles)][:max_tiles]:
        data = load_trajectory(d / trajectory_filename(seq, fmt), fmt)
        key = field or next((k for k in IMAGE_FIELDS if k in data), None)
        if key is None or key not in data:
            raise ValueError(f'no image field {key or ""} in trajectory {seq}; fields: {sorted(data)} (collect '
                             'observations with collect_transitions, or pass --field)')
        imgs = data[key]
        rows = np.linspace(0, imgs.shape[0] - 1, min(per, imgs.shape[0])).astype(int)
        for r in rows:
            img = imgs[int(r)].numpy()
            if img.ndim == 4:  # [views, H, W, C]: first view
                img = img[0]
            if img.dtype != np.uint8:
                img = (np.clip(img, 0, 1) * 255).astype(np.uint8)
            label = f'{seq}:{int(r)}'
            if 'rewards' in data:
                label += f' r={float(data["rewards"][int(r)].float().sum()):.2f}'
            if 'dones' in data and bool(data['dones'][int(r)].any()):
                label += ' done'
            tiles.append((img, label))
            if len(tiles) >= max_tiles:
                break
        if len(tiles) >= max_tiles:
            break
    plt = pyplot()
    cols = min(columns, len(tiles))
    rows_n = (len(tiles) + cols - 1) // cols
    inch = tile / 100
    fig, axes = plt.subplots(rows_n, cols, figsize=(cols * inch, rows_n * (inch + 0.25)), squeeze=False,
                             layout='constrained')
    for ax in axes.flat:
        ax.axis('off')
    for ax, (img, label) in zip(axes.flat, tiles):
        ax.imshow(img, interpolation='nearest')
        ax.set_title(label, fontsize=6)
    fig.suptitle(f'{d.name}: {len(seqs)} trajectories, field {key}', fontsize=8)
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return out_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument('buffer_dir')
    ap.add_argument('--out', default='contact_sheet.png')
    ap.add_argument('--field')
    ap.add_argument('--max-tiles', type=int, default=48)
    args = ap.parse_args(argv)
    print(make_contact_sheet(args.buffer_dir, args.out, args.field, args.max_tiles))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
