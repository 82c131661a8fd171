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
    lift line at a random frame (the operator's label there)."""
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
        success_at.append(at)
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
    assert frame_targets([3, 4, 2], [1, None, 0]).tolist() == [0, 1, 1, 0, 0, 0, 0, 1, 1]
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
    with pytest.raises(Exception):
        rc.load(tmp_path / 'other.pt')
    torch.save({'format': 'something else'}, tmp_path / 'foreign.pt')
    with pytest.raises(ValueError, match='not a success classifier checkpoint'):
        rc.load(tmp_path / 'foreign.pt')


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
