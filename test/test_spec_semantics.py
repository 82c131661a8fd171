"""Spec semantics (../shared/spec/README.md, trajectory-collector document) where the data path
used to differ; each test failed on the code before the change."""
import dataclasses

import pytest
import torch

from rl_traj_ros.collect.collector import TrajectoryCollector, TrajectoryPlan
from rl_traj_ros.collect.joiner import JoinedChunk
from rl_traj_ros.data.schema import (EnvPart, EnvTransition, MalformedPartError, PolicyOutput, PolicyPart,
                                     RewardConfig, TrajectoryKey, TrajectorySource)
from rl_traj_ros.collect.steps import CollectConfig, TrajectoryStep
from rl_traj_ros.data.synthetic import SyntheticSpec, make_parts
from rl_traj_ros.data.tree import tree_equal
from rl_traj_ros.learning.advantages import compute_loss_mask, masked_normalize

B, C, A = 2, 2, 3


def first_pair(**kw):
    spec = SyntheticSpec(num_epochs=1, chunks_per_epoch=1, sources=((0, 0),), envs_per_source=B, chunk=C,
                         action_dim=A, **kw)
    return next(iter(make_parts(spec)))


def test_complete_clears_requires_inference_once_values_are_attached():
    pol, env = first_pair()
    raw = dataclasses.replace(env, requires_inference=True, bootstrap_values=None, final_prev_values=None)
    done = raw.complete(next_obs=pol.obs, values=torch.ones(B, 1))
    assert done.requires_inference is False and torch.equal(done.bootstrap_values, torch.ones(B, 1))
    assert raw.requires_inference is True  # the env's own part is not changed


def test_rlt_ref_chunk_takes_the_executed_action_only_on_intervened_slots():
    pol, env = first_pair(intervene_prob=0.5, seed=3)
    ref = torch.full((B, C * A), 9.0)
    fwd = {**pol.output.forward_inputs, 'ref_chunk': ref, 'z_rl': torch.zeros(B, 4)}
    pol = dataclasses.replace(pol, output=dataclasses.replace(pol.output, forward_inputs=fwd))
    env = dataclasses.replace(env, next_rlt_obs={'z_rl': torch.ones(B, 4), 'ref_chunk': torch.zeros(B, C * A)})
    flags = env.transition.intervene_flags.repeat_interleave(A, 1)
    assert flags.any() and not flags.all()
    step = TrajectoryStep.from_parts(JoinedChunk(pol.sources[0].key, pol.sources[0], pol, env), CollectConfig())
    got = step.rlt['curr_ref_chunk']
    assert torch.equal(got[flags], env.transition.intervene_actions[flags])   # the expert's action
    assert torch.equal(got[~flags], ref[~flags])                              # the reference chunk


@pytest.mark.parametrize('mode', ['rollout', 'pipeline'])
def test_external_actions_are_rejected_where_logprobs_and_values_are_trained_on(mode):
    pol, env = first_pair()
    ext = PolicyPart(pol.sources, pol.obs, external_actions=pol.actions)
    col = TrajectoryCollector(TrajectoryPlan(mode=mode, chunks_per_epoch=1, envs_per_source=B))
    with pytest.raises(MalformedPartError, match='carries only external_actions.*log-probabilities and values'):
        col.push(ext)
    assert len(col.joiner) == 0 and col.stats['rejected'] == 1     # nothing stored with made-up zeros
    lerobot = TrajectoryCollector(TrajectoryPlan(mode='lerobot', chunks_per_epoch=1, envs_per_source=B))
    lerobot.push(ext)  # demonstrations: fine where no log-probs are trained on
    lerobot.push(env)
    assert lerobot.stats['joined'] == 1


def test_loss_mask_masks_steps_after_an_envs_first_done():
    # one epoch, L=3 chunks, C=2 slots, 2 envs; layout [d_before, d0, d1, d2]
    d = torch.zeros(4, 2, 2, dtype=torch.bool)
    d[1, 0, 1] = True            # env 0: done on slot 1 of chunk 0
    d[3, 1, 0] = True            # env 1: done on slot 0 of chunk 2
    m = compute_loss_mask(d, 1)
    assert m.shape == (3, 2, 2)
    assert m[:, 0].tolist() == [[True, True], [False, False], [False, False]]  # the done step itself counts
    assert m[:, 1].tolist() == [[True, True], [True, True], [True, False]]


def test_masked_normalization_by_hand_one_env_done_after_chunk_0_the_other_at_the_last_chunk():
    """One epoch, L=3 chunks of C=1 slot, 2 envs. Env 0 is done after chunk 0, env 1 only at
    the last chunk. A chunk is in the loss mask iff no done occurred in an earlier chunk of the
    epoch (d_before included): env 0's chunk 0 and all of env 1's. Masked statistics over
    {1, 2, 4, 6}: mean 3.25, population variance 3.6875; every entry normalized with them."""
    d = torch.zeros(4, 2, 1, dtype=torch.bool)   # [d_before, after chunk 0, 1, 2]
    d[1, 0, 0] = True
    d[3, 1, 0] = True
    valid = compute_loss_mask(d, 1).any(-1, keepdim=True)
    assert valid[..., 0].tolist() == [[True, True], [False, True], [False, True]]
    adv = torch.tensor([[1.0, 2.0], [5.0, 4.0], [7.0, 6.0]]).unsqueeze(-1)   # [T, B, 1]
    std = (3.6875 + 1e-5) ** 0.5
    want = torch.tensor([[1 - 3.25, 2 - 3.25], [5 - 3.25, 4 - 3.25], [7 - 3.25, 6 - 3.25]]).unsqueeze(-1) / std
    got = masked_normalize(adv, valid)
    assert torch.allclose(got, want, atol=1e-6)
    assert torch.allclose(got[..., 0], torch.tensor([[-1.17170, -0.65095], [0.91132, 0.39057], [1.95283, 1.43208]]),
                          atol=1e-5)
    # a start-of-epoch reset (d_before) masks an env's whole epoch
    d[0, 1, 0] = True
    assert not bool(compute_loss_mask(d, 1)[:, 1].any())


def pipeline_outputs(sources, auto_reset=True, **kw):
    spec = SyntheticSpec(num_epochs=1, chunks_per_epoch=3, sources=((0, 0), (1, 0), (2, 0)), envs_per_source=2,
                         chunk=2, action_dim=3, done_prob=0.3, seed=11)
    plan = TrajectoryPlan(mode='pipeline', num_epochs=1, chunks_per_epoch=3, sources=sources, envs_per_source=2,
                          num_actors=3, collect=CollectConfig(RewardConfig(auto_reset=auto_reset)), **kw)
    col = TrajectoryCollector(plan, 'r')
    return [o for pair in make_parts(spec) for x in pair for o in col.push(x)]


def test_pipeline_without_auto_reset_carries_a_loss_mask_and_normalizes_over_it():
    srcs = [(0, 0), (1, 0), (2, 0)]
    outs = pipeline_outputs(srcs, auto_reset=False, normalize_advantages=True)
    raw = pipeline_outputs(srcs, auto_reset=False)
    for o, r in zip(outs, raw):
        t = o.trajectory
        assert torch.equal(t.loss_mask, compute_loss_mask(t.dones, 1))
        valid = t.loss_mask.any(-1, keepdim=True)
        x = r.trajectory.advantages
        mean, var = x[valid].mean(), x[valid].var(unbiased=False)  # statistics of the valid chunks only
        # every entry normalized with the valid chunks' statistics (RLinf's masked normalization)
        assert torch.allclose(t.advantages, (x - mean) / torch.sqrt(var + 1e-5), atol=1e-6)
    assert any(not bool(o.trajectory.loss_mask.all()) for o in outs)  # the mask masked something
    assert all(o.trajectory.loss_mask is None for o in pipeline_outputs(srcs))  # auto-reset: no mask


def test_rows_are_routed_to_actors_in_sorted_source_order_whatever_the_config_order():
    a = pipeline_outputs([(0, 0), (1, 0), (2, 0)])
    b = pipeline_outputs([(2, 0), (0, 0), (1, 0)])
    assert [o.identity.rows for o in a] == [((0, 0, 0), (0, 0, 1)), ((1, 0, 0), (1, 0, 1)), ((2, 0, 0), (2, 0, 1))]
    for x, y in zip(a, b):
        assert x.actor_rank == y.actor_rank and x.identity == y.identity
        assert tree_equal(x.trajectory.to_dict(), y.trajectory.to_dict())


def test_only_success_keeps_an_episode_only_if_it_succeeded_and_terminated():
    key = TrajectoryKey(0, 0, 0, 0, 0)
    src = [TrajectorySource(key, 1, 0)]
    out = PolicyOutput({'action': torch.zeros(1, A)}, torch.zeros(1, A), torch.zeros(1, 1),
                       torch.zeros(1, 1, dtype=torch.int64))

    def episode(terminated):
        tr = EnvTransition(rewards=torch.ones(1, 1), dones=torch.ones(1, 1, dtype=torch.bool),
                           terminations=torch.full((1, 1), terminated), truncations=torch.full((1, 1), not terminated),
                           intervene_actions=torch.zeros(1, A), intervene_flags=torch.zeros(1, 1, dtype=torch.bool))
        col = TrajectoryCollector(TrajectoryPlan(mode='lerobot', chunks_per_epoch=1, envs_per_source=1,
                                                 only_success=True), 'r')
        outs = col.push(PolicyPart(src, {'states': torch.zeros(1, 2)}, output=out))
        outs += col.push(EnvPart(src, tr, initial_transition=EnvTransition.zeros(1, 1, A)))
        return outs, col
    kept, _ = episode(terminated=True)
    assert len(kept) == 1 and kept[0].episode.success
    dropped, col = episode(terminated=False)   # reward 1.0 >= 0.5 but the time limit ended it
    assert dropped == [] and col.stats['dropped_episodes'] == 1
    assert col.take_settled() == [key]          # dropped on purpose: acknowledged upstream
