"""RLPD over action chunks, without ROS: transitions, targets and losses by hand, the mixer,
and a task the learner must solve."""
import math

import pytest
import torch

from rl_traj_ros.learning.rlpd import RLPDConfig, RLPDUpdater, random_shift
from rl_traj_ros.learning.transitions import TransitionBatch, check_rows, to_transitions
from rl_traj_ros.policies.sac import MIN_STD, NORM_CLIP, CriticEnsemble, SquashedGaussianActor
from rl_traj_ros.storage.mixer import DemoOnlineMixer
from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer
from rl_traj_ros.storage.sampler import PrioritizedSampler


def test_chunk_transitions_by_hand():
    """gamma 0.5, C = 3, rewards (1, 2, 4) in every row: no done -> R = 1 + 0.5*2 + 0.25*4 = 3,
    bootstrap 0.5^3; terminated in slot 1 -> R = 2, no bootstrap; truncated in slot 0 -> R = 1,
    bootstrap 0.5 from the pre-reset observation; terminated in slot 2 -> R = 3, none."""
    r = torch.tensor([[1.0, 2.0, 4.0]]).repeat(4, 1)
    term = torch.tensor([[0, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 1]], dtype=torch.bool)
    trunc = torch.tensor([[0, 0, 0], [0, 0, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)
    rows = {'curr_obs/states': torch.arange(8.0).reshape(4, 2), 'next_obs/states': -torch.arange(8.0).reshape(4, 2),
            'actions': torch.zeros(4, 6), 'rewards': r, 'dones': term | trunc, 'terminations': term,
            'truncations': trunc, 'intervene_flags': torch.tensor([[0] * 6, [0] * 6, [1] + [0] * 5, [0] * 6]).bool()}
    b = to_transitions(rows, gamma=0.5)
    assert b.rewards.tolist() == [3.0, 2.0, 1.0, 3.0]
    assert b.discounts.tolist() == [0.125, 0.0, 0.5, 0.0]
    assert b.intervened.tolist() == [False, False, True, False]
    assert torch.equal(b.obs['states'], rows['curr_obs/states']) and torch.equal(b.next_obs['states'],
                                                                                rows['next_obs/states'])


def test_a_success_ends_the_learners_episode_so_a_recorded_tail_is_worth_what_the_run_pays():
    """gamma 0.5, C = 2: a demonstration that succeeds in slot 1 of row 1 and goes on two steps
    (steps_after_success 2), its last one terminating. Read as stored, the success slot
    bootstraps into a tail of rewards (the critic learns it is worth ~3, where the run's own
    success pays 1 and ends); with the success rule every rewarded slot is a terminal success."""
    r = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    term = torch.tensor([[False, False], [False, False], [False, True], [False, False]])
    rows = {'curr_obs/states': torch.zeros(4, 1), 'next_obs/states': torch.zeros(4, 1), 'actions': torch.zeros(4, 2),
            'rewards': r, 'dones': term, 'terminations': term, 'truncations': torch.zeros(4, 2, dtype=torch.bool),
            'intervene_flags': torch.zeros(4, 2, dtype=torch.bool)}
    stored = to_transitions(rows, gamma=0.5)
    assert stored.rewards.tolist() == [0.0, 0.5, 1.5, 0.0] and stored.discounts.tolist() == [0.25, 0.25, 0.0, 0.25]
    ended = to_transitions(rows, gamma=0.5, success_reward=0.5)
    assert ended.rewards.tolist() == [0.0, 0.5, 1.0, 0.0]
    assert ended.discounts.tolist() == [0.25, 0.0, 0.0, 0.25]   # no bootstrap past a success, the rest unchanged


def test_the_learner_ends_episodes_at_a_success_unless_told_the_reward_is_dense():
    from rl_traj_ros.assembly.build import make_learner
    from rl_traj_ros.params.defaults import RLPD
    assert RLPD.success_ends_episode is True
    base = {'algorithm': 'rlpd', 'state_dim': 3, 'action_dim': 2, 'chunk': 2, 'hidden': 16, 'num_critics': 2}
    assert make_learner(base).cfg.success_ends_episode is True
    assert make_learner({**base, 'success_ends_episode': False}).cfg.success_ends_episode is False


def test_rows_without_observations_are_refused_naming_the_fields():
    with pytest.raises(ValueError, match='curr_obs/states, next_obs/states.*record them again'):
        check_rows({'actions': 0, 'rewards': 0, 'dones': 0, 'terminations': 0, 'truncations': 0,
                    'intervene_flags': 0}, 'demos/trajectory_00000000.pt')


class FixedCritics(torch.nn.Module):
    """Q values that do not depend on the input: [E, N] given."""
    def __init__(self, q):
        super().__init__()
        self.q = torch.nn.Parameter(q.clone())
        self.members = q.shape[0]

    def forward(self, obs, actions):
        return self.q + 0.0 * actions.sum(1)


def updater(q_target, q_online=None, **cfg):
    actor = SquashedGaussianActor(2, 1, 1, hidden=8, seed=0)
    critics = CriticEnsemble(2, 1, 1, members=q_target.shape[0], hidden=8)
    u = RLPDUpdater(actor, critics, RLPDConfig(**cfg), seed=0)
    u.target = FixedCritics(q_target)
    if q_online is not None:
        u.critics = FixedCritics(q_online)
    return u


def batch(n=2, rewards=(1.0, 2.0), discounts=(0.5, 0.0)):
    obs = {'states': torch.zeros(n, 2)}
    return TransitionBatch(obs, torch.zeros(n, 1), torch.tensor(rewards), torch.tensor(discounts), obs,
                           torch.zeros(n, dtype=torch.bool))


def test_target_is_reward_plus_discounted_min_of_the_subsampled_target_critics():
    q = torch.tensor([[5.0, 5.0], [3.0, 3.0], [7.0, 7.0], [4.0, 4.0]])   # 4 target critics, 2 rows
    u = updater(q, critic_subsample=4)                                    # min over all: 3
    assert u.target_q(batch()).tolist() == [1.0 + 0.5 * 3.0, 2.0]          # the second row terminated
    u = updater(q, critic_subsample=2)   # a random pair each time: its min
    seen = {round(float(u.target_q(batch())[0]), 4) for _ in range(60)}
    mins = {1.0 + 0.5 * min(float(q[i, 0]), float(q[j, 0])) for i in range(4) for j in range(4) if i != j}
    assert seen <= mins and len(seen) > 1 and min(seen) == 2.5


def test_entropy_backup_subtracts_alpha_log_pi_of_the_next_action():
    q = torch.tensor([[3.0, 3.0], [3.0, 3.0]])
    u = updater(q, critic_subsample=2, backup_entropy=True, init_temperature=0.5)
    state = u.generator.get_state()
    _, logp = u.actor.sample(batch().next_obs, u.generator)
    u.generator.set_state(state)
    y = u.target_q(batch())
    assert torch.allclose(y, torch.tensor([1.0, 2.0]) + torch.tensor([0.5, 0.0]) * (3.0 - 0.5 * logp), atol=1e-5)


def test_critic_loss_actor_loss_and_temperature_by_hand():
    q_t = torch.tensor([[3.0, 3.0], [3.0, 3.0]])
    q_o = torch.tensor([[2.0, 1.0], [4.0, 2.0]])
    u = updater(q_t, q_online=q_o, critic_subsample=2, init_temperature=0.1)
    b = batch()   # targets: 1 + 0.5*3 = 2.5 and 2
    loss, _ = u.critic_loss(b)
    want = ((2.0 - 2.5) ** 2 + (1.0 - 2.0) ** 2 + (4.0 - 2.5) ** 2 + (2.0 - 2.0) ** 2) / 4
    assert math.isclose(float(loss.detach()), want, rel_tol=1e-6)
    state = u.generator.get_state()
    _, logp = u.actor.sample(b.obs, u.generator)
    u.generator.set_state(state)
    a_loss, _ = u.actor_loss(b)
    want_actor = float((0.1 * logp.detach() - torch.tensor([3.0, 1.5])).mean())
    assert math.isclose(float(a_loss.detach()), want_actor, rel_tol=1e-5)
    # entropy below the target -> the temperature's gradient raises it (and the reverse)
    low = u.temperature_loss(torch.full((4,), 5.0))     # entropy -5 < target -0.5
    low.backward()
    assert float(u.log_alpha.grad) < 0
    u.log_alpha.grad = None
    u.temperature_loss(torch.full((4,), -5.0)).backward()
    assert float(u.log_alpha.grad) > 0
    assert u.target_entropy == -0.5   # -|A|/2 with C*A = 1


def test_random_shift_moves_content_by_at_most_the_pad():
    img = torch.zeros(3, 16, 16, 3, dtype=torch.uint8)
    img[:, 8, 8] = 255
    out = random_shift(img, 4, torch.Generator().manual_seed(1))
    assert out.shape == img.shape and out.dtype == torch.uint8
    for k in range(3):
        ys, xs = (out[k, :, :, 0] == 255).nonzero(as_tuple=True)
        assert len(ys) == 1 and abs(int(ys[0]) - 8) <= 4 and abs(int(xs[0]) - 8) <= 4
    assert torch.equal(random_shift(img, 0, torch.Generator()), img)


def test_squashed_actions_stay_in_the_scaled_box_and_log_probs_match_a_density_check():
    actor = SquashedGaussianActor(3, 2, 2, hidden=16, action_scale=[0.025, 1.0], seed=2)
    obs = {'states': torch.randn(5000, 3)}
    a, logp = actor.sample(obs, torch.Generator().manual_seed(0))
    assert a.shape == (5000, 4) and bool((a[:, [0, 2]].abs() <= 0.025).all()) and bool((a.abs() <= 1.0).all())
    # the log-probability of the normalized action a / scale: the Gaussian's at u = atanh(a / scale)
    # minus log |d tanh(u) / du|
    mu, std = actor._dist(obs)
    u = torch.atanh((a / actor.scale).clamp(-1 + 1e-6, 1 - 1e-6))
    want = torch.distributions.Normal(mu, std).log_prob(u).sum(1) - torch.log(1 - torch.tanh(u) ** 2).sum(1)
    ok = (a / actor.scale).abs().amax(1) < 0.999   # away from float saturation
    assert torch.allclose(logp[ok], want[ok], atol=1e-3)
    acts, lps, values = actor.act({'states': torch.zeros(2, 3)}, torch.Generator().manual_seed(0))
    assert acts.shape == lps.shape == (2, 4) and values.shape == (2, 1)


def test_the_mixer_draws_half_online_half_demo_rows():
    def buf(src, n):
        b = TrajectoryReplayBuffer(sample_window_size=0, seed=src)
        b.add_trajectories([{'src': torch.full((n, 1, 1), src), 'x': torch.randn(n, 1, 2)}])
        return b
    online, demos = buf(0, 10), buf(1, 7)
    m = DemoOnlineMixer(online, demos, 0.5)
    out = m.sample(256)
    assert out['src'].shape == (256, 1) and int((out['src'] == 0).sum()) == 128
    assert DemoOnlineMixer(online, demos, 0.25).split(256) == (64, 192)
    empty = TrajectoryReplayBuffer(sample_window_size=0)
    assert DemoOnlineMixer(empty, demos, 0.5).split(10) == (0, 10) and DemoOnlineMixer(online, empty, 0.5).split(10) == (10, 0)


def test_states_are_standardized_alike_in_actor_critics_and_targets_and_travel_with_the_weights():
    """Fitted to states in metres and radians, the networks see zero-mean unit-std inputs: the
    same weights answer the same for states that differ only by units (scale and offset); a
    dimension the data never moved is divided by the floor, and far-off values are clipped."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(500, 4, generator=g) * torch.tensor([2.0, 0.05, 0.3, 0.0]) + torch.tensor([1.0, 0.4, -2.0, 0.7])
    u = RLPDUpdater(SquashedGaussianActor(4, 3, 2, hidden=16), CriticEnsemble(4, 3, 2, members=3, hidden=16),
                    RLPDConfig(batch_size=8, critic_subsample=2))
    u.fit_state_normalizer(x)
    n = u.actor.norm
    assert torch.allclose(n.mean, x.mean(0)) and torch.allclose(n.std[:3], x.std(0, unbiased=False)[:3])
    assert float(n.std[3]) == pytest.approx(MIN_STD)
    z = n(x)
    assert torch.allclose(z[:, :3].mean(0), torch.zeros(3), atol=1e-5) and torch.allclose(z[:, :3].std(0), torch.ones(3),
                                                                                           atol=1e-2)
    assert float(n(torch.tensor([[0.0, 50.0, 0.0, 0.7]]))[0, 1]) == NORM_CLIP
    for net in (u.critics, u.target):
        assert torch.equal(net.norm.mean, n.mean) and torch.equal(net.norm.std, n.std)
    assert {'norm.mean', 'norm.var'} <= set(u.actor.state_dict())   # what the policy node loads
    old = {k: v for k, v in u.actor.state_dict().items() if not k.startswith('norm.')}   # saved before the normalizer
    u.actor.load_state_dict(old)
    assert torch.equal(u.actor.norm.mean, torch.zeros(4)) and torch.equal(u.actor.norm.std, torch.ones(4))
    u.fit_state_normalizer(x)

    k, b = torch.tensor([100.0, 100.0, 57.3, 1.0]), torch.tensor([3.0, -1.0, 0.0, 0.0])   # other units
    other = RLPDUpdater(SquashedGaussianActor(4, 3, 2, hidden=16), CriticEnsemble(4, 3, 2, members=3, hidden=16),
                        RLPDConfig(batch_size=8, critic_subsample=2))
    other.actor.load_state_dict(u.actor.state_dict())
    other.critics.load_state_dict(u.critics.state_dict())
    other.fit_state_normalizer(x * k + b)
    a1, _ = u.actor.sample({'states': x[:5]}, deterministic=True)
    a2, _ = other.actor.sample({'states': x[:5] * k + b}, deterministic=True)
    assert torch.allclose(a1, a2, atol=1e-4)
    act = torch.zeros(5, 6)
    assert torch.allclose(u.critics({'states': x[:5]}, act), other.critics({'states': x[:5] * k + b}, act), atol=1e-4)


def test_the_learner_fits_the_normalizer_to_every_demonstration_row_once():
    from rl_traj_ros.learning.rlpd_learner import RLPDLearner, RLPDLearnerConfig
    demos = TrajectoryReplayBuffer(sample_window_size=0, cache_size=1)
    rows = [torch.randn(6, 2, 4) * 3 + i for i in range(3)]
    for r in rows:
        demos.add_trajectories([{'curr_obs/states': r, 'next_obs/states': r + 1, 'x': torch.zeros(6, 2, 1)}])
    got = demos.all_samples(('curr_obs/states',))
    assert set(got) == {'curr_obs/states'} and torch.equal(got['curr_obs/states'], torch.cat([r.reshape(12, 4)
                                                                                           for r in rows]))
    everything = torch.cat([torch.cat([r, r + 1]).reshape(-1, 4) for r in rows])
    for normalize in (True, False):
        u = RLPDUpdater(SquashedGaussianActor(4, 3, 2, hidden=16), CriticEnsemble(4, 3, 2, members=3, hidden=16),
                        RLPDConfig(batch_size=8, critic_subsample=2))
        RLPDLearner(u, RLPDLearnerConfig(normalize_states=normalize), demos)
        want = everything.mean(0) if normalize else torch.zeros(4)
        assert torch.allclose(u.actor.norm.mean, want, atol=1e-5) and torch.equal(u.target.norm.mean, u.actor.norm.mean)


ROUNDS, UPDATES = 30, 20


@pytest.mark.parametrize('prioritized', [False, True])
def test_rlpd_learns_a_continuous_control_task_from_demonstrations_and_its_own_data(prioritized):
    """A point on a line must reach the goal at 0 (|x| < 0.1: reward 1, episode over) from a
    start in [-1, 1], moving at most 0.2 per control step; sparse reward, chunks of 2 steps.
    Five demonstrations move straight to the goal; online data comes from the learned policy.
    Solved when the deterministic policy reaches the goal from 20 held-out starts."""
    torch.manual_seed(0)
    gamma, chunk, scale = 0.95, 2, 0.2

    def rollout(policy_act, start, max_chunks=10):
        rows, x = [], float(start)
        for _ in range(max_chunks):
            a = policy_act(x)
            r, d, xs = [0.0] * chunk, [False] * chunk, x
            for i in range(chunk):
                xs = max(-1.0, min(1.0, xs + float(a[i])))
                if abs(xs) < 0.1:
                    r[i], d[i] = 1.0, True
                    break
            rows.append((x, a, r, d, xs))
            x = xs
            if any(d):
                return rows, True
        return rows, False

    def add(buffer, rows):
        n = len(rows)
        buffer.add_trajectories([{
            'curr_obs/states': torch.tensor([[[x]] for x, *_ in rows]),
            'next_obs/states': torch.tensor([[[xs]] for *_, xs in rows]),
            'actions': torch.tensor([[list(map(float, a))] for _, a, *_ in rows]),
            'rewards': torch.tensor([[r] for _, _, r, _, _ in rows]),
            'dones': torch.tensor([[d] for _, _, _, d, _ in rows]), 'terminations': torch.tensor([[d] for _, _, _, d, _ in rows]),
            'truncations': torch.zeros(n, 1, chunk, dtype=torch.bool), 'intervene_flags': torch.zeros(n, 1, chunk, dtype=torch.bool)}])

    demos = TrajectoryReplayBuffer(sample_window_size=0)
    for start in (-0.9, -0.5, 0.4, 0.7, 1.0):
        add(demos, rollout(lambda x: [-scale * math.copysign(1, x)] * chunk, start)[0])
    sampler = PrioritizedSampler(seed=0) if prioritized else None  # the online half by |TD error|
    online = TrajectoryReplayBuffer(sample_window_size=0, sampler=sampler)
    actor = SquashedGaussianActor(1, 1, chunk, hidden=32, action_scale=[scale], seed=0)
    u = RLPDUpdater(actor, CriticEnsemble(1, 1, chunk, members=4, hidden=32),
                    RLPDConfig(batch_size=64, gamma=gamma, critic_subsample=2, init_temperature=0.05), seed=0)
    mixer = DemoOnlineMixer(online, demos, 0.5)
    g = torch.Generator().manual_seed(3)

    def act(x, deterministic=False):
        a, _ = actor.sample({'states': torch.tensor([[x]])}, g, deterministic)
        return a[0].detach().tolist()
    for it in range(ROUNDS):
        add(online, rollout(act, float(torch.rand(1, generator=g) * 2 - 1))[0])
        for _ in range(UPDATES):
            rows = mixer.sample(64, with_index=prioritized)
            u.step(to_transitions(rows, gamma))
            if prioritized:
                on = rows['index/source'] == 0
                sampler.update_priority(rows['index/seq'][on], rows['index/row'][on], u.td_errors[on])
    starts = torch.linspace(-1, 1, 20).tolist()
    solved = sum(rollout(lambda x: act(x, True), s)[1] for s in starts)
    assert solved == 20, solved


def _stored_run(directory, steps=3):
    """A writer's buffer of ``steps`` training steps of one source (whole transitions, identities)."""
    from rl_traj_ros.collect.collector import TrajectoryCollector, TrajectoryPlan
    from rl_traj_ros.data.synthetic import SyntheticSpec, make_parts
    from rl_traj_ros.delivery.sink import ExactlyOnceSink
    plan = TrajectoryPlan(mode='rollout', num_epochs=1, chunks_per_epoch=3, sources=[(0, 0)], envs_per_source=2)
    plan.collect.collect_transitions = True
    col = TrajectoryCollector(plan, 'run-1')
    buf = TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(directory))
    sink = ExactlyOnceSink(buf)
    trajs = []
    for step in range(steps):
        spec = SyntheticSpec(num_epochs=1, chunks_per_epoch=3, sources=((0, 0),), envs_per_source=2, chunk=2,
                             action_dim=3, state_dim=4, seed=step, step_id=step)
        for o in (o for pair in make_parts(spec) for x in pair for o in col.push(x)):
            sink.offer(o.trajectory, block=True)
            trajs.append(o.trajectory)
    buf.close()
    return trajs


def _learner(seed=0, **cfg):
    from rl_traj_ros.learning.rlpd_learner import RLPDLearner, RLPDLearnerConfig
    u = RLPDUpdater(SquashedGaussianActor(4, 3, 2, hidden=16, seed=seed), CriticEnsemble(4, 3, 2, members=3, hidden=16),
                    RLPDConfig(batch_size=8, critic_subsample=2), seed=seed)
    return RLPDLearner(u, RLPDLearnerConfig(publish_every=4, run_id='run-1', **cfg), seed=seed)


def test_a_restarted_learner_continues_from_its_checkpoint_and_rebuilds_its_online_buffer(tmp_path):
    """Each identity once (a resend is a duplicate), versions every ``publish_every`` steps within
    the UTD budget; killed and restarted: the checkpoint restores actor, critics, targets,
    temperature, optimizers and version, and the online buffer is rebuilt from the writer's
    directory (read-only) with every stored row once."""
    from rl_traj_ros.storage.index import read_stored_trajectories
    trajs = _stored_run(tmp_path / 'writer')
    first = _learner(utd_ratio=0.5)
    for t in trajs:
        first.offer(t)
    first.offer(trajs[0])
    assert first.counters['duplicates'] == 1 and first.counters['trajectories'] == 3
    assert first.counters['env_steps'] == 3 * 3 * 2 * 2 and first.budget() == 18   # 36 control steps x 0.5
    ups = [u for u in (first.train(5), first.train(100)) if u is not None]
    assert first.counters['updates'] == 18 and [u.version for u in ups] == [1, 2] and first.budget() == 0
    assert set(ups[-1].state_dict) == set(first.updater.actor.state_dict())  # the actor's weights go out
    first.save_checkpoint(tmp_path / 'ckpt')

    second = _learner(seed=7, utd_ratio=0.5)          # a fresh process, other initial weights
    assert second.load_checkpoint(tmp_path / 'ckpt') and second.version == 2 and second.counters['updates'] == 18
    for a, b in ((first.updater.actor, second.updater.actor), (first.updater.critics, second.updater.critics),
                 (first.updater.target, second.updater.target)):
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert float(first.updater.alpha) == float(second.updater.alpha)
    for t in read_stored_trajectories(tmp_path / 'writer', second.wants):
        second.offer(t)
    assert second.online.total_samples == first.online.total_samples == 18 and second.counters['duplicates'] == 0
    assert second.budget() == 0   # the rebuilt data does not earn the same gradient steps twice
    b1, b2 = first.online.sample(64), second.online.sample(64)
    assert set(b1) == set(b2)
