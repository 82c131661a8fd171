"""The frozen keypoint encoder for RLPD from pixels: what it computes, that its self-supervised
pretraining makes it follow what moves, that the learner pretrains it once and trains on cached
features, and that a learned-from-pixels snapshot acts identically wherever it is loaded."""
import pytest
import torch

from rl_traj_ros.data.identity import TrajectoryId
from rl_traj_ros.data.trajectory import Trajectory
from rl_traj_ros.learning.encoder_pretrain import pretrain_keypoints
from rl_traj_ros.learning.rlpd import RLPDConfig, RLPDUpdater
from rl_traj_ros.learning.rlpd_learner import RLPDLearner, RLPDLearnerConfig
from rl_traj_ros.policies.keypoints import KeypointEncoder, SpatialSoftmax, camera_views
from rl_traj_ros.policies.sac import CriticEnsemble, SquashedGaussianActor
from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer

H = 32


def test_spatial_softmax_finds_the_peak():
    maps = torch.full((2, 1, 9, 9), -50.0)
    maps[0, 0, 2, 6] = 50.0    # row 2 (y), column 6 (x)
    maps[1, 0, 8, 0] = 50.0
    xy = SpatialSoftmax(1)(maps)
    grid = torch.linspace(-1, 1, 9)
    assert torch.allclose(xy, torch.tensor([[grid[6], grid[2]], [grid[0], grid[8]]]), atol=1e-4)


def scenes(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[n, 2, H, H, 3] two cameras of a grey table with a pink square at a random place (both
    views show it, the second mirrored), and the square's (row, col)."""
    g = torch.Generator().manual_seed(seed)
    pos = torch.randint(2, H - 6, (n, 2), generator=g)
    img = torch.full((n, H, H, 3), 60, dtype=torch.uint8)
    for i, (r, c) in enumerate(pos.tolist()):
        img[i, r:r + 4, c:c + 4] = torch.tensor([240, 120, 220], dtype=torch.uint8)
    return torch.stack([img, img.flip(2)], 1), pos.to(torch.float32)


def probe_error(features: torch.Tensor, pos: torch.Tensor, n_fit: int) -> float:
    """Mean pixel error of a ridge regression from features to the square's position, on the
    frames it was not fitted on."""
    x = torch.cat([features, torch.ones(len(features), 1)], 1).double()
    a, b = x[:n_fit], pos[:n_fit].double()
    w = torch.linalg.solve(a.T @ a + 1e-3 * torch.eye(x.shape[1], dtype=x.dtype), a.T @ b)
    return float((x[n_fit:] @ w - pos[n_fit:].double()).abs().mean())


def test_pretraining_makes_the_keypoints_follow_what_moves_then_freezes():
    torch.manual_seed(0)
    views, pos = scenes(300, 0)
    enc = KeypointEncoder(cameras=2)
    before = probe_error(enc.encode(views), pos, 200)
    result = pretrain_keypoints(enc, views[:200], epochs=8, seed=0)
    after = probe_error(enc.encode(views), pos, 200)   # on 100 frames it never saw
    baseline = float((pos[200:] - pos[:200].mean(0)).abs().mean())
    assert result.last_loss < 0.5 * result.first_loss, result
    assert after < 0.5 * before and after < 0.25 * baseline, (before, after, baseline)
    assert bool(enc.frozen) and not any(p.requires_grad for p in enc.parameters())
    assert enc.encode(views[:3]).shape == (3, enc.out_features) == (3, 2 * 2 * 16)
    with pytest.raises(ValueError, match='built for 2 cameras'):
        enc(views[:, :1])


def trajectory(step: int, seed: int, t: int = 3, b: int = 2, c: int = 2, a: int = 7) -> Trajectory:
    g = torch.Generator().manual_seed(seed)
    views, _ = scenes(2 * t * b, seed)
    obs = lambda v: {'states': torch.randn(t, b, 18, generator=g),  # noqa: E731
                     'main_images': v[:, 0].reshape(t, b, H, H, 3),
                     'extra_view_images': v[:, 1:].reshape(t, b, 1, H, H, 3)}
    done = torch.zeros(t + 1, b, c, dtype=torch.bool)   # [T + E, B, C], one epoch
    return Trajectory(
        actions=torch.rand(t, b, c * a, generator=g) * 0.05, rewards=torch.zeros(t, b, c), dones=done,
        terminations=done.clone(), truncations=done.clone(), prev_values=torch.zeros(t + 1, b, 1),
        intervene_flags=torch.zeros(t, b, c * a, dtype=torch.bool), prev_logprobs=torch.zeros(t, b, c * a),
        curr_obs=obs(views[:t * b]), next_obs=obs(views[t * b:]), versions=torch.zeros(t, b, dtype=torch.int64),
        identity=TrajectoryId(run_id='r', mode='rollout', step_id=step, env_rank=0))


def learner(demos: TrajectoryReplayBuffer) -> RLPDLearner:
    actor = SquashedGaussianActor(18, 7, 2, 32, [0.05] * 7, use_images=True, image_encoder='keypoints', cameras=2)
    critics = CriticEnsemble(18, 7, 2, 4, 32, use_images=True, image_encoder='keypoints', cameras=2)
    assert critics.encoder is None   # one encoder, the actor's: the critics read its cached features
    upd = RLPDUpdater(actor, critics, RLPDConfig(batch_size=8, num_critics=4))
    return RLPDLearner(upd, RLPDLearnerConfig(min_online_steps=12, publish_every=2, encoder_pretrain_epochs=3,
                                              run_id='r'), demos)


def demos_buffer() -> TrajectoryReplayBuffer:
    from rl_traj_ros.storage.layout import flatten_trajectory
    buf = TrajectoryReplayBuffer(seed=1, cache_size=0, sample_window_size=0)
    flat, shape, _ = flatten_trajectory(trajectory(100, 7))
    buf.add_trajectories([{k: v.reshape(*shape, *v.shape[1:]) for k, v in flat.items()}])
    return buf


def test_the_learner_pretrains_once_then_trains_on_cached_features():
    lrn = learner(demos_buffer())
    lrn.offer(trajectory(0, 1))     # 12 control steps: the first gradient step is due
    assert lrn.online.total_samples == 0 and len(lrn._early) == 1   # held until the encoder is pretrained
    update = lrn.train(4)
    assert lrn.pretrained is not None and lrn.pretrained.frames == 2 * 3 * 2   # demos' + rollout's frames
    assert bool(lrn.keypoints.frozen) and not lrn._early
    rows = lrn.mixer.sample(8)
    assert rows['curr_obs/image_features'].shape == (8, 64) and 'curr_obs/main_images' not in rows
    assert update is not None and update.metrics['encoder_pretrain_frames'] == 12
    weights_before = {k: v.clone() for k, v in lrn.keypoints.state_dict().items()}
    lrn.offer(trajectory(1, 2))     # encoded as it arrives
    lrn.train(8)
    assert lrn.online.total_samples == 12
    assert all(torch.equal(weights_before[k], v) for k, v in lrn.keypoints.state_dict().items())   # frozen


def test_a_learned_from_pixels_snapshot_acts_identically_in_a_fresh_actor(tmp_path):
    """Weights + frozen encoder + state normalization travel in the actor's state dict: a fresh
    actor of the same configuration, loaded from the published weights file, gives the same
    (deterministic) actions as the learner's actor and the same features as the learner cached."""
    lrn = learner(demos_buffer())
    lrn.offer(trajectory(0, 1))
    update = lrn.train(4)
    torch.save(update.state_dict, tmp_path / 'policy_v1.pt')
    fresh = SquashedGaussianActor(18, 7, 2, 32, [0.05] * 7, use_images=True, image_encoder='keypoints', cameras=2)
    fresh.load_weights(str(tmp_path / 'policy_v1.pt'))
    t = trajectory(5, 9)
    obs = {'states': t.curr_obs['states'][0], 'main_images': t.curr_obs['main_images'][0],
           'extra_view_images': t.curr_obs['extra_view_images'][0]}
    mine, _ = lrn.updater.actor.sample(obs, deterministic=True)
    theirs, _ = fresh.sample(obs, deterministic=True)
    assert torch.equal(mine, theirs)
    assert not torch.equal(fresh.norm.mean, torch.zeros(18))   # the demos' statistics came with it
    cached = lrn._encoded({'curr_obs/main_images': obs['main_images'],
                           'curr_obs/extra_view_images': obs['extra_view_images']})['curr_obs/image_features']
    assert torch.equal(cached, fresh.encoder.encode(camera_views(obs)))
    assert torch.equal(theirs, fresh.sample({**obs, 'image_features': cached}, deterministic=True)[0])


def test_a_learned_from_pixels_snapshot_acts_identically_in_a_fresh_policy_node(rclpy_context, tmp_path):
    """The snapshot file a learner published, loaded by a fresh policy node process (``weights``):
    over DDS it answers a camera observation with exactly the chunk the learner's own actor gives
    through the same worker (same per-key sampling)."""
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    import rl_traj_ros.msg as M
    from rl_traj_ros.data.schema import PolicyInput, TrajectoryKey, TrajectorySource
    from rl_traj_ros.ros import conversion as cv
    from rl_traj_ros.ros.qos import DATA_QOS
    from rl_traj_ros.rollout.workers import PolicyWorker

    from rosutil import ros_process, spin_until, wait_matched
    lrn = learner(demos_buffer())
    lrn.offer(trajectory(0, 1))
    torch.save(lrn.train(4).state_dict, tmp_path / 'policy_v1.pt')
    prefix = '/keypoints_test'
    t = trajectory(5, 9)
    obs = {'states': t.curr_obs['states'][0], 'main_images': t.curr_obs['main_images'][0],
           'extra_view_images': t.curr_obs['extra_view_images'][0]}
    request = PolicyInput([TrajectorySource(TrajectoryKey(0, 0, 0, 0, 0), 2)], obs)
    want = PolicyWorker(lrn.updater.actor.eval()).infer(request)[0].actions
    node = Node('keypoints_env_standin', context=rclpy_context)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(node)
    got = []
    node.create_subscription(M.ActionChunk, f'{prefix}/action_chunk', got.append, DATA_QOS)
    pub = node.create_publisher(M.PolicyInput, f'{prefix}/policy_input', DATA_QOS)
    args = ['-m', 'rl_traj_ros.nodes.policy_node', '--ros-args', '-p', f'topic_prefix:={prefix}', '-p', 'policy:=sac',
            '-p', 'state_dim:=18', '-p', 'action_dim:=7', '-p', 'chunk:=2', '-p', 'hidden:=32', '-p', 'use_images:=true',
            '-p', 'image_encoder:=keypoints', '-p', 'camera_names:=[front, wrist]', '-p', f'image_size:={H}',
            '-p', 'sac_action_scale:=[0.05]', '-p', f'weights:={tmp_path / "policy_v1.pt"}']
    try:
        with ros_process(args):
            assert wait_matched(ex, [pub])
            pub.publish(cv.policy_input_to_msg(request))
            assert spin_until(ex, lambda: got, 30), 'no answer from the policy node'
    finally:
        ex.shutdown()
        node.destroy_node()
    assert torch.equal(cv.action_chunk_from_msg(got[0]).actions, want)
