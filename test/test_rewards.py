"""The success classifier and the operator's labels (rl_traj_ros.rewards), ROS-free.

Frames here are drawn, not rendered: a cube (a bright square) that rises in the front view and
grows in the wrist view over successful episodes and stays down in failed ones, on a noisy
background, so the classifier's figures measure what it learned from two cameras (held-out
episodes), not a renderer."""
import numpy as np
import pytest
import torch

from rl_traj_ros.rewards import classifier as rc
from rl_traj_ros.rewards.detector import Source, SuccessDetector
from rl_traj_ros.rewards.labels import Label, frame_targets, outcome
from rl_traj_ros.rewards.train import config, metrics, split_episodes, train_classifier

SIZE, LENGTH = 48, 16
CAMERAS = ('front', 'wrist')


def _episodes(n: int, seed: int):
    """``n`` episodes of ``LENGTH`` frames, every other one a success whose cube crosses the
    lift line at a random frame (the operator's label on the step before: its result)."""
    rng = np.random.default_rng(seed)
    frames, success_at = [], []
    for e in range(n):
        at = int(rng.integers(5, LENGTH - 3)) if e % 2 == 0 else None
        x0 = int(rng.integers(6, SIZE - 18))
        for t in range(LENGTH):
            lifted = at is not None and t >= at
            img = rng.integers(0, 60, (2, SIZE, SIZE, 3), dtype=np.uint8)
            y = 8 if lifted else 32 + int(rng.integers(-2, 3))
            img[0, y:y + 8, x0:x0 + 8] = (220, 40, 40)
            s = 20 if lifted else 10
            img[1, 24 - s // 2:24 + s // 2, 24 - s // 2:24 + s // 2] = (220, 40, 40)
            frames.append(img)
        success_at.append(None if at is None else at - 1)
    views = torch.from_numpy(np.stack(frames))
    episodes = np.repeat(np.arange(n), LENGTH)
    return views, frame_targets([LENGTH] * n, success_at), episodes


def test_labels_mean_what_hil_serl_and_lerobot_record():
    assert outcome(Label.SUCCESS) == (1.0, True) and outcome(Label.FAILURE) == (0.0, True)
    assert outcome(Label.RERECORD) is None and outcome(Label.NONE) is None
    assert [Label.parse(v) for v in ('success', 'Failure', 're-record', 3, '1')] == \
        [Label.SUCCESS, Label.FAILURE, Label.RERECORD, Label.RERECORD, Label.SUCCESS]
    with pytest.raises(ValueError, match='success, failure, re-record'):
        Label.parse('maybe')
    # the images after the success step show it; an episode that ended on it: its last frame stands in
    assert frame_targets([3, 4, 2, 2], [1, None, 0, 1]).tolist() == [0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1]
    with pytest.raises(ValueError, match='frame 4 of an episode of 4'):
        frame_targets([4], [4])


def test_the_split_is_by_whole_episodes():
    episodes = np.repeat(np.arange(8), 5)
    train, test = split_episodes(episodes, 0.25, 0)
    assert not (set(episodes[train]) & set(episodes[test])) and len(set(episodes[test])) == 2
    with pytest.raises(ValueError, match='at least 2 labeled episodes'):
        split_episodes(np.zeros(5), 0.25, 0)


def test_the_classifier_learns_success_from_two_cameras_and_its_checkpoint_refuses_other_cameras(tmp_path):
    views, targets, episodes = _episodes(24, seed=1)
    model, m = train_classifier(views, targets, episodes, CAMERAS, config(train_epochs=8), log=lambda s: None)
    print({k: round(v, 3) for k, v in m.items()})
    assert m['held_out_episodes'] == 6 and m['held_out_positives'] > 0
    assert m['held_out_precision'] >= 0.9 and m['held_out_recall'] >= 0.9 and m['held_out_false_positive_rate'] <= 0.05

    path = rc.save(model, tmp_path / 'reward' / 'success_classifier.pt', m['threshold'], m)
    loaded, meta = rc.load(path)
    assert meta['cameras'] == list(CAMERAS) and meta['image_size'] == SIZE and meta['threshold'] == 0.5
    fresh_views, _, _ = _episodes(2, seed=7)
    assert torch.equal(loaded.probability(fresh_views), model.probability(fresh_views))
    loaded.check_matches(CAMERAS, SIZE)
    with pytest.raises(ValueError, match=r"cameras \['front', 'wrist'\] at 48x48; this run has cameras \['front'\] at 48x48"):
        loaded.check_matches(('front',), SIZE)
    with pytest.raises(ValueError, match='at 64x64'):
        loaded.check_matches(CAMERAS, 64)
    (tmp_path / 'other.pt').write_bytes(b'not a checkpoint')
    with pytest.raises(ValueError, match='other.pt: not a success classifier checkpoint'):
        rc.load(tmp_path / 'other.pt')
    torch.save({'format': rc.FORMAT, 'code': Label}, tmp_path / 'pickled.pt')   # a class: code, refused
    with pytest.raises(ValueError, match='pickled.pt: not a success classifier checkpoint.*weights_only'):
        rc.load(tmp_path / 'pickled.pt')
    with pytest.raises(FileNotFoundError, match='missing.pt: no such file'):
        rc.load(tmp_path / 'missing.pt')
    torch.save({'format': 'something else'}, tmp_path / 'foreign.pt')
    with pytest.raises(ValueError, match='not a success classifier checkpoint'):
        rc.load(tmp_path / 'foreign.pt')
    torch.save({'format': 'rl_traj_ros.success_classifier/1', 'model': {}}, tmp_path / 'old.pt')
    with pytest.raises(ValueError, match='old.pt: a success classifier of the old format .*retrain it with run train_reward'):
        rc.load(tmp_path / 'old.pt')


def test_a_success_needs_every_camera_to_see_it():
    """One camera's head saying success is not enough: the frame's probability is the least
    confident camera's (a wrist view fooled by a near cube is vetoed by the front view)."""
    model = rc.SuccessClassifier(CAMERAS, 32)
    frames = torch.zeros(3, 2, 32, 32, 3, dtype=torch.uint8)
    with torch.no_grad():
        model.heads[0][-1].bias.fill_(50.0)
        model.heads[1][-1].bias.fill_(-50.0)
    assert model.view_logits(frames).shape == (3, 2)
    assert (model.probability(frames) < 1e-6).all()
    with torch.no_grad():
        model.heads[1][-1].bias.fill_(50.0)
    assert (model.probability(frames) > 1 - 1e-6).all()


def test_one_class_of_frames_is_refused_naming_the_counts():
    views, targets, episodes = _episodes(4, seed=2)
    with pytest.raises(ValueError, match='0 success frames'):
        train_classifier(views, np.zeros_like(targets), episodes, CAMERAS, config(train_epochs=1), log=lambda s: None)


def test_metrics_count_what_a_reward_needs():
    m = metrics(np.array([0.9, 0.8, 0.2, 0.7, 0.1]), np.array([1, 1, 1, 0, 0]), 0.5)
    assert (m['precision'], m['recall'], m['false_positive_rate']) == (2 / 3, 2 / 3, 0.5)


def test_the_detector_holds_before_success_and_the_operator_always_wins():
    d = SuccessDetector(threshold=0.6, hold=3)
    seq = [d.step(0.0, False, p) for p in (0.9, 0.95, 0.1, 0.7, 0.8)]  # a dip resets the hold
    assert [s.terminated for s in seq] == [False] * 5 and {s.source for s in seq} == {Source.CLASSIFIER}
    done = d.step(0.0, False, 0.61)
    assert (done.reward, done.terminated, done.success, done.source) == (1.0, True, True, Source.CLASSIFIER)
    assert d.run == 0  # the next episode starts its own hold
    nan = [d.step(0.0, False, p) for p in (0.9, 0.9, float('nan'), 0.9, 0.9)]  # a NaN score breaks the hold
    assert not any(s.terminated for s in nan) and d.nonfinite == 1
    d.reset()
    # the sim's reward and termination are withheld while the classifier gives the reward
    assert d.step(1.0, True, 0.1) == d.step(1.0, True, 0.1) and not d.step(1.0, True, 0.1).terminated
    op = d.step(0.0, False, 0.99, Label.FAILURE)
    assert (op.reward, op.terminated, op.success, op.source) == (0.0, True, False, Source.OPERATOR)
    assert d.step(0.0, False, 0.0, Label.SUCCESS).reward == 1.0
    rr = d.step(1.0, True, 0.99, Label.RERECORD)
    assert rr.drop and rr.terminated and rr.source == Source.OPERATOR
    env = d.step(1.0, True)
    assert (env.reward, env.terminated, env.source, env.success) == (1.0, True, Source.ENV, True)
    with pytest.raises(ValueError, match='threshold'):
        SuccessDetector(threshold=1.0, hold=3)
    with pytest.raises(ValueError, match='hold'):
        SuccessDetector(threshold=0.5, hold=0)


def _record(root, episodes: int, seed: int, cameras=CAMERAS, size: int = SIZE) -> None:
    """A LeRobot dataset written by the package's own writer, as a run records it: every other
    episode a success, its cube lifted in its last frame (the one ``next.success`` marks)."""
    from rl_traj_ros.episodes.lerobot_writer import LeRobotWriter
    from rl_traj_ros.episodes.record import EpisodeRecord
    rng = np.random.default_rng(seed)
    w = LeRobotWriter(str(root), camera_names=list(cameras))
    for e in range(episodes):
        success, x0, obs = e % 2 == 0, int(rng.integers(4, size - 12)), []
        for t in range(LENGTH + 1):
            lifted = success and t == LENGTH - 1
            img = rng.integers(0, 60, (len(cameras), size, size, 3), dtype=np.uint8)
            y = 4 if lifted else size // 2 + int(rng.integers(-2, 3))
            img[:, y:y + 8, x0:x0 + 8] = (220, 40, 40)
            o = {'states': np.zeros(4, np.float32), 'main_images': img[0]}
            if len(cameras) > 1:
                o['extra_view_images'] = img[1:]
            obs.append(o)
        rewards = [0.0] * (LENGTH - 1) + [1.0 if success else 0.0]
        w.write(EpisodeRecord(0, e, observations=obs, actions=[np.zeros(7)] * LENGTH, rewards=rewards,
                              terminated=[False] * (LENGTH - 1) + [True], truncated=[False] * LENGTH, success=success))
    w.close()


def test_run_train_reward_trains_on_recorded_runs_and_refuses_mixed_cameras(tmp_path):
    """The command as a user runs it, on two recorded datasets: positives are the frames the
    success label marks, the figures are on held-out episodes, the checkpoint names the cameras."""
    import json
    import subprocess
    import sys
    from rosutil import ROOT
    from rl_traj_ros.episodes.lerobot_reader import labeled_episodes
    _record(tmp_path / 'run_a' / 'collected_data', 14, seed=3)
    _record(tmp_path / 'run_b' / 'collected_data', 14, seed=4)
    eps = labeled_episodes(tmp_path / 'run_a' / 'collected_data')
    assert [e.success_at for e in eps[:2]] == [LENGTH - 1, None] and eps[0].frames['observation.images.wrist'].shape == \
        (LENGTH, SIZE, SIZE, 3)
    (tmp_path / 'cfg.yaml').write_text('train_epochs: 15\n')

    def cli(*demos):
        return subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'train_reward', '--demos', *map(str, demos),
                               '--output-dir', str(tmp_path / 'out'), '--config', str(tmp_path / 'cfg.yaml')],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
    r = cli(tmp_path / 'run_a', tmp_path / 'run_b')
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    print(r.stdout.splitlines()[0], r.stdout.splitlines()[-1])
    assert '448 frames of 28 episodes (14 successful)' in r.stdout and 'held out (7 episodes' in r.stdout
    m = json.loads((tmp_path / 'out' / 'metrics.json').read_text())
    assert m['held_out_positives'] > 0 and m['held_out_precision'] >= 0.8 and m['held_out_recall'] >= 0.8
    _, meta = rc.load(tmp_path / 'out' / 'success_classifier.pt')
    assert meta['cameras'] == list(CAMERAS) and meta['image_size'] == SIZE

    _record(tmp_path / 'front_only', 2, seed=5, cameras=('front',))
    r = cli(tmp_path / 'run_a', tmp_path / 'front_only')
    assert r.returncode == 1 and "records cameras ['front'] at 48x48, an earlier dataset ['front', 'wrist']" in r.stdout, \
        r.stdout[-2000:] + r.stderr[-2000:]


# -- the labels and the classifier in a real env's steps (MuJoCo, rewards.step_reward) --------------

def _sim(tmp_path, reward, size=32):
    """Two real sim envs with cameras, their reward decided by ``reward``, recorded as LeRobot."""
    from rl_traj_ros.envs.sim_franka import SimFrankaVecEnv
    from rl_traj_ros.episodes import CollectEpisode
    env = SimFrankaVecEnv(2, image_obs=True, image_size=size, max_episode_steps=40)
    env.step_reward = reward
    return CollectEpisode(env, str(tmp_path / 'data'), num_envs=2, fps=10, finalize_interval=1)


def _labels(running=lambda: True):
    import time
    from rl_traj_ros.rewards.events import EpisodeLabels
    return EpisodeLabels(2, running, time.time_ns)


def test_operator_labels_end_sim_episodes_and_the_dataset_holds_them(tmp_path):
    """success / failure end the labeled env's episode at the next step (terminated, reward 1 / 0,
    source operator), re-record cuts and drops it; the sim's own check stays the truth
    (true_success) and the dataset records the label (next.reward, next.success, reward_source)."""
    import time
    from rl_traj_ros.episodes.lerobot_reader import labeled_episodes
    from rl_traj_ros.rewards.step_reward import StepReward
    labels = _labels()
    reward = StepReward('env', 2, labels)
    env = _sim(tmp_path, reward)
    env.reset(seed=0)
    zero = np.zeros((2, 7), np.float32)
    for _ in range(3):
        _, r, te, tr, info = env.step(zero)
        assert not (te.any() or tr.any()) and (info['reward_source'] == int(Source.ENV)).all()
    stamp = time.time_ns()
    assert labels.offer('success', 0, stamp, 'spacemouse') is None
    assert labels.offer(Label.RERECORD, 1, stamp, 'pedal') is None
    _, r, te, tr, info = env.step(zero)
    assert te.tolist() == [True, False] and tr.tolist() == [False, True] and r.tolist() == [1.0, 0.0]
    assert info['success'].tolist() == [True, False] and info['true_success'].tolist() == [False, False]
    assert info['reward_source'].tolist() == [int(Source.OPERATOR)] * 2 and info['rerecord'].tolist() == [False, True]
    for _ in range(2):
        env.step(zero)
    assert labels.offer('failure', -1, time.time_ns(), 'spacemouse') is None
    _, r, te, tr, info = env.step(zero)
    assert te.tolist() == [True, True] and r.tolist() == [0.0, 0.0] and info['success'].tolist() == [False, False]

    # refused, each with its reason, none of them reaching a step
    now = time.time_ns()
    assert 'envs 0..1 (or -1 for all), not 5' in labels.offer('success', 5, now, 'spacemouse')
    assert 'a replay' in labels.offer('success', 0, stamp, 'spacemouse')
    assert 'more than 60 s' in labels.offer('success', 0, now - 120 * 10**9, 'other')
    assert 'success, failure, re-record' in labels.offer('maybe', 0, now, 'other')
    assert labels.offer('failure', 0, now, 'key') is None
    assert 'still waiting for its step' in labels.offer('success', 0, now + 1, 'pedal')
    stopped = _labels(running=lambda: False)
    assert 'no episode is running' in stopped.offer('success', 0, now, 'spacemouse')
    assert labels.counters == {'labels_taken': 4, 'labels_refused': 5}
    _, r, te, _, _ = env.step(zero)
    assert te.tolist() == [True, False]
    assert reward.stats()['episodes_rerecorded'] == 1 and reward.stats()['operator_labels'] == 5
    env.close()
    assert env.episodes_rerecorded == 1
    eps = labeled_episodes(tmp_path / 'data')
    # in the order they ended: env 0 success at its 4th step, env 0 and env 1 (its re-recorded
    # episode dropped) failure at their 3rd, env 0 failure at its 1st
    assert [(e.length, e.success_at) for e in eps] == [(4, 3), (3, None), (3, None), (1, None)]
    import pyarrow.parquet as pq
    rows = pq.read_table(next((tmp_path / 'data').rglob('data/*/*.parquet'))).to_pylist()
    first = [r for r in rows if r['episode_index'] == 0]
    assert [r['next.reward'] for r in first] == [0.0, 0.0, 0.0, 1.0] and first[-1]['next.success'] is True
    assert [r['complementary_info.reward_source'] for r in first] == [0.0, 0.0, 0.0, 2.0]


def test_steps_after_success_record_frames_that_show_it_and_the_classifier_learns_from_those(tmp_path):
    """steps_after_success 3 (LeRobot's number_of_steps_after_success): a success label does not
    end the episode; three more steps follow, each a success with reward 1 from the same source,
    the last terminated; a failure label in them drops the episode, a success label ends it there.
    The dataset holds them, and train_reward's targets are the frames after the success step."""
    import time
    from rl_traj_ros.episodes.lerobot_reader import labeled_episodes
    from rl_traj_ros.rewards.step_reward import StepReward
    with pytest.raises(ValueError, match='steps_after_success must be 0 or more, got -1'):
        StepReward('env', 2, None, steps_after_success=-1)
    labels = _labels()
    reward = StepReward('env', 2, labels, steps_after_success=3)
    env = _sim(tmp_path, reward)
    env.reset(seed=0)
    zero = np.zeros((2, 7), np.float32)

    def step(*offers):
        for label, i in offers:
            assert labels.offer(label, i, time.time_ns(), 'spacemouse') is None
        _, r, te, tr, info = env.step(zero)
        return r.tolist(), te.tolist(), tr.tolist(), info['success'].tolist(), info['rerecord'].tolist()
    for _ in range(2):
        assert step() == ([0.0, 0.0], [False, False], [False, False], [False, False], [False, False])
    assert step(('success', -1)) == ([1.0, 1.0], [False, False], [False, False], [True, True], [False, False])
    assert step() == ([1.0, 1.0], [False, False], [False, False], [True, True], [False, False])
    # env 1: the operator takes the success back (failure): its episode, recorded as a success, is dropped
    assert step(('failure', 1)) == ([1.0, 0.0], [False, False], [False, True], [True, False], [False, True])
    assert step() == ([1.0, 0.0], [True, False], [False, False], [True, False], [False, False])   # env 0: 3rd, last
    assert step(('success', 1)) == ([0.0, 1.0], [False, False], [False, False], [False, True], [False, False])
    assert step(('success', 1)) == ([0.0, 1.0], [False, True], [False, False], [False, True], [False, False])
    stats = reward.stats()
    assert stats['steps_after_success'] == 5 and stats['episodes_rerecorded'] == 1 and stats['reward_operator'] == 9
    env.close()
    eps = labeled_episodes(tmp_path / 'data')
    assert [(e.length, e.success_at) for e in eps] == [(6, 2), (3, 1)]
    assert frame_targets([e.length for e in eps], [e.success_at for e in eps]).tolist() == \
        [0, 0, 0, 1, 1, 1, 0, 0, 1]


def test_the_classifier_gives_the_reward_after_its_hold_and_the_sims_success_only_scores(tmp_path):
    """reward_source classifier on real camera frames: success after ``hold`` frames over the
    threshold (terminated, reward 1, source classifier), the sim's truth in true_success only; a
    NaN score is counted, never a success; the operator's label wins; a checkpoint of other cameras
    is refused naming both."""
    import time
    from rl_traj_ros.rewards.step_reward import StepReward
    model = rc.SuccessClassifier(CAMERAS, 32)
    with pytest.raises(ValueError, match=r"trained on cameras \['front', 'wrist'\] at 32x32; this run has cameras "
                                         r"\['front'\] at 32x32"):
        StepReward('classifier', 2, None, model, 0.5, 2, ('front',), 32)
    with pytest.raises(ValueError, match="needs reward_classifier"):
        StepReward('classifier', 2, None, None, 0.5, 2, CAMERAS, 32)
    with pytest.raises(ValueError, match="reward_source must be one of env, classifier, operator"):
        StepReward('sim', 2)
    with torch.no_grad():   # every frame scores 1.0: what a classifier that learned to be fooled says
        [h[-1].bias.fill_(50.0) for h in model.heads]
    labels = _labels()
    reward = StepReward('classifier', 2, labels, model, 0.5, 3, CAMERAS, 32)
    env = _sim(tmp_path, reward)
    env.reset(seed=0)
    zero = np.zeros((2, 7), np.float32)
    seen = []
    for _ in range(3):
        _, r, te, tr, info = env.step(zero)
        seen.append((r.tolist(), te.tolist(), info['reward_source'].tolist()))
    assert seen[:2] == [([0.0, 0.0], [False, False], [1, 1])] * 2 and seen[2] == ([1.0, 1.0], [True, True], [1, 1])
    assert info['success'].tolist() == [True, True] and info['true_success'].tolist() == [False, False]
    assert reward.stats()['classifier_successes'] == 2
    assert labels.offer('failure', 1, time.time_ns(), 'key') is None
    _, r, te, tr, info = env.step(zero)   # env 1: the operator wins over the classifier's score
    assert info['reward_source'].tolist() == [1, 2] and te.tolist() == [False, True] and r.tolist() == [0.0, 0.0]
    with torch.no_grad():
        [h[-1].bias.fill_(float('nan')) for h in model.heads]
    for _ in range(4):
        _, r, te, tr, info = env.step(zero)
        assert not te.any() and (r == 0).all()
    assert reward.stats()['classifier_nonfinite'] == 8
    env.close()


def test_with_the_reward_withheld_the_sims_success_goes_on_and_its_other_ends_cut(tmp_path):
    """A real cell has no success check of its own, so with the env's reward withheld (operator,
    classifier) the sim's success neither rewards nor ends the episode: it goes on (the classifier
    then sees the frames it learned a success from: the cube held up), true_success says what the
    sim saw. The cube knocked out of the workspace cuts the episode (truncated, never terminated).
    With the env's reward the same success terminates with reward 1. The sim is real: the arm
    driven up, the cube put between its fingers without gravity (gym-hil's check: lifted 10 cm,
    within 5 cm of the pinch point)."""
    from rl_traj_ros.envs.sim_franka import SimFrankaVecEnv
    from rl_traj_ros.rewards.step_reward import StepReward
    seen = {}
    for source in ('env', 'operator'):
        env = SimFrankaVecEnv(2, image_obs=False, max_episode_steps=40)
        env.step_reward = StepReward(source, 2)
        env.reset(seed=0)
        up = np.zeros((2, 7), np.float32)
        up[:, 2] = 1.0
        for _ in range(8):
            env.step(up)
        sim = env.envs[0].unwrapped
        sim._model.opt.gravity[:] = 0
        sim._data.jnt('block').qpos[:3] = sim._data.sensor('2f85/pinch_pos').data
        sim._data.jnt('block').qvel[:] = 0
        steps = []
        for _ in range(3):
            _, r, te, tr, info = env.step(np.zeros((2, 7), np.float32))
            steps.append((float(r[0]), bool(te[0]), bool(tr[0]), bool(info['true_success'][0])))
            if te[0]:
                break
        sim._data.jnt('block').qpos[:3] = (3.0, 3.0, 0.02)   # knocked far out of the workspace
        _, r, te, tr, info = env.step(np.zeros((2, 7), np.float32))
        steps.append((float(r[0]), bool(te[0]), bool(tr[0]), bool(info['true_success'][0])))
        env.close()
        seen[source] = steps
    assert seen['env'][0] == (1.0, True, False, True) and seen['env'][1] == (0.0, True, False, False)
    assert seen['operator'] == [(0.0, False, False, True)] * 3 + [(0.0, False, True, False)]


def test_held_out_evaluation_ends_episodes_as_the_run_does_and_keeps_the_learned_rewards_verdict():
    """``rollout.evaluate`` with the env node's own step reward (``assembly.build.step_reward``):
    with the env's reward the expert's episodes end at the sim's success, which also decides them
    (judged); with it withheld and no label given, the same episodes go on past the success to the
    time limit, still scored by the sim's check at any step, and none is judged: every success is
    one the learned reward missed (what bench_rlpd counts per snapshot). The sim is real."""
    from rl_traj_ros.assembly.build import step_reward
    from rl_traj_ros.params.env_node import ENV_NODE
    from rl_traj_ros.params.spec import resolve
    from rl_traj_ros.policies.scripted import PickCubeExpert
    from rl_traj_ros.rollout.evaluate import evaluate
    expert = PickCubeExpert()

    def act(obs):
        return np.stack([expert.act_chunk(s, 2).reshape(-1) for s in obs['states']])
    got = {}
    for source in ('env', 'operator'):
        p = resolve(ENV_NODE, {'num_envs': 1, 'max_episode_steps': 60, 'reward_source': source})  # ids in order
        got[source] = evaluate(act, p, 3, 2, step_reward=step_reward(p, p['camera_names']))['per_episode']
    env, withheld = got['env'], got['operator']
    assert sum(e['success'] for e in env) >= 2, env
    assert all(e['judged'] == e['success'] for e in env), env
    assert all(e['length'] < 60 for e in env if e['success']), env
    by_id = {e['state_id']: e for e in env}
    assert sorted(by_id) == sorted(e['state_id'] for e in withheld), (env, withheld)
    assert all(e['success'] == by_id[e['state_id']]['success'] for e in withheld), (env, withheld)
    assert not any(e['judged'] for e in withheld) and all(e['return'] == 0 for e in withheld), withheld
    assert all(e['length'] > by_id[e['state_id']]['length'] for e in withheld if e['success']), (env, withheld)


def test_sim_collect_in_process_holds_each_expert_success_in_view(tmp_path):
    """``run sim_collect --in-process`` builds the env node's own env (``assembly.make_env``): its
    steps_after_success reaches it, as through the node. The expert's 2 episodes each end 4 steps
    after their success step, every one of those recorded a success; the reader finds the success
    step, and the classifier's positives are the 4 frames after it, images of the cube lifted."""
    import subprocess
    import sys
    import yaml
    from rosutil import ROOT
    from rl_traj_ros.episodes.lerobot_reader import labeled_episodes
    cfg = yaml.safe_load((ROOT / 'config' / 'sim_demos_pixels.yaml').read_text())
    cfg['/**/franka_env_node']['ros__parameters'].update({'collect_episodes': True, 'steps_after_success': 4})
    (tmp_path / 'demos.yaml').write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--config', str(tmp_path / 'demos.yaml'),
                        '--episodes', '2', '--in-process', '--output-dir', str(tmp_path / 'out'), '--quiet'],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    eps = labeled_episodes(next((tmp_path / 'out' / 'collected_data').rglob('meta')).parent)
    assert len(eps) >= 2 and all(e.success_at == e.length - 5 for e in eps), [(e.length, e.success_at) for e in eps]
    import pyarrow.parquet as pq
    rows = [r for f in (tmp_path / 'out' / 'collected_data').rglob('data/*/*.parquet') for r in pq.read_table(f).to_pylist()]
    first = sorted((r for r in rows if r['episode_index'] == 0), key=lambda r: r['frame_index'])
    assert [r['next.reward'] for r in first[-6:]] == [0.0] + [1.0] * 5
    assert [r['next.success'] for r in first[-6:]] == [False] + [True] * 5 and first[-1]['next.done']


def test_a_scripted_operator_labels_the_sims_successes_through_the_operators_path(tmp_path):
    """``reward_source: operator`` in the sim with ``sim_operator_delay`` 2: the sim's own check is
    only watched; a scripted operator offers a success label 2 steps after it passes, the label
    path takes it at the next step (reward 1, terminated, source operator), as a person's chord
    would. Every step of the dataset is scored by the operator; a real cell refuses the parameter."""
    import subprocess
    import sys
    import yaml
    import pyarrow.parquet as pq
    from rosutil import ROOT
    from rl_traj_ros.assembly.build import step_reward
    from rl_traj_ros.params.env_node import ENV_NODE
    from rl_traj_ros.params.spec import resolve
    cfg = yaml.safe_load((ROOT / 'config' / 'sim_demos.yaml').read_text())
    cfg['/**/franka_env_node']['ros__parameters'].update({'collect_episodes': True, 'reward_source': 'operator',
                                                          'sim_operator_delay': 2})
    (tmp_path / 'demos.yaml').write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--config', str(tmp_path / 'demos.yaml'),
                        '--episodes', '2', '--in-process', '--output-dir', str(tmp_path / 'out')],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [r for f in (tmp_path / 'out' / 'collected_data').rglob('data/*/*.parquet') for r in pq.read_table(f).to_pylist()]
    episodes = sorted({r['episode_index'] for r in rows})
    assert len(episodes) >= 2
    for e in episodes:
        ep = sorted((r for r in rows if r['episode_index'] == e), key=lambda r: r['frame_index'])
        assert [r['next.reward'] for r in ep] == [0.0] * (len(ep) - 1) + [1.0] and ep[-1]['next.done']
        assert {r['complementary_info.reward_source'] for r in ep} == {float(Source.OPERATOR)}
        # the cube's height (the states' last): 10 cm up (the sim's check) in exactly the last 3 frames, the
        # images before the step of the check + 1, + 2 (the operator's delay) and + 3 (its label's step)
        z0 = ep[0]['observation.state'][-1]
        assert [r['observation.state'][-1] > z0 + 0.1 for r in ep] == [False] * (len(ep) - 3) + [True] * 3
    with pytest.raises(ValueError, match="sim_operator_delay is the sim's scripted operator"):
        step_reward(resolve(ENV_NODE, {'env_type': 'franky', 'reward_source': 'operator', 'sim_operator_delay': 0}),
                    [])
