"""The pipeline across hosts (network namespaces joined by a switch, as root): a link cut longer
than DDS's 20 s lease, and 20 % packet loss on every host; nothing lost, nothing duplicated.
In a file of their own so that the test workers share the fault tests' minutes."""
import json
from pathlib import Path

import pytest

from test_fault_tolerance import audit, expected_keys


def _multi_host(tmp_path, mode, seconds, steps):
    import os
    import subprocess
    import sys
    import netns
    if not netns.available():
        pytest.skip('needs root and ip netns')
    if mode == 'loss' and subprocess.run(['which', 'nft'], capture_output=True).returncode:
        pytest.skip('needs nftables (apt-get install nftables; .ci/run installs it)')
    env = {k: v for k, v in os.environ.items() if k != 'ROS_AUTOMATIC_DISCOVERY_RANGE'}
    env['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'SUBNET'  # LOCALHOST would keep DDS off the veth links
    if mode == 'loss':  # what the README tells users on a lossy link: 100 ms heartbeats instead of 3 s
        env['FASTDDS_DEFAULT_PROFILES_FILE'] = str(Path(__file__).resolve().parents[1] / 'config'
                                                   / 'fastdds_lossy_link.xml')
    with netns.Hosts(['env', 'trainer', 'store']) as hosts:
        if mode == 'loss':
            for h in ('env', 'trainer', 'store'):
                hosts.drop_egress(h, seconds)
        cmd = [*hosts.prefix('trainer'), sys.executable, 'test/netns_driver.py', str(tmp_path), hosts.ns['env'],
               hosts.ns['store'], hosts.sw, hosts.ifaces['env'][1], mode, str(seconds), str(steps)]
        out = subprocess.run(cmd, cwd=str(Path(__file__).resolve().parents[1]), capture_output=True, text=True,
                             env=env, timeout=540)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r


def test_multi_host_link_cut_longer_than_the_lease(tmp_path):
    steps = 6  # the cut at 20 chunks, 40 more after it
    r = _multi_host(tmp_path, 'cut', 25, steps)
    assert r['events'] == [('cut', True), ('restored', True)] or r['events'] == [['cut', True], ['restored', True]]
    assert r['exit_codes']['env_0'] == 0, r
    lost, dup, stored = audit(tmp_path, expected_keys(steps, 10))
    assert (lost, dup, stored) == (0, 0, steps * 10)


def test_multi_host_20_percent_packet_loss(tmp_path):
    steps = 2
    r = _multi_host(tmp_path, 'loss', 20, steps)
    assert r['exit_codes']['env_0'] == 0, r
    lost, dup, stored = audit(tmp_path, expected_keys(steps, 10))
    assert (lost, dup, stored) == (0, 0, steps * 10)
