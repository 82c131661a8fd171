"""Extract what test/test_packaging.py checks package.xml against from a ros/rosdistro checkout:
the ROS packages each distro releases and every rosdep key (rosdep/base.yaml,
rosdep/python.yaml) as it resolves on each distro's Ubuntu. The suite cannot reach rosdistro, so
the extract is kept as test data (test/fixtures/rosdistro.json) and rerun by hand when the
dependencies change:  python tools/rosdep_keys.py <rosdistro checkout> <commit> > test/fixtures/rosdistro.json
"""
import json
import sys
from pathlib import Path

import yaml

# distro -> the Ubuntu release its apt packages are built for (REP 2000)
UBUNTU = {'jazzy': 'noble', 'kilted': 'noble', 'humble': 'jammy'}
INSTALLERS = ('apt', 'pip', 'packages', 'source')


def resolve(entry, codename, os_name='ubuntu'):
    """``['apt'|'pip', package, ...]`` as rosdep would install ``entry`` on that Ubuntu, else None."""
    if not isinstance(entry, dict):
        return None
    v = entry.get(os_name, entry.get('*'))  # '*': every OS
    if isinstance(v, dict) and not any(k in v for k in INSTALLERS):  # by codename, '*' the default
        v = v.get(codename, v.get('*'))
    if v is None:
        return None
    if isinstance(v, str):
        return ['apt', v]
    if isinstance(v, list):
        return ['apt', *v] if v else None
    for installer in ('pip', 'apt'):
        if isinstance(v.get(installer), dict):
            return [installer, *v[installer].get('packages', [])]
    return ['apt', *v['packages']] if v.get('packages') else None


def ros_packages(distribution: dict) -> list[str]:
    names = set()
    for repo, spec in distribution.get('repositories', {}).items():
        release = (spec or {}).get('release')
        if release:
            names.update(release.get('packages', [repo]))
    return sorted(names)


def main(root: str, commit: str) -> None:
    root = Path(root)
    keys = {}
    for name in ('base.yaml', 'python.yaml'):
        keys.update(yaml.safe_load((root / 'rosdep' / name).read_text()))
    out = {'source': f'ros/rosdistro {commit}: rosdep/base.yaml, rosdep/python.yaml, <distro>/distribution.yaml',
           'distros': {}, 'rosdep': {}}
    for distro, codename in UBUNTU.items():
        dist = yaml.safe_load((root / distro / 'distribution.yaml').read_text())
        out['distros'][distro] = {'ubuntu': codename, 'ros_packages': ros_packages(dist)}
        out['rosdep'][codename] = {k: r for k, v in sorted(keys.items()) if (r := resolve(v, codename)) is not None}
    json.dump(out, sys.stdout, separators=(',', ':'), sort_keys=True)
    sys.stdout.write('\n')


if __name__ == '__main__':
    main(*sys.argv[1:3])
