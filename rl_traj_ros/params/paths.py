"""Where the package's own files are, in a source checkout and in an installed workspace.

A source checkout (this repo, ``PYTHONPATH`` on the source tree) has ``config/`` beside the
Python package; a colcon-installed package has it in its share directory
(``<prefix>/share/rl_traj_ros/config``, found through the ament index), not relative to the
installed Python files.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

PACKAGE = 'rl_traj_ros'
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # rl_traj_ros/params/paths.py -> the checkout


def config_path(name: str, source_root: Optional[Path] = SOURCE_ROOT) -> Path:
    """``config/<name>`` of the source tree if this is a checkout, else of the package share."""
    if source_root is not None and (Path(source_root) / 'config' / name).is_file():
        return Path(source_root) / 'config' / name
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
        try:
            share = Path(get_package_share_directory(PACKAGE))
        except PackageNotFoundError:
            share = None
    except ImportError:
        share = None
    if share is not None and (share / 'config' / name).is_file():
        return share / 'config' / name
    raise FileNotFoundError(f'config/{name} is neither in a source checkout nor in the installed share directory '
                            f'of {PACKAGE} (source the workspace: install/setup.bash)')
