"""The replay-buffer writer node on a slow disk: each trajectory file write sleeps first
(``SLOW_DISK_S`` seconds). A test's variant of the node, run by ``faults.FaultRun``: the node
buffer factory's storage class is replaced in this process only (production code has no hook for it)."""
import os
import sys
import time

from rl_traj_ros.assembly import build
from rl_traj_ros.nodes.common import run_node
from rl_traj_ros.nodes.replay_buffer_writer_node import ReplayBufferWriterNode
from rl_traj_ros.storage.files import TrajectoryFiles

DELAY_S = float(os.environ.get('SLOW_DISK_S', '1.5'))


class SlowDisk(TrajectoryFiles):
    def put(self, seq, data):
        time.sleep(DELAY_S)
        super().put(seq, data)


if __name__ == '__main__':
    build.TrajectoryFiles = SlowDisk
    raise SystemExit(run_node(ReplayBufferWriterNode, sys.argv))
