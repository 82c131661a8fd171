"""An installed package finds its config through the package share directory, and the
checkout tracks no machine-specific paths."""
import subprocess

import pytest

from rl_traj_ros.paths import SOURCE_ROOT, config_path

from rosutil import ROOT


def test_config_comes_from_the_source_tree_in_a_checkout():
    assert config_path('sim_collect.yaml') == SOURCE_ROOT / 'config' / 'sim_collect.yaml'


def test_installed_package_finds_its_config_in_the_share_directory():
    """As from an installed workspace (no source tree beside the Python files): the ament index
    of the built package (.colcon/install, on AMENT_PREFIX_PATH via env.sh) gives the share dir."""
    got = config_path('real_collect.yaml', source_root=None)
    assert got.parts[-4:] == ('share', 'rl_traj_ros', 'config', 'real_collect.yaml') and got.is_file()
    assert got.read_text() == (ROOT / 'config' / 'real_collect.yaml').read_text()
    with pytest.raises(FileNotFoundError, match='install/setup.bash'):
        config_path('no_such.yaml', source_root=None)


def test_the_venv_link_is_not_tracked():
    if not (ROOT / '.git').exists():
        pytest.skip('not a git checkout')
    tracked = subprocess.run(['git', 'ls-files', '.venv'], cwd=ROOT, capture_output=True, text=True).stdout
    assert tracked == ''
