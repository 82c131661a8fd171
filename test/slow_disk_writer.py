"""The replay-buffer writer node on a slow disk: each trajectory file write sleeps first
(``SLOW_DISK_S`` seconds). A test's variant of the node, run by ``faults.FaultRun``."""
import os
import sys
import time

from rl_traj_ros.nodes.common import run_node
from rl_traj_ros.nodes.replay_buffer_writer_node import ReplayBufferWriterNode
from rl_traj_ros.storage.files import TrajectoryFiles

DELAY_S = float(os.environ.get('SLOW_DISK_S', '1.5'))


class SlowDisk(TrajectoryFiles):
    def save(self, seq, data):
        time.sleep(DELAY_S)
        super().save(seq, data)


if __name__ == '__main__':
    raise SystemExit(run_node(lambda: ReplayBufferWriterNode(storage_type=SlowDisk), sys.argv))
