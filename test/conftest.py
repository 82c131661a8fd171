"""Test isolation: every run gets its own DDS domain on localhost only.

Other processes on the machine use DDS too; a unique ROS_DOMAIN_ID per run (and per
xdist worker) keeps their traffic and ours apart. Subprocesses inherit the environment.
"""
import os
import random

import pytest

from xdist_schedule import pytest_xdist_make_scheduler  # noqa: F401  (a hook: the suite's scheduler)

if 'RL_TRAJ_ROS_TEST_DOMAIN' not in os.environ:
    os.environ['RL_TRAJ_ROS_TEST_DOMAIN'] = str(random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), 'little'))
                                                .randint(10, 200))
# xdist workers inherit the controller's domain: each takes its own next to it (gw0 +0, gw1 +1, ...)
_worker = os.environ.get('PYTEST_XDIST_WORKER', 'gw0')
os.environ['ROS_DOMAIN_ID'] = str(int(os.environ['RL_TRAJ_ROS_TEST_DOMAIN']) + int(_worker[2:] or 0))
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
os.environ.setdefault('MUJOCO_GL', 'egl')
# torch in a test process (and the CLIs it starts) gets its share of the cores: an OpenMP team of
# every core in each of two workers spins against the other's (test_rlpd.py + test_ppo.py beside a
# busy core: 41 s with 2 threads each, 21 s with 1). Nodes set their own (`torch_threads`).
_workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
os.environ.setdefault('OMP_NUM_THREADS', str(max(1, (os.cpu_count() or 1) // _workers)))


@pytest.fixture
def rclpy_context():
    import rclpy
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    yield ctx
    ctx.try_shutdown()


# The longest files first: xdist hands each worker whole files (--dist loadfile) in collection
# order, so a long file collected last would run alone at the end while the other worker idles.
# Order from the suite's own --durations (docs/tests.md); files not listed keep their order after.
LONGEST_FIRST = ('test_fault_tolerance.py', 'test_real_collect.py', 'test_real_labels.py', 'test_sim_pipeline.py',
                 'test_sim_train.py',
                 'test_lerobot_policy.py', 'test_rlpd_loop.py', 'test_multi_host.py', 'test_rlpd_images.py',
                 'test_node_signals.py')


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    order = {id(item): n for n, item in enumerate(items)}
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), order[id(item)]))
