"""Fresh, timestamped output directories for pipeline runs.

Why: a second run must never collide with the first (a LeRobot dataset refuses a directory
that already holds one, and mixing two runs in one dataset would be worse), and ``latest``
finds the newest run without listing. Same scheme as the spec's ``logs/{timestamp}/``.
"""
from __future__ import annotations

import itertools
import os
import shutil
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
    _point_latest(root, run.name)
    return run


def _point_latest(root: Path, run_name: str | None) -> None:
    link = root / 'latest'
    tmp = root / f'.latest.{os.getpid()}.tmp'
    try:
        tmp.unlink(missing_ok=True)
        if run_name is None:
            if link.is_symlink():
                link.unlink()
            return
        tmp.symlink_to(run_name)
        os.replace(tmp, link)  # atomic: readers never see a missing link
    except OSError:  # e.g. 'latest' is a real directory, or no symlinks here: the runs themselves are fine
        tmp.unlink(missing_ok=True)


def discard_if_empty(run: str | Path) -> bool:
    """Remove a run directory that holds no file at all (a run that failed before it recorded
    anything, e.g. teleop device missing) and point ``latest`` back at the newest run left.
    A directory with any file in it (data, logs) is kept. True when it was removed."""
    run = Path(run)
    if not run.is_dir() or any(p.is_file() or p.is_symlink() for p in run.rglob('*')):
        return False
    shutil.rmtree(run)
    root = run.parent
    if (root / 'latest').is_symlink() and os.readlink(root / 'latest') == run.name:
        runs = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink()
                      and not p.name.startswith('.'))
        _point_latest(root, runs[-1] if runs else None)
    return True


def existing_datasets(collect_dir: str | Path) -> list[Path]:
    """LeRobot datasets already under a collection directory (one per env node)."""
    from ..episodes.lerobot_format import holds_dataset  # here: launch files import this module, keep it light
    return sorted(d for d in Path(collect_dir).glob('env_*') if holds_dataset(d))
