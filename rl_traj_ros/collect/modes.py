"""One strategy per collector output mode: what a completed scope becomes (spec §5).

``rollout``: per source and training step, one ``Trajectory`` over every epoch (optionally
split into env shards). ``pipeline``: per training step and epoch, every source's rows with
GAE computed and the loss mask without auto-reset, routed to ``num_actors`` actors in sorted
source order and cut into (shuffled) micro-batches. ``lerobot``: one-env episodes, closed at a
done, carried across steps while open. The collector owns the control flow (which keys
complete which scope); a mode owns its scope and its flush, and hands each output to the
collector's ``emit`` (identity, ledger) or drops rows on purpose with ``drop``.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Hashable, Optional

import torch

from ..data.identity import TrajectoryId
from ..data.schema import TrajectoryKey
from ..data.trajectory import Trajectory
from ..data.tree import tree_map, tree_stack
from ..learning.advantages import compute_gae, compute_loss_mask, masked_normalize
from .plan import SourceId, TrajectoryPlan
from .steps import TrajectoryStep


@dataclass
class CollectorOutput:
    """One flushed item: a trajectory (a lerobot episode as ``[n, 1, ...]``, with its
    ``Episode``). What it is (mode, step, source or actor, micro-batch, shard) is its
    ``TrajectoryId``, the one record the writer stores and acknowledges it by; the properties
    below read it."""

    trajectory: Trajectory
    episode: Optional['Episode'] = None

    @property
    def identity(self) -> TrajectoryId:
        return self.trajectory.identity

    @property
    def mode(self) -> str:
        return self.identity.mode

    @property
    def step_id(self) -> int:
        return self.identity.step_id

    @property
    def source_id(self) -> Optional[SourceId]:
        """(env_rank, stage_id) of a one-source output (rollout, lerobot); None for pipeline."""
        i = self.identity
        return (i.env_rank, i.stage_id) if i.env_rank >= 0 else None

    @property
    def epoch_id(self) -> int:
        return self.identity.epoch_id

    @property
    def actor_rank(self) -> int:
        return self.identity.actor_rank

    @property
    def micro_batch(self) -> int:
        return self.identity.micro_batch

    @property
    def shard(self) -> int:
        return self.identity.shard



@dataclass
class Episode:
    """One finished episode of one env, chunk-granular (the lerobot output mode)."""

    source_id: SourceId
    env_index: int
    episode_id: int                 # source-wide index of its first chunk ((step*E + epoch)*L + chunk)
    success: bool                   # a reward reached success_reward AND the episode terminated
    actions: torch.Tensor           # [n, C*A]
    rewards: torch.Tensor           # [n, C]
    dones: torch.Tensor             # [n, C]
    intervene_flags: torch.Tensor   # [n, C*A]
    observations: Optional[list] = None  # n (+1 when the final obs is known) obs dicts
    step_ids: list[int] = field(default_factory=list)
    keys: list[TrajectoryKey] = field(default_factory=list)  # the chunks it was built from
    terminations: Optional[torch.Tensor] = None  # [n, C]
    truncations: Optional[torch.Tensor] = None   # [n, C]

    @property
    def num_chunks(self) -> int:
        return self.actions.shape[0]

    @property
    def terminated(self) -> bool:
        """Ended by the task (not by a time limit or an epoch reset)."""
        return self.terminations is not None and bool(self.terminations[-1].any())

    def as_trajectory(self) -> Trajectory:
        """This episode as a one-env trajectory ``[n, 1, ...]`` (boundary fields padded with a
        zero ``d_before``); demonstrations have no log-probs or values, so those stay zero and
        ``versions`` is -1 ("no model"). With its observations (the collector's
        ``collect_transitions``) and the final one known, every chunk is a whole transition:
        ``curr_obs`` (the observation it started from) and ``next_obs`` (the next chunk's, the
        pre-reset final observation for the last), what an off-policy learner trains on."""
        n = self.num_chunks

        def boundary(x: Optional[torch.Tensor]) -> torch.Tensor:
            x = torch.zeros_like(self.dones) if x is None else x.to(torch.bool)
            return torch.cat([torch.zeros_like(x[:1]), x]).unsqueeze(1)
        obs = self.observations or []
        transitions = {}
        if len(obs) == n + 1:
            transitions = {'curr_obs': tree_stack_env(obs[:n]), 'next_obs': tree_stack_env(obs[1:])}
        return Trajectory(actions=self.actions.unsqueeze(1), rewards=self.rewards.unsqueeze(1),
                          prev_logprobs=torch.zeros_like(self.actions).unsqueeze(1),
                          versions=torch.full((n, 1, self.rewards.shape[1]), -1, dtype=torch.int64),
                          intervene_flags=self.intervene_flags.unsqueeze(1), dones=boundary(self.dones),
                          terminations=boundary(self.terminations), truncations=boundary(self.truncations),
                          prev_values=torch.zeros(n + 1, 1, 1), num_epochs=1, keys=list(self.keys), **transitions)


def tree_stack_env(items: list[dict]) -> dict:
    """Per-chunk observation dicts of one env -> ``[n, 1, ...]`` tensors."""
    return tree_map(lambda x: x.unsqueeze(1), tree_stack(items))



class Mode:
    """A collector's output mode; ``host`` is the collector (``emit``, ``drop``, ``run_id``)."""

    name = ''
    trains = True  # its outputs train on the policy's log-probabilities and values

    def __init__(self, plan: TrajectoryPlan, host):
        self.plan, self.host = plan, host

    def scope(self, key: TrajectoryKey) -> Hashable:
        """Which keys complete together: one source's training step."""
        return (key.source_id, key.step_id)

    def scope_size(self) -> int:
        return self.plan.keys_per_source_step

    def flush(self, scope, steps: list[TrajectoryStep]) -> list[CollectorOutput]:
        raise NotImplementedError

    def open_cells(self) -> list[tuple[TrajectoryKey, int]]:
        """Rows joined but held back by the mode (lerobot's unfinished episodes)."""
        return []

    def open_episodes(self) -> dict[tuple[SourceId, int], int]:
        return {}


class RolloutMode(Mode):
    name = 'rollout'

    def flush(self, scope, steps) -> list[CollectorOutput]:
        source_id, step_id = scope
        traj = Trajectory.from_steps(steps, self.plan.num_epochs)
        shards = traj.split(self.plan.num_shards) if self.plan.num_shards > 1 else [traj]
        n = traj.num_envs // len(shards)
        return [self.host.emit(CollectorOutput(t),
                               TrajectoryId(self.host.run_id, 'rollout', step_id, -1, *source_id, shard=i,
                                            rows=tuple((*source_id, b) for b in range(i * n, (i + 1) * n))))
                for i, t in enumerate(shards)]


class PipelineMode(Mode):
    name = 'pipeline'

    def scope(self, key: TrajectoryKey) -> Hashable:
        """Every source's chunks of one epoch of one step."""
        return (key.step_id, key.epoch_id)

    def scope_size(self) -> int:
        return len(self.plan.sources) * self.plan.chunks_per_epoch

    def flush(self, scope, steps) -> list[CollectorOutput]:
        step_id, epoch_id = scope
        plan = self.plan
        by_source: dict[SourceId, list[TrajectoryStep]] = defaultdict(list)
        for s in steps:
            by_source[s.key.source_id].append(s)
        parts = []
        rows: list[tuple[int, int, int]] = []  # global row -> (env_rank, stage_id, env)
        masked = not plan.collect.reward.auto_reset
        for sid in plan.sources:  # sorted: source s owns rows [s*N/S, (s+1)*N/S)
            t = Trajectory.from_steps(by_source[sid], 1)
            t.advantages, t.returns = compute_gae(t.rewards, t.prev_values, t.dones, 1, plan.gamma, plan.gae_lambda)
            if masked:  # without auto-reset an env sits finished after its first done
                t.loss_mask = compute_loss_mask(t.dones, 1)
            parts.append(t)
            rows.extend((*sid, b) for b in range(t.num_envs))
        total = sum(t.num_envs for t in parts)
        rows_per_actor = total // plan.num_actors
        mb = plan.micro_batch_size or rows_per_actor
        starts = [0]
        for t in parts:
            starts.append(starts[-1] + t.num_envs)
        outputs = []
        for actor in range(plan.num_actors):
            lo, hi = actor * rows_per_actor, (actor + 1) * rows_per_actor
            # slices of every source overlapping [lo, hi): a view when one source covers it
            pieces = [t.select_envs(max(lo, a) - a, min(hi, b) - a)
                      for t, a, b in zip(parts, starts, starts[1:]) if a < hi and lo < b]
            mine = pieces[0] if len(pieces) == 1 else Trajectory.cat_envs(pieces)
            if plan.normalize_advantages:  # over the valid (loss-masked) chunks only
                valid = mine.loss_mask.any(-1, keepdim=True) if mine.loss_mask is not None else None
                mine.advantages = masked_normalize(mine.advantages, valid)
            if plan.shuffle_micro_batches:
                g = torch.Generator().manual_seed(_mix_seed(plan.seed, actor, step_id, epoch_id))
                order = torch.randperm(rows_per_actor, generator=g)
            else:
                order = torch.arange(rows_per_actor)
            for i in range(rows_per_actor // mb):
                idx = order[i * mb:(i + 1) * mb]
                t = mine.index_envs(idx) if plan.shuffle_micro_batches else mine.select_envs(i * mb, (i + 1) * mb)
                ident = TrajectoryId(self.host.run_id, 'pipeline', step_id, epoch_id, actor_rank=actor, micro_batch=i,
                                     rows=tuple(rows[lo + j] for j in idx.tolist()))
                outputs.append(self.host.emit(CollectorOutput(t), ident))
        return outputs


class LerobotMode(Mode):
    name = 'lerobot'
    trains = False  # demonstrations: external actions, no log-probs

    def __init__(self, plan: TrajectoryPlan, host):
        super().__init__(plan, host)
        self._open_episodes: dict[tuple[SourceId, int], dict[str, Any]] = {}

    def flush(self, scope, steps) -> list[CollectorOutput]:
        source_id, step_id = scope
        plan = self.plan
        traj = Trajectory.from_steps(steps, plan.num_epochs)
        chunks = plan.chunks_per_epoch
        outputs = []
        for b in range(traj.num_envs):
            for e in range(plan.num_epochs):
                if bool(traj.dones[e * (chunks + 1), b].any()):  # d_before: env was reset at the epoch start
                    outputs.extend(self._close_episode(source_id, b, final_obs=None))
                for l in range(chunks):
                    t = e * chunks + l
                    ep = self._open_episodes.setdefault((source_id, b), {'rows': [], 'obs': [], 'steps': [], 'keys': []})
                    ep['keys'].append(traj.keys[t])
                    after = e * (chunks + 1) + 1 + l
                    ep['rows'].append((traj.actions[t, b], traj.rewards[t, b], traj.dones[after, b],
                                       traj.intervene_flags[t, b], traj.terminations[after, b],
                                       traj.truncations[after, b]))
                    ep['steps'].append(step_id)
                    if traj.curr_obs is not None:
                        ep['obs'].append(_env_obs(traj.curr_obs, t, b))
                    if bool(traj.dones[after, b].any()):
                        final = _env_obs(traj.next_obs, t, b) if traj.next_obs is not None else None
                        outputs.extend(self._close_episode(source_id, b, final_obs=final))
        return outputs

    def _close_episode(self, source_id: SourceId, env_index: int, final_obs) -> list[CollectorOutput]:
        ep = self._open_episodes.pop((source_id, env_index), None)
        if not ep or not ep['rows']:
            return []
        actions, rewards, dones, flags, terms, truncs = (torch.stack(x) for x in zip(*ep['rows']))
        plan = self.plan
        first, last = ep['keys'][0], ep['keys'][-1]
        eid = (first.step_id * plan.num_epochs + first.epoch_id) * plan.chunks_per_epoch + first.chunk_id
        obs = ep['obs'] + ([final_obs] if final_obs is not None else []) if ep['obs'] else None
        episode = Episode(source_id, env_index, eid, False, actions, rewards, dones, flags, obs, ep['steps'],
                          ep['keys'], terms, truncs)
        # a success needs the task to end it: a truncated episode is not one, whatever its rewards
        episode.success = bool((rewards >= plan.success_reward).any()) and episode.terminated
        cells = [(k, env_index) for k in ep['keys']]
        if plan.only_success and not episode.success:
            self.host.drop(cells)  # consumed on purpose: upstream may forget them
            return []
        out = CollectorOutput(episode.as_trajectory(), episode)
        return [self.host.emit(out, TrajectoryId(self.host.run_id, 'lerobot', last.step_id, last.epoch_id, *source_id,
                                             episode_id=eid, rows=((*source_id, env_index),)))]

    def open_episodes(self) -> dict[tuple[SourceId, int], int]:
        """Chunks held per unfinished episode (they carry over to the next training step)."""
        return {k: len(v['rows']) for k, v in self._open_episodes.items()}

    def open_cells(self) -> list[tuple[TrajectoryKey, int]]:
        """The (chunk key, env row) cells of the unfinished episodes: joined, not yet emitted."""
        return [(k, env) for (_, env), ep in self._open_episodes.items() for k in ep['keys']]


MODE_TYPES = {m.name: m for m in (RolloutMode, PipelineMode, LerobotMode)}


def _env_obs(obs: dict, t: int, b: int) -> dict:
    return tree_map(lambda x: x[t][b], obs)



def _mix_seed(*values: int) -> int:
    h = 1469598103934665603
    for v in values:
        h = ((h ^ (v & 0xFFFFFFFFFFFF)) * 1099511628211) & 0x7FFFFFFFFFFFFFFF
    return h



__all__ = ['CollectorOutput', 'Episode', 'Mode', 'RolloutMode', 'PipelineMode', 'LerobotMode', 'MODE_TYPES']
