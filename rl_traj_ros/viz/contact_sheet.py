"""Replay-buffer trajectories -> one PNG contact sheet (headless), to eyeball what was stored.

    python -m rl_traj_ros.viz.contact_sheet BUFFER_DIR --out sheet.png [--field curr_obs/main_images]
Each tile is one stored sample (a chunk's observation), labelled trajectory:row, reward and
done; trajectories are sampled evenly. Reads pt files with weights_only=True (safe).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from ..storage.index import INDEX_FILE, METADATA_FILE
from ..storage.files import load_trajectory, read_json, trajectory_filename

IMAGE_FIELDS = ('curr_obs/main_images', 'obs/main_images', 'main_images', 'curr_obs/image', 'image')


def make_contact_sheet(buffer_dir: str, out: str, field: str | None = None, max_tiles: int = 48,
                       columns: int = 8, tile: int = 128) -> Path:
    d = Path(buffer_dir)
    meta = read_json(d / METADATA_FILE, 'metadata')
    ids = read_json(d / INDEX_FILE, 'index')['trajectory_ids']
    if not ids:
        raise ValueError(f'{d} holds no trajectories')
    fmt = meta['trajectory_format']
    per = max(1, max_tiles // len(ids))
    tiles = []
    for tid in ids[:: max(1, len(ids) // max_tiles)][:max_tiles]:
        data = load_trajectory(d / trajectory_filename(tid, fmt), fmt)
        key = field or next((k for k in IMAGE_FIELDS if k in data), None)
        if key is None or key not in data:
            raise ValueError(f'no image field {key or ""} in trajectory {tid}; fields: {sorted(data)} (collect '
                             'observations with collect_transitions, or pass --field)')
        imgs = data[key]
        rows = np.linspace(0, imgs.shape[0] - 1, min(per, imgs.shape[0])).astype(int)
        for r in rows:
            img = imgs[int(r)].numpy()
            if img.ndim == 4:  # [views, H, W, C]: first view
                img = img[0]
            if img.dtype != np.uint8:
                img = (np.clip(img, 0, 1) * 255).astype(np.uint8)
            label = f'{tid}:{int(r)}'
            if 'rewards' in data:
                label += f' r={float(data["rewards"][int(r)].float().sum()):.2f}'
            if 'dones' in data and bool(data['dones'][int(r)].any()):
                label += ' done'
            tiles.append((Image.fromarray(img).resize((tile, tile), Image.NEAREST), label))
            if len(tiles) >= max_tiles:
                break
        if len(tiles) >= max_tiles:
            break
    rows_n = (len(tiles) + columns - 1) // columns
    sheet = Image.new('RGB', (columns * tile, rows_n * (tile + 14)), 'white')
    draw = ImageDraw.Draw(sheet)
    for i, (im, label) in enumerate(tiles):
        x, y = (i % columns) * tile, (i // columns) * (tile + 14)
        sheet.paste(im, (x, y))
        draw.text((x + 2, y + tile), label, fill='black')
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out_path)
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
