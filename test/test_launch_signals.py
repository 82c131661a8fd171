"""Ctrl-C as `ros2 launch` delivers it (test/launch_signals.py): SIGINT to the process group, a
second SIGINT to each node after a gap, SIGTERM at 5 s, SIGKILL at 10 s. Every node exits 0 before
the SIGTERM, the buffer loads, and every chunk the env executed is stored exactly once or reported
unstored by key (the collector's open step), at every gap and at several moments of the run."""
import json
import re
from pathlib import Path

import pytest

from rl_traj_ros.data.identity import TrajectoryId
from rl_traj_ros.data.schema import TrajectoryKey
from rl_traj_ros.pipelines import sim_collect as sc
from rl_traj_ros.pipelines import sim_train as st
from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer

from launch_signals import SIGTERM_AFTER_S, LaunchLikeRun

GAPS = (0.01, 0.3, 0.7, 1.5, 3.0)
# chunks the env executed before the Ctrl-C (a step is 10 chunks here): mid-step, just after a step
# ended (the collector's flush and the writer's write under way), and in later steps
MOMENT = {0.01: 3, 0.3: 10, 0.7: 11, 1.5: 16, 3.0: 20}


def _stored_cells(buffer_dir: Path) -> list:
    index = json.loads((buffer_dir / 'trajectory_index.json').read_text())
    cells = []
    for entry in index['trajectories'].values():
        ident = TrajectoryId.from_json(entry['identity'])
        cells += ident.cells([TrajectoryKey.from_tuple(k) for k in entry['keys']])
    return cells


def _check(run: LaunchLikeRun, ended: dict, out: Path) -> None:
    logs = {n: (run.work / 'node_logs' / f'{n}.log').read_text() for n in run.procs}
    for name in run.procs:
        code, after_s, last = ended.get(name, (None, None, None))
        assert code == 0 and after_s < SIGTERM_AFTER_S, (name, ended, logs[name][-3000:])
        assert 'Traceback' not in logs[name], logs[name][-3000:]
    buf = TrajectoryReplayBuffer(sample_window_size=0)
    buf.load_checkpoint(str(out / 'replay_buffer'))  # whole: index, metadata and every file
    cells = _stored_cells(out / 'replay_buffer')
    assert len(cells) == len(set(cells)), 'a cell stored twice'
    stored_keys = {key for key, _ in cells}
    executed = sum(int(re.search(r'done: .*?\bchunks=(\d+)', logs[n]).group(1)) for n in run.env_names)
    m = re.search(r'(\d+) chunk keys were not stored because', logs['collector'])
    reported = int(m.group(1)) if m else 0
    assert len(stored_keys) + reported == executed, (len(stored_keys), reported, executed, logs['collector'][-2000:])
    assert 'not acknowledged as stored:' not in logs['collector']


@pytest.mark.parametrize('gap_s', GAPS)
def test_sim_collect_ends_whole_on_a_launch_ctrl_c(tmp_path, gap_s):
    p = sc.apply_overrides(sc.load_params(sc.DEFAULT_CONFIG), num_env_nodes=1, output_dir=str(tmp_path),
                           image_obs=False)
    p['franka_env_node'].update(target_successes=100000, camera_topic_rate_hz=0.0)  # runs until the Ctrl-C
    run = LaunchLikeRun(sc.params_yaml(p), tmp_path / 'run')
    try:
        run.start_pipeline(1)
        run.wait_for('env_0', 'chunks', MOMENT[gap_s])
        ended = run.ctrl_c(gap_s)
    finally:
        run.stop()
    _check(run, ended, tmp_path)


def test_sim_train_ends_whole_on_a_launch_ctrl_c(tmp_path):
    """With the learner beside the data path (PPO): stopped mid-step, 0.7 s between the two SIGINTs."""
    p = st.train_params(sc.config_path('sim_train.yaml'), 1, str(tmp_path), steps=50)
    run = LaunchLikeRun(sc.params_yaml(p), tmp_path / 'run')
    try:
        run.start_pipeline(1, {'learner': ('learner_node', [])})
        run.wait_for('env_0', 'chunks', 13)
        ended = run.ctrl_c(0.7)
    finally:
        run.stop()
    _check(run, ended, tmp_path)
