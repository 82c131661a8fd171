"""The learner's data path and PPO update (core/ppo.py) against hand-worked vectors, a
learning check on a contextual bandit, and two torch.distributed ranks staying identical."""
import math

import pytest
import torch

from rl_traj_ros.learning.ppo import (PPOConfig, PPOUpdater, all_reduce_gradients, compute_response_mask,
                                  flatten_trajectories, policy_loss, reinforce_pp_advantages, training_batch,
                                  value_loss)
from rl_traj_ros.data.trajectory import Trajectory
from rl_traj_ros.policies.actor_critic import ActorCritic

from rosutil import free_udp_port


def test_flatten_trajectories_reshapes_b_s_and_repeats_1d_per_step():
    x = torch.arange(12.).reshape(2, 3, 2)
    out = flatten_trajectories({'x': x, 'uid': torch.tensor([10, 20]), 'other': torch.arange(5)}, 2, 3)
    assert out['x'].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    assert out['uid'].tolist() == [10, 10, 10, 20, 20, 20]
    assert out['other'].tolist() == [0, 1, 2, 3, 4]


def test_response_mask_ends_at_the_first_completed_slot_and_spans_the_action_dim():
    complete = torch.tensor([[[False, True], [False, False]],     # completes at slot 1 of step 0
                             [[False, False], [False, False]]])   # never: every slot counts
    m = compute_response_mask(complete, action_dim=3)
    assert m.shape == (2, 2, 6)
    assert m[0].tolist() == [[True] * 6, [False] * 6]
    assert m[1].all()
    later = torch.zeros(1, 3, 2, dtype=torch.bool)
    later[0, 1, 1] = True  # step 1, slot 1: slots 0..3 count
    assert compute_response_mask(later, 1)[0].tolist() == [[True, True], [True, True], [False, False]]


def test_reinforce_pp_returns_restart_after_a_done_and_are_whitened():
    rewards = torch.tensor([1., 0., 2.]).reshape(3, 1, 1)
    dones = torch.tensor([0., 0., 1., 0.]).reshape(4, 1, 1)  # index 0: before the epoch; chunk 1 ends an episode
    adv, ret = reinforce_pp_advantages(rewards, dones, 1, gamma=0.9)
    assert ret[:, 0, 0].tolist() == pytest.approx([1.0, 0.0, 2.0])  # G1 = 0 + 0.9 * 0 (done) * G2
    sd = math.sqrt(2 / 3 + 1e-5)
    assert adv[:, 0, 0].tolist() == pytest.approx([0.0, -1 / sd, 1 / sd], rel=1e-5)
    adv2, ret2 = reinforce_pp_advantages(rewards, torch.zeros(4, 1, 1), 1, gamma=0.9)
    assert ret2[:, 0, 0].tolist() == pytest.approx([1 + 0.9 * 1.8, 1.8, 2.0])


def test_clipped_surrogate_and_value_loss_by_hand():
    old = torch.zeros(1, 2)
    new = torch.log(torch.tensor([[1.5, 0.5]]))
    mask = torch.ones(1, 2, dtype=torch.bool)
    loss, st = policy_loss(new, old, torch.tensor([1.0]), mask, 0.2)
    assert float(loss) == pytest.approx((-1.2 - 0.5) / 2)          # max(-A r, -A clip(r)) per entry
    assert float(st['clip_fraction']) == 1.0
    assert float(st['approx_kl']) == pytest.approx(((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5))) / 2)
    loss, _ = policy_loss(new, old, torch.tensor([-1.0]), mask, 0.2)
    assert float(loss) == pytest.approx((1.5 + 0.8) / 2)
    loss, _ = policy_loss(new, old, torch.tensor([1.0]), torch.tensor([[True, False]]), 0.2)
    assert float(loss) == pytest.approx(-1.2)                        # masked entries do not count
    vl = value_loss(torch.tensor([2.0]), torch.tensor([1.0]), torch.tensor([3.0]), torch.tensor([True]), 0.2)
    assert float(vl) == pytest.approx(0.5 * (1.2 - 3.0) ** 2)        # the clipped value is further off
    assert float(value_loss(torch.tensor([2.0]), torch.tensor([1.0]), torch.tensor([3.0]), torch.tensor([True]),
                            0.0)) == pytest.approx(0.5)


def _trajectory(t=4, b=2, c=2, a=3, dones=None):
    g = torch.Generator().manual_seed(0)
    d = torch.zeros(t + 1, b, c, dtype=torch.bool) if dones is None else dones
    return Trajectory(actions=torch.randn(t, b, c * a, generator=g), rewards=torch.rand(t, b, c, generator=g),
                      prev_logprobs=torch.randn(t, b, c * a, generator=g), versions=torch.full((t, b, 1), 3),
                      intervene_flags=torch.zeros(t, b, c * a, dtype=torch.bool), dones=d, terminations=d,
                      truncations=torch.zeros_like(d), prev_values=torch.randn(t + 1, b, 1, generator=g),
                      curr_obs={'states': torch.randn(t, b, 5, generator=g)})


def test_training_batch_is_env_major_and_masks_after_the_first_done_without_auto_reset():
    d = torch.zeros(5, 2, 2, dtype=torch.bool)
    d[2, 1, 0] = True  # env 1 finishes in chunk 1, slot 0
    traj = _trajectory(dones=d)
    batch = training_batch(traj, action_dim=3, advantage='gae', auto_reset=False)
    assert batch['actions'].shape == (8, 6) and batch['obs']['states'].shape == (8, 5)
    assert torch.equal(batch['actions'][1], traj.actions[1, 0])       # row = env * T + t
    assert torch.equal(batch['obs']['states'][4], traj.curr_obs['states'][0, 1])
    assert batch['versions'].tolist() == [3] * 8
    m = batch['response_mask'].reshape(2, 4, 6)
    assert m[0].all() and m[1, :1].all() and m[1, 1, :3].all() and not m[1, 1, 3:].any() and not m[1, 2:].any()
    assert training_batch(traj, 3)['response_mask'].all()              # auto-reset: every slot is a step


def test_ppo_learns_a_contextual_bandit():
    """One-chunk episodes, reward -(a - 0.5 s0)^2: PPO from the package's actor-critic must
    move the mean reward up a lot within a few updates."""
    torch.manual_seed(0)
    model = ActorCritic(state_dim=4, action_dim=1, chunk=1, hidden=32, init_log_std=-0.5, seed=0)
    upd = PPOUpdater(model.parameters(), model.evaluate, PPOConfig(epochs=4, minibatch_size=64, lr=3e-3,
                                                                   target_kl=0.05), seed=0)
    g = torch.Generator().manual_seed(1)
    rewards = []
    for _ in range(25):
        obs = {'states': torch.randn(256, 4, generator=g)}
        actions, logp, values = model.act(obs, generator=g)
        r = -(actions[:, 0] - 0.5 * obs['states'][:, 0]) ** 2
        rewards.append(float(r.mean()))
        batch = {'obs': obs, 'actions': actions, 'old_logprobs': logp, 'old_values': values[:, 0],
                 'advantages': r - values[:, 0], 'returns': r, 'response_mask': torch.ones(256, 1, dtype=torch.bool)}
        metrics = upd.update(batch)
    print(f'mean reward per update: {[round(x, 3) for x in rewards]}')
    assert rewards[-1] > 0.25 * rewards[0], rewards  # the squared error falls to under a quarter
    assert {'policy_loss', 'value_loss', 'entropy', 'approx_kl', 'clip_fraction', 'explained_variance',
            'samples_per_s'} <= set(metrics)


def _rank(rank, world, port, out):
    import torch.distributed as dist
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=world)
    model = ActorCritic(state_dim=4, action_dim=2, chunk=1, hidden=16, seed=0)  # same initial weights
    upd = PPOUpdater(model.parameters(), model.evaluate, PPOConfig(epochs=2, minibatch_size=32),
                     all_reduce=all_reduce_gradients, seed=0)
    g = torch.Generator().manual_seed(100 + rank)  # each rank gets its own rows
    for _ in range(3):
        obs = {'states': torch.randn(64, 4, generator=g)}
        actions, logp, values = model.act(obs, generator=g)
        r = -actions.pow(2).sum(1)
        upd.update({'obs': obs, 'actions': actions, 'old_logprobs': logp, 'old_values': values[:, 0],
                    'advantages': r, 'returns': r, 'response_mask': torch.ones(64, 2, dtype=torch.bool)})
    torch.save(model.state_dict(), f'{out}/rank{rank}.pt')
    dist.destroy_process_group()


def test_two_learner_ranks_end_every_update_with_identical_weights(tmp_path):
    import torch.multiprocessing as mp
    port = free_udp_port('tcp')
    mp.spawn(_rank, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    a, b = (torch.load(tmp_path / f'rank{r}.pt', weights_only=True) for r in (0, 1))
    assert all(torch.equal(a[k], b[k]) for k in a)
    init = ActorCritic(state_dim=4, action_dim=2, chunk=1, hidden=16, seed=0).state_dict()
    assert not all(torch.equal(a[k], init[k]) for k in a)  # and they did learn something


def test_new_weights_apply_from_the_next_step_with_their_version_stamped():
    from rl_traj_ros.data.schema import PolicyInput, TrajectoryKey, TrajectorySource
    from rl_traj_ros.rollout.workers import PolicyWorker

    def req(step, chunk, env_rank=0):
        key = TrajectoryKey(step, 0, env_rank, 0, chunk)
        return PolicyInput([TrajectorySource(key, 2)], {'states': torch.ones(2, 4) * (chunk + 1)})

    def fresh(state_dict=None):
        m = ActorCritic(4, 2, 3, hidden=16, seed=0)
        if state_dict is not None:
            m.load_state_dict(state_dict)
        return PolicyWorker(m.eval())
    w = fresh()
    assert w.infer(req(0, 0))[0].model_version == 0
    new = {k: v + 0.3 for k, v in w.model.state_dict().items()}
    assert w.set_weights(new, 1) == 1  # the next step is the first with the new weights
    chunk, part = w.infer(req(0, 1))  # still step 0: the old weights, version 0
    assert chunk.model_version == 0 and torch.equal(chunk.actions, fresh().infer(req(0, 1))[0].actions)
    chunk, part = w.infer(req(1, 0))
    assert chunk.model_version == 1 and part.output.versions.unique().tolist() == [1]
    assert torch.equal(chunk.actions, fresh(new).infer(req(1, 0))[0].actions)
    assert not torch.equal(chunk.actions, fresh().infer(req(1, 0))[0].actions)  # the actions changed
    assert w.infer(req(0, 2, env_rank=1))[0].model_version == 0  # an env node still finishing step 0
    with pytest.raises(ValueError, match='not newer'):
        w.set_weights(new, 1)
    # synchronous gating counts from the weights that answer the first request: a resumed learner's
    # version 5 answers step 0, and step 1 waits for version 6 (not for a version >= 1)
    late = fresh()
    late.set_weights(new, 5)
    assert late.ready_for(0, 0) and not late.ready_for(1, 0) and late.ready_for(1, 1)
    late.set_weights({k: v + 0.1 for k, v in new.items()}, 6)
    assert late.ready_for(1, 0) and not late.ready_for(2, 0)
    with pytest.raises(ValueError, match='do not fit'):
        w.set_weights({**new, 'value.weight': torch.zeros(1, 3)}, 2)


def _step_trajectory(step, seed):
    from rl_traj_ros.data.identity import TrajectoryId
    t = _trajectory(t=4, b=2, c=4, a=7)
    g = torch.Generator().manual_seed(seed)
    t.curr_obs = {'states': torch.randn(4, 2, 21, generator=g)}
    t.rewards = torch.rand(4, 2, 4, generator=g)
    t.identity = TrajectoryId('run', 'rollout', step, rows=((0, 0, 0), (0, 0, 1)))
    return t


def test_learner_resumed_from_a_checkpoint_matches_an_uninterrupted_run(tmp_path):
    from rl_traj_ros.learning.ppo_learner import PPOLearner, PPOLearnerConfig

    def learner():
        return PPOLearner(ActorCritic(21, 7, 4, hidden=16, seed=0), PPOConfig(epochs=2, minibatch_size=4),
                       PPOLearnerConfig(rows_per_step=2, action_dim=7), seed=0)
    steps = [_step_trajectory(s, 10 + s) for s in range(4)]
    straight = learner()
    ups = [straight.offer(t) for t in steps]
    assert [u.version for u in ups] == [1, 2, 3, 4]
    first = learner()
    for t in steps[:2]:
        first.offer(t)
    first.save_checkpoint(tmp_path)
    resumed = learner()
    assert resumed.load_checkpoint(tmp_path) and resumed.version == 2
    assert resumed.offer(steps[1]) is None and resumed.counters['duplicates'] == 1  # trained before the stop
    last = [resumed.offer(t) for t in steps[2:]][-1]
    assert last.version == 4  # the versions continue
    assert all(torch.equal(last.state_dict[k], ups[-1].state_dict[k]) for k in last.state_dict)
    assert not learner().load_checkpoint(tmp_path / 'none')


def test_normalized_rewards_are_divided_by_the_running_std_of_the_discounted_return(tmp_path):
    """normalize_rewards (SB3's VecNormalize norm_reward): ret = ret * gamma + r per env row,
    reset after a done, carried into the row's next step; rewards of the update are
    r / std(all returns so far), the std goes into the checkpoint, and the episode figures stay
    in the env's units."""
    from dataclasses import replace as dc_replace
    from rl_traj_ros.learning.ppo_learner import PPOLearner, PPOLearnerConfig

    def learner(normalize):
        return PPOLearner(ActorCritic(21, 7, 4, hidden=16, seed=0), PPOConfig(epochs=1, minibatch_size=4),
                          PPOLearnerConfig(rows_per_step=2, action_dim=7, gamma=0.9, normalize_rewards=normalize),
                          seed=0)
    t0, t1 = _step_trajectory(0, 1), _step_trajectory(1, 2)
    d = torch.zeros(5, 2, 4, dtype=torch.bool)
    d[2, 0, 3] = True                     # env row 0: an episode ends with chunk 1
    t0 = dc_replace(t0, dones=d)
    by_hand, ret = [], torch.zeros(2, dtype=torch.float64)
    for t in (t0, t1):   # the same env rows: a row's return carries into its next step
        r, ends = t.rewards.double().sum(-1), t.dones[1:].any(-1)   # per chunk [T, B]; chunk t ends at t+1
        for i in range(4):
            ret = ret * 0.9 + r[i]
            by_hand.append(ret.clone())
            ret = ret * ~ends[i]
    on = learner(True)
    up0, up1 = on.offer(t0), on.offer(t1)
    assert up0.metrics['reward_scale'] == pytest.approx(torch.cat(by_hand[:4]).std(unbiased=False).item(), rel=1e-5)
    assert up1.metrics['reward_scale'] == pytest.approx(torch.cat(by_hand).std(unbiased=False).item(), rel=1e-5)
    off = learner(False)
    off_up = off.offer(t0)
    assert 'reward_scale' not in off_up.metrics
    assert off_up.metrics['reward_per_step'] == up0.metrics['reward_per_step']   # figures in the env's units
    assert not torch.equal(up0.state_dict['value.weight'], off_up.state_dict['value.weight'])
    on.save_checkpoint(tmp_path)
    back = learner(True)
    assert back.load_checkpoint(tmp_path) and torch.equal(back.return_stats.var, on.return_stats.var)
    assert back.return_stats.count.item() == 16


def test_learner_drops_rows_older_than_the_version_lag_and_trains_reinforce_pp():
    from rl_traj_ros.learning.ppo_learner import PPOLearner, PPOLearnerConfig
    old = PPOLearner(ActorCritic(21, 7, 4, hidden=16, seed=0), PPOConfig(epochs=1, minibatch_size=4),
                  PPOLearnerConfig(rows_per_step=2, action_dim=7, max_version_lag=1), version=2, seed=0)
    t = _step_trajectory(0, 1)
    t.versions = torch.tensor([0, 1, 1, 2]).reshape(4, 1, 1).expand(4, 2, 1).clone()  # per chunk
    up = old.offer(t)
    assert old.counters['stale_rows_dropped'] == 2 * 1  # the version-0 chunk of both envs: lag 2 > 1
    assert up.metrics['version_lag_max'] == 2 and up.metrics['samples'] == 6 and up.version == 3
    rpp = PPOLearner(ActorCritic(21, 7, 4, hidden=16, seed=0), PPOConfig(epochs=1, minibatch_size=4),
                  PPOLearnerConfig(rows_per_step=2, action_dim=7, advantage='reinforce++'), seed=0)
    up = rpp.offer(_step_trajectory(0, 2))
    assert up.version == 1 and up.metrics['samples'] == 8 and 'policy_loss' in up.metrics


def test_a_stored_trajectory_reads_back_as_the_trajectory_the_learner_trains_on(tmp_path):
    """The writer's storage layout (chunk-aligned rows) back to a Trajectory: what a restarted
    learner catches up from gives the same training batch as the live message did."""
    from rl_traj_ros.data.identity import TrajectoryId
    from rl_traj_ros.data.schema import TrajectoryKey
    from rl_traj_ros.storage.index import read_stored_trajectories
    from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer
    d = torch.zeros(2 * 3, 2, 4, dtype=torch.bool)  # 2 epochs of 2 chunks: [T+E] = 6 boundary rows
    d[2, 0, 1] = d[4, 1, 3] = True
    traj = _trajectory(t=4, b=2, c=4, a=7, dones=d)
    traj.num_epochs = 2
    traj.prev_values = torch.randn(6, 2, 1)
    traj.curr_obs = {'states': torch.randn(4, 2, 21)}
    traj.keys = [TrajectoryKey(5, e, 0, 0, c) for e in range(2) for c in range(2)]
    traj.identity = TrajectoryId('run-a', 'rollout', 5, rows=((0, 0, 0), (0, 0, 1)))
    with TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(tmp_path), trajectory_format='pt') as buf:
        buf.add_trajectories([traj])
        buf.flush()
    assert read_stored_trajectories(tmp_path, lambda i: i.run_id == 'run-b') == []
    [back] = read_stored_trajectories(tmp_path, lambda i: i.run_id == 'run-a')
    assert back.identity == traj.identity and back.keys == traj.keys and back.num_epochs == 2
    assert torch.equal(back.prev_values, traj.prev_values)
    for name in ('dones', 'terminations'):  # every chunk's end (the epoch-start rows are not stored)
        assert torch.equal(back.__dict__[name][[1, 2, 4, 5]], traj.__dict__[name][[1, 2, 4, 5]])
    for adv in ('gae', 'reinforce++'):
        for auto_reset in (True, False):
            a = training_batch(traj, 7, advantage=adv, auto_reset=auto_reset)
            b = training_batch(back, 7, advantage=adv, auto_reset=auto_reset)
            for k in a:
                va, vb = (a[k]['states'], b[k]['states']) if k == 'obs' else (a[k], b[k])
                assert torch.allclose(va, vb), (adv, auto_reset, k)


def test_learner_trains_the_same_update_whatever_order_the_rows_arrive_and_only_its_actor_rank():
    from dataclasses import replace as dc_replace
    from rl_traj_ros.data.identity import TrajectoryId
    from rl_traj_ros.learning.ppo_learner import PPOLearner, PPOLearnerConfig

    def learner(**kw):
        return PPOLearner(ActorCritic(21, 7, 4, hidden=16, seed=0), PPOConfig(epochs=2, minibatch_size=4),
                       PPOLearnerConfig(rows_per_step=4, action_dim=7, chunks_per_step=4, **kw), seed=0)
    a, b = _step_trajectory(0, 1), _step_trajectory(0, 2)
    b.identity = dc_replace(b.identity, rows=((1, 0, 0), (1, 0, 1)))  # a second env node's rows
    one, two = learner(), learner()
    assert one.offer(a) is None and one.pending_steps == [0]
    up1 = one.offer(b)
    assert two.offer(b) is None
    up2 = two.offer(a)
    assert all(torch.equal(up1.state_dict[k], up2.state_dict[k]) for k in up1.state_dict)
    rank1 = learner(only_rank=1, run_id='run')
    mine = _step_trajectory(0, 3)
    mine.identity = TrajectoryId('run', 'pipeline', 0, actor_rank=1, rows=((0, 0, 0), (0, 0, 1)))
    other_rank = dc_replace(mine.identity, actor_rank=0)
    other_run = dc_replace(mine.identity, run_id='old-run')
    assert not rank1.wants(other_rank) and not rank1.wants(other_run) and rank1.wants(mine.identity)
    for ident in (other_rank, other_run):
        assert rank1.offer(dc_replace(mine, identity=ident)) is None
    assert rank1.counters['not_ours'] == 2 and rank1.pending_steps == []


def test_behavior_clone_fits_demo_chunks_read_from_a_lerobot_dataset(tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rl_traj_ros.episodes.demos import demo_chunks, find_datasets, read_episodes
    from rl_traj_ros.learning.ppo import behavior_clone
    g = np.random.default_rng(0)
    for name, (sk, ak) in {'a': ('observation.state', 'action'), 'b': ('state', 'actions')}.items():  # both namings
        root = tmp_path / 'collected' / name
        (root / 'meta').mkdir(parents=True)
        (root / 'meta' / 'info.json').write_text('{}')
        (root / 'data' / 'chunk-000').mkdir(parents=True)
        s = g.normal(size=(30, 4)).astype(np.float32)
        a = np.tanh(s[:, :2] * 0.5).astype(np.float32)  # a smooth function of the state
        pq.write_table(pa.table({sk: list(s), ak: list(a), 'episode_index': [0] * 10 + [1] * 20}),
                       root / 'data' / 'chunk-000' / 'file-000.parquet')
    assert [p.name for p in find_datasets(tmp_path / 'collected')] == ['a', 'b']
    episodes = read_episodes(tmp_path / 'collected')
    assert [len(e[0]) for e in episodes] == [10, 20, 10, 20]
    states, chunks = demo_chunks(episodes, chunk=3)
    assert states.shape == (60, 4) and chunks.shape == (60, 6)
    last = episodes[0][1]
    assert np.array_equal(chunks[9], np.concatenate([last[9], last[9], last[9]]))  # the episode's end repeats
    states, chunks = demo_chunks(episodes, chunk=1)  # random states: later actions are not predictable from s_t
    model = ActorCritic(4, 2, 1, hidden=32, seed=0)
    m = behavior_clone(model, torch.from_numpy(states), torch.from_numpy(chunks), epochs=200, bc_batch_size=32)
    assert m['bc_mse_after'] < 0.2 * m['bc_mse_before'], m
    assert model.norm.count.item() == 60 and torch.allclose(model.norm.mean, torch.from_numpy(states).mean(0), atol=1e-5)
    assert m['bc_std_mean'] == pytest.approx(float(model.log_std.detach().exp().mean())) and m['bc_std_mean'] < 0.3


def test_critic_warmup_updates_leave_the_actor_unchanged():
    from rl_traj_ros.learning.ppo_learner import PPOLearner, PPOLearnerConfig
    lrn = PPOLearner(ActorCritic(21, 7, 4, hidden=16, seed=0), PPOConfig(epochs=2, minibatch_size=4, critic_warmup=1),
                  PPOLearnerConfig(rows_per_step=2, action_dim=7), seed=0)
    actor = {k: v.clone() for k, v in lrn.model.state_dict().items() if k.startswith(('actor', 'mean', 'log_std'))}
    first = lrn.offer(_step_trajectory(0, 1))
    assert first.metrics['critic_warmup'] == 1.0
    assert all(torch.equal(first.state_dict[k], v) for k, v in actor.items())  # the policy did not move
    assert not torch.equal(first.state_dict['value.weight'], ActorCritic(21, 7, 4, hidden=16, seed=0).value.weight)
    second = lrn.offer(_step_trajectory(1, 2))
    assert second.metrics['critic_warmup'] == 0.0
    assert not all(torch.equal(second.state_dict[k], v) for k, v in actor.items())  # now PPO moves it


def test_behaviour_cloning_trains_the_actor_whatever_the_critic_is_called():
    """Learning depends on the policy protocol (``actor_parameters``), not on parameter names:
    a policy whose critic has another name keeps it untouched."""
    from torch import nn

    from rl_traj_ros.learning.ppo import behavior_clone
    from rl_traj_ros.policies.protocol import TrainablePolicy

    class OtherNames(ActorCritic):
        def __init__(self):
            super().__init__(4, 2, 1, hidden=8, seed=3)
            self.v_net = nn.Linear(4, 1)   # a critic under a name no prefix rule knows

    model = OtherNames()
    assert isinstance(model, TrainablePolicy)
    critic = {k: v.clone() for k, v in model.state_dict().items() if k.startswith(('critic', 'value', 'v_net'))}
    actor = {k: v.clone() for k, v in model.state_dict().items() if k.startswith(('actor', 'mean'))}
    states = torch.randn(64, 4)
    m = behavior_clone(model, states, torch.tanh(states[:, :2]), epochs=20, bc_batch_size=16)
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in critic.items())
    assert all(not torch.equal(after[k], v) for k, v in actor.items())
    assert m['bc_mse_after'] < m['bc_mse_before']


def test_weights_saved_with_the_old_actor_name_still_load():
    model = ActorCritic(4, 2, 1, hidden=8, seed=1)
    old = {(k.replace('actor.', 'trunk.', 1) if k.startswith('actor.') else k): v for k, v in model.state_dict().items()}
    fresh = ActorCritic(4, 2, 1, hidden=8, seed=2)
    fresh.load_state_dict(old)
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in model.state_dict().items())
