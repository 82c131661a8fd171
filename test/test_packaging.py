"""An installed package finds its config through the package share directory, and the
checkout tracks no machine-specific paths."""
import subprocess

import pytest

from rl_traj_ros.params.paths import SOURCE_ROOT, config_path

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


# Audited against ros/rosdistro (kilted/distribution.yaml and rosdep/python.yaml, fetched
# 2026-12-01): ROS packages of the distribution, and rosdep keys that resolve on Debian/Ubuntu.
# python3-pyarrow, python3-av, python3-mujoco and python3-gymnasium are NOT rosdep keys there,
# and python3-pytorch-pip is an end-of-life alias: none may come back into package.xml.
ROS_PACKAGES = {'ament_cmake', 'ament_cmake_python', 'ament_cmake_pytest', 'rosidl_default_generators',
                'rosidl_default_runtime', 'std_msgs', 'sensor_msgs', 'builtin_interfaces', 'rclpy', 'lifecycle_msgs',
                'geometry_msgs', 'diagnostic_msgs', 'launch', 'launch_ros', 'pinocchio'}
ROSDEP_KEYS = {'python3-numpy', 'python3-yaml', 'python3-torch', 'python3-pil', 'python3-psutil',
               'python3-gymnasium-pip', 'python3-mujoco-pip', 'python3-pytest', 'python3-hypothesis'}
PIP_ONLY = ('pyarrow', 'av', 'gym-hil', 'franky-control', 'franky-sim', 'pyspacemouse', 'dynamixel-sdk')


def test_every_package_xml_dependency_is_an_audited_rosdep_key_or_a_documented_pip_requirement():
    import xml.etree.ElementTree as ET
    root = ET.parse(ROOT / 'package.xml').getroot()
    deps = {e.text.strip() for e in root if e.tag.endswith('depend')}
    assert deps - ROS_PACKAGES - ROSDEP_KEYS == set()
    lock = (ROOT / 'requirements.lock').read_text()
    xml_text = (ROOT / 'package.xml').read_text()
    for name in PIP_ONLY:  # pinned for pip, and named in package.xml's comment
        assert f'\n{name}==' in lock and name in xml_text, name
