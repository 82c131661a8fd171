"""TrajectoryCollector: joins parts, accumulates steps and flushes per output mode (spec §5).

The collector owns control flow only (which keys complete which scope); the strategies own
what a completed scope becomes. Sources, epochs and chunk counts come from the
``TrajectoryPlan`` so completeness never depends on arrival order.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Hashable, Optional, Union

import torch

from ..delivery.ledger import RowLedger
from ..data.identity import TrajectoryId
from .joiner import ChunkJoiner, DuplicateChunkError
from ..data.schema import EnvPart, MalformedPartError, PolicyPart, TrajectoryKey
from .steps import CollectConfig, TrajectoryAccumulator, TrajectoryStep
from ..data.trajectory import Trajectory
from ..learning.advantages import compute_gae, compute_loss_mask, masked_normalize
from ..data.tree import tree_map

SourceId = tuple[int, int]
MODES = ('rollout', 'pipeline', 'lerobot')


@dataclass
class TrajectoryPlan:
    """Shape of one training step's rollout and what to emit when a scope completes."""

    mode: str = 'rollout'
    num_epochs: int = 1
    chunks_per_epoch: int = 1
    sources: list[SourceId] = field(default_factory=lambda: [(0, 0)])
    envs_per_source: Union[int, dict[SourceId, int]] = 1
    collect: CollectConfig = field(default_factory=CollectConfig)
    num_shards: int = 1                 # rollout: split each source's Trajectory along envs
    num_actors: int = 1                 # pipeline
    micro_batch_size: int = 0           # pipeline: env rows per micro-batch; 0 = all of an actor's rows
    shuffle_micro_batches: bool = False
    normalize_advantages: bool = False
    gamma: float = 0.99
    gae_lambda: float = 0.95
    seed: int = 0
    only_success: bool = False          # lerobot
    success_reward: float = 0.5         # lerobot: an episode succeeded if a reward reached this

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f'mode must be one of {MODES}, got {self.mode!r}')
        if self.num_epochs < 1 or self.chunks_per_epoch < 1:
            raise ValueError('num_epochs and chunks_per_epoch must be >= 1')
        # rows are routed to actors in sorted (env_rank, stage_id) order, whatever order the
        # config lists the sources in (spec §5: source s owns rows [s*N/S, (s+1)*N/S))
        self.sources = sorted(tuple(s) for s in self.sources)
        if len(set(self.sources)) != len(self.sources):
            raise ValueError(f'duplicate sources in {self.sources}')
        if self.mode == 'pipeline':
            rows = sum(self.batch_size(s) for s in self.sources)
            if rows % self.num_actors:
                raise ValueError(f'{rows} env rows cannot be routed evenly to {self.num_actors} actors')
            per_actor = rows // self.num_actors
            if self.micro_batch_size and per_actor % self.micro_batch_size:
                raise ValueError(f'micro_batch_size {self.micro_batch_size} must divide the {per_actor} rows per actor')

    def batch_size(self, source: SourceId) -> int:
        if isinstance(self.envs_per_source, dict):
            if source not in self.envs_per_source:
                raise MalformedPartError(f'unknown source {source}; plan sources are {self.sources}')
            return self.envs_per_source[source]
        return int(self.envs_per_source)

    @property
    def keys_per_source_step(self) -> int:
        return self.num_epochs * self.chunks_per_epoch


@dataclass
class CollectorOutput:
    """One flushed item. ``trajectory`` is always set (a lerobot episode as ``[n, 1, ...]``)
    and carries the ``TrajectoryId`` the writer stores and acknowledges it by."""

    mode: str
    step_id: int
    source_id: Optional[SourceId]      # rollout / lerobot
    trajectory: Optional[Trajectory] = None
    episode: Optional['Episode'] = None
    epoch_id: int = 0                  # pipeline
    actor_rank: int = 0                # pipeline
    micro_batch: int = 0               # pipeline
    shard: int = 0                     # rollout

    @property
    def identity(self) -> TrajectoryId:
        return self.trajectory.identity


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
        ``versions`` is -1 ("no model")."""
        n = self.num_chunks

        def boundary(x: Optional[torch.Tensor]) -> torch.Tensor:
            x = torch.zeros_like(self.dones) if x is None else x.to(torch.bool)
            return torch.cat([torch.zeros_like(x[:1]), x]).unsqueeze(1)
        return Trajectory(actions=self.actions.unsqueeze(1), rewards=self.rewards.unsqueeze(1),
                          prev_logprobs=torch.zeros_like(self.actions).unsqueeze(1),
                          versions=torch.full((n, 1, self.rewards.shape[1]), -1, dtype=torch.int64),
                          intervene_flags=self.intervene_flags.unsqueeze(1), dones=boundary(self.dones),
                          terminations=boundary(self.terminations), truncations=boundary(self.truncations),
                          prev_values=torch.zeros(n + 1, 1, 1), num_epochs=1, keys=list(self.keys))


class TrajectoryCollector:
    """Push PolicyParts/EnvParts in any order; get flushed outputs when scopes complete."""

    def __init__(self, plan: TrajectoryPlan, run_id: str = ''):
        self.plan = plan
        self.run_id = run_id
        self.joiner: ChunkJoiner = ChunkJoiner(plan.batch_size)
        self.ledger = RowLedger()  # which rows of joined chunks are not yet stored downstream
        self._acc: dict[Hashable, TrajectoryAccumulator] = defaultdict(TrajectoryAccumulator)
        self._open_episodes: dict[tuple[SourceId, int], dict[str, Any]] = {}
        self.stats = {'parts': 0, 'joined': 0, 'rejected': 0, 'flushed': 0, 'build_failures': 0, 'dropped_episodes': 0,
                      'dropped_rows': 0}
        self._failed: set[TrajectoryKey] = set()
        self._settled: list[TrajectoryKey] = []  # every row stored (or dropped on purpose): ack upstream
        self._last_outputs: list[CollectorOutput] = []

    # -- public ------------------------------------------------------------------------------
    def push(self, part: Union[PolicyPart, EnvPart]) -> list[CollectorOutput]:
        """Add one part; return whatever scopes it completed.

        A malformed part raises ``MalformedPartError`` and changes nothing. If building a
        ready chunk fails, its halves stay stored and the error propagates; the next push
        (or ``retry``) builds it again.
        """
        self._last_outputs = []
        try:
            for src in part.sources:
                if src.key.source_id not in self.plan.sources:
                    raise MalformedPartError(f'part for unknown source {src.key.source_id}; plan sources are '
                                             f'{self.plan.sources}')
                if src.key.epoch_id >= self.plan.num_epochs or src.key.chunk_id >= self.plan.chunks_per_epoch:
                    raise MalformedPartError(f'key {src.key.as_tuple()} is outside the plan '
                                             f'({self.plan.num_epochs} epochs x {self.plan.chunks_per_epoch} chunks)')
            part.validate()
            if isinstance(part, PolicyPart) and part.output is None and self.plan.mode != 'lerobot':
                raise MalformedPartError(
                    f'PolicyPart for {[s.key.as_tuple() for s in part.sources]} carries only external_actions, but '
                    f'{self.plan.mode} mode trains on the policy\'s log-probabilities and values; send a policy '
                    "output, or collect such chunks in 'lerobot' mode")
            self.joiner.add(part)
        except DuplicateChunkError:
            # a resend of a built chunk: if its rows are all stored, our KeyAck was lost: ack again
            self._settled.extend(s.key for s in part.sources
                                 if self.joiner.was_completed(s.key) and not self.ledger.is_open(s.key))
            raise
        except MalformedPartError:
            self.stats['rejected'] += 1
            raise
        self.stats['parts'] += 1
        self._failed.difference_update(s.key for s in part.sources)  # a re-delivered half: try again
        return self.retry()

    def take_outputs_after_error(self) -> list[CollectorOutput]:
        """Outputs a push flushed before it raised for another key (they must not be lost)."""
        out, self._last_outputs = self._last_outputs, []
        return out

    def expire(self, max_age_s: float) -> list[TrajectoryKey]:
        """Drop keys (incomplete, or failing to build) older than ``max_age_s``."""
        stale = self.joiner.expire(max_age_s, include_ready=True)
        self._failed.difference_update(stale)
        return stale

    def retry(self) -> list[CollectorOutput]:
        """Build every ready key. A key whose build fails keeps its halves and is skipped until
        one of its halves is delivered again, so one bad key never blocks the others; the first
        failure is re-raised after all other keys were processed."""
        outputs: list[CollectorOutput] = []
        first_error: Optional[BaseException] = None
        for key in self.joiner.ready_keys():
            if key in self._failed:
                continue
            scope = self._scope(key)
            try:
                self.joiner.complete(key, lambda chunk, s=scope: self._acc[s].append(
                    TrajectoryStep.from_parts(chunk, self.plan.collect)))
            except Exception as e:  # noqa: BLE001 - kept for a retry; reported below
                self.stats['build_failures'] += 1
                self._failed.add(key)
                first_error = first_error or e
                continue
            self.stats['joined'] += 1
            self.ledger.joined(key, self.plan.batch_size(key.source_id))
            if len(self._acc[scope]) == self._scope_size():
                outputs.extend(self._flush(scope))
        self.stats['flushed'] += len(outputs)
        self._last_outputs = outputs
        if first_error is not None:
            raise first_error
        return outputs

    # -- acknowledgements ----------------------------------------------------------------------
    def acknowledge(self, identities) -> None:
        """The writer durably stored these outputs: their rows are settled."""
        for ident in identities:
            self._settle(self.ledger.settle(ident))

    def _settle(self, keys: list[TrajectoryKey]) -> None:
        self.joiner.retire(keys)
        self._settled.extend(keys)

    def take_settled(self) -> list[TrajectoryKey]:
        """Chunk keys whose every env row is stored (or was dropped on purpose): what the
        collector acknowledges upstream, so producers may forget those parts."""
        out, self._settled = self._settled, []
        return out

    def _emit(self, out: CollectorOutput, ident: TrajectoryId) -> CollectorOutput:
        traj = out.trajectory
        sources = {r[:2] for r in ident.rows}
        traj.keys = [k for k in traj.keys if k.source_id in sources]  # exactly the keys its rows come from
        traj.identity = ident
        self.ledger.emitted(ident, ident.cells(traj.keys))
        return out

    def pending(self) -> dict:
        return {'parts': self.joiner.pending(), 'steps': {s: len(a) for s, a in self._acc.items() if len(a)}}

    # -- scopes ------------------------------------------------------------------------------
    def _scope(self, key: TrajectoryKey) -> Hashable:
        if self.plan.mode == 'pipeline':
            return (key.step_id, key.epoch_id)
        return (key.source_id, key.step_id)

    def _scope_size(self) -> int:
        if self.plan.mode == 'pipeline':
            return len(self.plan.sources) * self.plan.chunks_per_epoch
        return self.plan.keys_per_source_step

    def _flush(self, scope: Hashable) -> list[CollectorOutput]:
        acc = self._acc.pop(scope)
        steps = acc.take(acc.keys())
        if self.plan.mode == 'rollout':
            return self._flush_rollout(scope, steps)
        if self.plan.mode == 'pipeline':
            return self._flush_pipeline(scope, steps)
        return self._flush_lerobot(scope, steps)

    def _flush_rollout(self, scope, steps) -> list[CollectorOutput]:
        source_id, step_id = scope
        traj = Trajectory.from_steps(steps, self.plan.num_epochs)
        shards = traj.split(self.plan.num_shards) if self.plan.num_shards > 1 else [traj]
        n = traj.num_envs // len(shards)
        return [self._emit(CollectorOutput('rollout', step_id, source_id, trajectory=t, shard=i),
                           TrajectoryId(self.run_id, 'rollout', step_id, -1, *source_id, shard=i,
                                        rows=tuple((*source_id, b) for b in range(i * n, (i + 1) * n))))
                for i, t in enumerate(shards)]

    def _flush_pipeline(self, scope, steps) -> list[CollectorOutput]:
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
                ident = TrajectoryId(self.run_id, 'pipeline', step_id, epoch_id, actor_rank=actor, micro_batch=i,
                                     rows=tuple(rows[lo + j] for j in idx.tolist()))
                outputs.append(self._emit(CollectorOutput('pipeline', step_id, None, trajectory=t, epoch_id=epoch_id,
                                                          actor_rank=actor, micro_batch=i), ident))
        return outputs

    def _flush_lerobot(self, scope, steps) -> list[CollectorOutput]:
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
            self.stats['dropped_episodes'] += 1
            self.stats['dropped_rows'] += len(cells)
            self._settle(self.ledger.discard(cells))  # consumed on purpose: upstream may forget them
            return []
        out = CollectorOutput('lerobot', ep['steps'][-1], source_id, trajectory=episode.as_trajectory(),
                              episode=episode)
        return [self._emit(out, TrajectoryId(self.run_id, 'lerobot', last.step_id, last.epoch_id, *source_id,
                                             episode_id=eid, rows=((*source_id, env_index),)))]

    def open_episodes(self) -> dict[tuple[SourceId, int], int]:
        """Chunks held per unfinished episode (they carry over to the next training step)."""
        return {k: len(v['rows']) for k, v in self._open_episodes.items()}

    def open_cells(self) -> list[tuple[TrajectoryKey, int]]:
        """The (chunk key, env row) cells of the unfinished episodes: joined, not yet emitted."""
        return [(k, env) for (_, env), ep in self._open_episodes.items() for k in ep['keys']]


def _env_obs(obs: dict, t: int, b: int) -> dict:
    return tree_map(lambda x: x[t][b], obs)


def _mix_seed(*values: int) -> int:
    h = 1469598103934665603
    for v in values:
        h = ((h ^ (v & 0xFFFFFFFFFFFF)) * 1099511628211) & 0x7FFFFFFFFFFFFFFF
    return h


__all__ = ['TrajectoryPlan', 'TrajectoryCollector', 'CollectorOutput', 'Episode']
