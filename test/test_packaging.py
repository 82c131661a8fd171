"""An installed package finds its config through the package share directory, and the
checkout tracks no machine-specific paths."""
import json
import os
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
    tracked = subprocess.run(['git', 'ls-files', '.venv*'], cwd=ROOT, capture_output=True, text=True).stdout
    assert tracked == ''


# ros/rosdistro as the suite can't reach it: tools/rosdep_keys.py's extract of rosdep/base.yaml,
# rosdep/python.yaml and each distro's distribution.yaml (the commit is in the file's 'source').
ROSDISTRO = json.loads((ROOT / 'test' / 'fixtures' / 'rosdistro.json').read_text())
SUPPORTED = ('jazzy', 'kilted')
PIP_ONLY = ('pyarrow', 'av', 'gym-hil', 'franky-control', 'franky-sim', 'pyspacemouse', 'dynamixel-sdk')


def _deps():
    import xml.etree.ElementTree as ET
    root = ET.parse(ROOT / 'package.xml').getroot()
    return {e.text.strip() for e in root if e.tag.endswith('depend')}


def _unresolved(distro):
    """(package.xml dependencies neither released by ``distro`` nor rosdep keys on its Ubuntu,
    the rosdep rules of that Ubuntu)."""
    d = ROSDISTRO['distros'][distro]
    keys = ROSDISTRO['rosdep'][d['ubuntu']]
    return sorted(k for k in _deps() if k not in d['ros_packages'] and k not in keys), keys


@pytest.mark.parametrize('distro', SUPPORTED)
def test_every_package_xml_dependency_resolves_with_rosdep_on_the_distros_ubuntu(distro):
    """What `rosdep install --from-paths src -y --ignore-src` needs on a Jazzy (Kilted) workstation:
    every dependency a package the distro releases or a rosdep key with a rule for its Ubuntu."""
    unresolved, keys = _unresolved(distro)
    assert unresolved == [], f'no {distro} package or rosdep key on its Ubuntu: {unresolved}'
    lock = (ROOT / 'requirements.lock').read_text().lower()
    for key in sorted(_deps() & set(keys)):  # a pip rule installs what requirements.lock pins
        installer, *names = keys[key]
        if installer == 'pip':
            assert all(f'\n{n.lower()}==' in lock for n in names), (key, names)


def test_the_pip_only_requirements_have_no_rosdep_key_and_are_named_in_package_xml():
    """The seven pip requirements without a key: none gained one since the fixture was made (else it
    belongs in package.xml), each pinned in requirements.lock and named in package.xml's comment."""
    keys = ROSDISTRO['rosdep']['noble']
    by_pip = {n.lower() for installer, *names in keys.values() if installer == 'pip' for n in names}
    lock = (ROOT / 'requirements.lock').read_text()
    xml_text = (ROOT / 'package.xml').read_text()
    for name in PIP_ONLY:
        assert name.lower() not in by_pip and f'python3-{name}' not in keys, name
        assert f'\n{name}==' in lock and name in xml_text, name
    assert 'python3-pytorch-pip' not in _deps()  # an end-of-life alias in rosdistro


def test_humble_lacks_no_key_either_but_has_no_wheels_here():
    """A Humble workstation (Ubuntu 22.04) resolves the same keys (docs/setup.md#humble); set-up here
    refuses Humble by name, since the registry has no Humble wheels."""
    assert _unresolved('humble')[0] == []
    r = subprocess.run(['bash', 'tools/setup.sh'], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, 'RL_TRAJ_ROS_DISTRO': 'humble'})
    assert r.returncode == 2 and 'Humble has no wheels' in r.stderr and 'docs/setup.md#humble' in r.stderr
