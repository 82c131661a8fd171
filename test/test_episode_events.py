"""The operator's episode labels reaching a running pipeline over DDS, as a user sends them
(``python -m rl_traj_ros.pipelines.episode_event``): taken from the run's signed client, ending
the labeled episode at the next step, recorded in the dataset; refused when forged, for an env the
node does not have, or before an episode runs. ROS-free parts: test_rewards.py."""
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq

from rl_traj_ros.delivery.run_guard import new_secret_file

from rosutil import ROOT, stop_process


def _label(key, *args):
    return subprocess.run([sys.executable, '-m', 'rl_traj_ros.pipelines.episode_event', '/env_0/franka_env_node',
                           *args, '--run-id', 'label-run', '--secret-file', str(key), '--timeout-s', '60'],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_label_from_a_ros_tool_ends_the_episode_and_a_forged_one_is_refused(tmp_path):
    key = new_secret_file('label-run', str(tmp_path))
    wrong = new_secret_file('label-run', str(tmp_path / 'other'))
    out = tmp_path / 'run'
    run = subprocess.Popen([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--episodes', '400', '--steps', '2000',
                            '--no-images', '--output-dir', str(out), '--run-id', 'label-run', '--secret-file', str(key)],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline, refused = time.monotonic() + 120, []
        while time.monotonic() < deadline and run.poll() is None:   # until the env runs an episode
            unknown = _label(key, 'failure', '--env-index', '7')
            if 'not 7' in unknown.stdout:
                break
            refused.append(unknown.stdout + unknown.stderr)
            time.sleep(0.5)
        assert unknown.returncode == 1 and 'envs 0..1 (or -1 for all), not 7' in unknown.stdout, refused[-3:]
        forged = _label(wrong, 'failure')
        assert forged.returncode == 1 and 'not a label of run' in forged.stdout, forged.stdout + forged.stderr
        taken = _label(key, 'success', '--env-index', '0')
        assert taken.returncode == 0 and 'success: taken for env 0' in taken.stdout, taken.stdout + taken.stderr
        time.sleep(2.0)   # a few chunks more, then the user's Ctrl-C ends the run
        run.send_signal(signal.SIGINT)
        said, _ = run.communicate(timeout=120)
    finally:
        stop_process(run)
    assert run.returncode == 0, said[-3000:]
    assert "refusing a command whose signature is not this run's" in said, said[-3000:]
    rows = pq.read_table(next((out / 'collected_data' / 'env_0').rglob('data/*/*.parquet'))).to_pylist()
    labeled = [r for r in rows if r['complementary_info.reward_source'] == 2.0]
    # the episode the operator ended with success at the step after the label: reward 1, success recorded
    assert len(labeled) == 1 and labeled[0]['next.reward'] == 1.0 and labeled[0]['next.success'], labeled
    assert 'labels_taken=1' in said and 'labels_refused=1' in said and 'forged=1' in said, said[-3000:]
