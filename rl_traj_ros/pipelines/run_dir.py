"""Fresh, timestamped output directories for pipeline runs.

Why: a second run must never collide with the first (a LeRobot dataset refuses a directory
that already holds one, and mixing two runs in one dataset would be worse), and ``latest``
finds the newest run without listing. Same scheme as the spec's ``logs/{timestamp}/``.
"""
from __future__ import annotations

import itertools
import os
import time
from pathlib import Path


def new_run_dir(root: str | Path) -> Path:
    """Create ``root/<YYYYmmdd-HHMMSS>[-N]`` and point ``root/latest`` at it."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime('%Y%m%d-%H%M%S')
    for n in itertools.count():
        run = root / (stamp if n == 0 else f'{stamp}-{n}')
        try:
            run.mkdir()
            break
        except FileExistsError:
            continue
    tmp = root / f'.latest.{os.getpid()}.tmp'
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(run.name)
        os.replace(tmp, root / 'latest')  # atomic: readers never see a missing link
    except OSError:  # e.g. 'latest' is a real directory, or no symlinks here: the run itself is fine
        tmp.unlink(missing_ok=True)
    return run


def existing_datasets(collect_dir: str | Path) -> list[Path]:
    """LeRobot datasets already under a collection directory (one per env node)."""
    from ..core.episodes.lerobot_writer import holds_dataset  # here: launch files import this module, keep it light
    return sorted(d for d in Path(collect_dir).glob('env_*') if holds_dataset(d))
