"""Acceptance by the real client: load a dataset we wrote with lerobot 0.6.1 and compare
every frame with what was recorded (the writer's truth_dir npz files).

Runs inside the lerobot venv (Python 3.12, tools/lerobot_venv.sh), offline:
    HF_HUB_OFFLINE=1 <lerobot-venv>/bin/python tools/lerobot_accept.py DATASET_DIR TRUTH_DIR [--convert-v21]
--convert-v21 first runs lerobot's official v2.1 -> v3.0 converter on DATASET_DIR (in place).
Prints one summary line and exits non-zero on any mismatch.
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault('HF_HUB_OFFLINE', '1')


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument('dataset')
    ap.add_argument('truth')
    ap.add_argument('--convert-v21', action='store_true')
    args = ap.parse_args()
    root = Path(args.dataset).resolve()
    if args.convert_v21:
        subprocess.run([sys.executable, '-m', 'lerobot.scripts.convert_dataset_v21_to_v30', '--repo-id=local/accept',
                        f'--root={root}', '--push-to-hub=false'], check=True, capture_output=True)
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    ds = LeRobotDataset('local/accept', root=root)
    truth = {int(p.stem.split('_')[1]): dict(np.load(p)) for p in sorted(Path(args.truth).glob('episode_*.npz'))}
    mismatches, frames = [], 0
    image_keys = [k for k, f in ds.meta.features.items() if f['dtype'] == 'image']
    for i in range(len(ds)):
        item = ds[i]
        ep, fi = int(item['episode_index']), int(item['frame_index'])
        t = truth[ep]
        for k in image_keys:
            got = (item[k].numpy().transpose(1, 2, 0) * 255.0).round().astype(np.uint8)
            if not np.array_equal(got, t[k][fi]):
                mismatches.append(f'episode {ep} frame {fi} {k}')
        for k in ('state', 'actions'):
            if k in t and not np.array_equal(item[k].numpy(), t[k][fi]):
                mismatches.append(f'episode {ep} frame {fi} {k}')
        for k in ('done', 'is_success'):
            if bool(item[k]) != bool(t[k][fi]):
                mismatches.append(f'episode {ep} frame {fi} {k}')
        if item['task'] != str(t['task']):
            mismatches.append(f'episode {ep} frame {fi} task {item["task"]!r} != {str(t["task"])!r}')
        if int(item['index']) != i:
            mismatches.append(f'row {i} index {int(item["index"])}')
        frames += 1
    expected = sum(len(t['actions']) for t in truth.values())
    ok = not mismatches and frames == expected and ds.meta.total_episodes == len(truth)
    print(f'lerobot {__import__("lerobot").__version__}: {ds.meta.total_episodes} episodes, {frames}/{expected} '
          f'frames compared, {len(mismatches)} mismatches, stats keys {sorted(ds.meta.stats)[:3]}...: '
          f'{"PASS" if ok else "FAIL"}')
    for m in mismatches[:20]:
        print('  mismatch:', m)
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
