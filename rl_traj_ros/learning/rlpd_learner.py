"""The off-policy learner, ROS-free: trajectories in, RLPD gradient steps as fast as the data
allows, the actor's weights out every ``publish_every`` steps or ``publish_period_s`` seconds.

Data: every trajectory identity of this run is taken once (a resent or caught-up one is
counted and ignored) into an in-memory online buffer; its rows that a human (or a scripted
operator) drove are copied into the demonstration buffer as well (HIL-SERL). The learner
samples only buffers it owns, never the writer's live directory (a restarted learner rebuilds
its online buffer from the writer's directory through the read-only, atomically replaced
index, ``storage.index.read_stored_trajectories``). Batches mix online and demonstration rows
at ``online_ratio`` (``storage.mixer.DemoOnlineMixer``). The gradient steps are budgeted by
``utd_ratio`` (critic steps per new control step of online data); the learner trains as fast
as it can within that budget, and reports the ratio it reached. States are standardized by the
demonstrations' mean and standard deviation, fitted once at start (``normalize_states``).

With the frozen keypoint encoder (``image_encoder: keypoints``) the learner pretrains it once,
when the first gradient step is due (after ``min_online_steps``), on the demonstrations' and
the rollouts' frames so far; from then on every row is encoded once as it arrives and kept as
``image_features`` without its images, so a gradient step is MLPs only (the actor's encoder is
the one the policy node runs: its weights go out with the actor's).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from ..params.defaults import LEARNER, RLPD
from ..data.identity import TrajectoryId
from ..data.trajectory import Trajectory
from ..policies.keypoints import KeypointEncoder, camera_views
from ..storage.layout import flatten_trajectory
from ..storage.mixer import DemoOnlineMixer
from ..storage.replay_buffer import TrajectoryReplayBuffer
from ..storage.sampler import PrioritizedSampler
from .encoder_pretrain import PretrainResult, pretrain_keypoints
from .base import SUCCESS_REWARD, Update, episode_ends, is_ours, read_checkpoint, write_checkpoint
from .rlpd import RLPDUpdater
from .transitions import check_rows, to_transitions


@dataclass
class RLPDLearnerConfig:
    utd_ratio: float = RLPD.utd_ratio            # critic steps per new online control step, at most
    online_ratio: float = RLPD.online_ratio      # of each batch; the rest from the demonstrations
    min_online_steps: int = RLPD.min_online_steps  # online control steps before the first step
    publish_every: int = RLPD.publish_every      # gradient steps between weight versions
    publish_period_s: float = RLPD.publish_period_s  # > 0: also publish after this long
    online_window: int = RLPD.online_window      # online buffer: the newest N trajectories (0 = all)
    normalize_states: bool = RLPD.normalize_states
    prioritized_replay: bool = RLPD.prioritized_replay  # online half by |TD error|
    priority_alpha: float = RLPD.priority_alpha
    priority_beta: float = RLPD.priority_beta
    encoder_pretrain_epochs: int = RLPD.encoder_pretrain_epochs   # image_encoder 'keypoints'
    success_reward: float = SUCCESS_REWARD
    success_ends_episode: bool = RLPD.success_ends_episode   # a success slot is terminal (transitions)
    run_id: str = RLPD.run_id


ONLINE_ARENA = 4096   # trajectories


CAMERA_FIELDS = ('main_images', 'extra_view_images')


def views_of(rows: dict, obs: str) -> torch.Tensor:
    """[N, V, H, W, 3]: every camera of ``<obs>/...`` in stored rows (``camera_views``' order)."""
    return camera_views({k: rows[f'{obs}/{k}'] for k in CAMERA_FIELDS if f'{obs}/{k}' in rows})


class RLPDLearner:
    algorithm = 'rlpd'

    def __init__(self, updater: RLPDUpdater, cfg: RLPDLearnerConfig, demos: Optional[TrajectoryReplayBuffer] = None,
                 version: int = 0, seed: int = RLPD.seed):
        """``demos``: whole transitions (``load_demos`` checks them); None: interventions only."""
        self.updater, self.cfg, self.version = updater, cfg, int(version)
        # the newest trajectories in the cache's arena: a batch is one gather per field instead of one
        # read per sampled trajectory; older ones are read from memory
        self.prioritized = (PrioritizedSampler(cfg.priority_alpha, cfg.priority_beta, seed=seed)
                            if cfg.prioritized_replay else None)
        self.online = TrajectoryReplayBuffer(seed=seed, cache_size=ONLINE_ARENA, sample_window_size=cfg.online_window,
                                             sampler=self.prioritized)
        self.seed, self.demos_seed = seed, seed + 1
        self.demos = demos if demos is not None else TrajectoryReplayBuffer(seed=self.demos_seed, cache_size=0,
                                                                           sample_window_size=0)
        self.mixer = DemoOnlineMixer(self.online, self.demos, cfg.online_ratio)
        if demos is not None and cfg.normalize_states:
            # once, before the first step and the first weights: the scale must not drift under the critics
            rows = demos.all_samples(('curr_obs/states', 'next_obs/states'))
            updater.fit_state_normalizer(torch.cat([rows['curr_obs/states'], rows['next_obs/states']]))
        self._seen: set[TrajectoryId] = set()
        encoder = updater.actor.encoder
        self.keypoints = encoder if isinstance(encoder, KeypointEncoder) else None
        self._early: list[tuple[dict, tuple]] = []   # rows that wait for the keypoint encoder's pretraining
        self.pretrained: Optional[PretrainResult] = None
        self.counters = {'trajectories': 0, 'duplicates': 0, 'not_ours': 0, 'updates': 0, 'env_steps': 0,
                         'intervened_steps': 0, 'intervened_rows_to_demos': 0, 'episodes': 0, 'successes': 0,
                         'episodes_with_intervention': 0}
        self._since_publish, self._t_publish, self._t_train = 0, time.monotonic(), 0.0
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    # what the rollout side reads of a learner (the in-process run, LearnerLoop)
    @property
    def model(self):
        return self.updater.actor

    @property
    def pending_steps(self) -> list[int]:
        """No step waits for rows: off-policy training never waits for a step to complete."""
        return []

    def ours(self, ident: TrajectoryId) -> bool:
        return is_ours(ident, self.cfg.run_id)

    def wants(self, ident: TrajectoryId) -> bool:
        return self.ours(ident) and ident not in self._seen

    def offer(self, traj: Trajectory) -> None:
        """Take one trajectory into the online buffer (once per identity); no step is trained here."""
        ident = traj.identity
        if ident is not None:
            if not self.ours(ident):
                self.counters['not_ours'] += 1
                return None
            if ident in self._seen:
                self.counters['duplicates'] += 1
                return None
            self._seen.add(ident)
        flat, shape, _ = flatten_trajectory(traj)
        check_rows(flat, f'trajectory {ident}')
        if self.keypoints is not None and not bool(self.keypoints.frozen):
            self._early.append((flat, shape))
        else:
            self._store(flat, shape)
        c = traj.rewards.shape[-1]
        self.counters['trajectories'] += 1
        self.counters['env_steps'] += shape[0] * shape[1] * c
        self.counters['intervened_steps'] += int(traj.intervene_flags.reshape(*traj.rewards.shape, -1).any(-1).sum())
        self._episode_figures(traj)
        return None

    def _store(self, flat: dict, shape: tuple) -> None:
        """Rows into the online buffer, and those a human drove into the demonstrations too."""
        flat = self._encoded(flat)
        # the rows just flattened, as [T, B, ...] again (views): the buffer does not align them a second time
        self.online.add_trajectories([{k: v.reshape(*shape, *v.shape[1:]) for k, v in flat.items()}])
        intervened = flat['intervene_flags'].reshape(flat['intervene_flags'].shape[0], -1).any(1)
        if bool(intervened.any()):
            rows = {k: v[intervened].unsqueeze(1) for k, v in flat.items()}
            self.demos.add_trajectories([rows])
            self.counters['intervened_rows_to_demos'] += int(intervened.sum())

    # -- the frozen keypoint encoder ------------------------------------------------------------
    def _encoded(self, rows: dict) -> dict:
        """``<obs>/image_features`` in place of the cameras' images (the frozen encoder's, once per row)."""
        if self.keypoints is None:
            return rows
        out = dict(rows)
        for obs in ('curr_obs', 'next_obs'):
            if f'{obs}/main_images' not in out:   # encoded already
                continue
            out[f'{obs}/image_features'] = self.keypoints.encode(views_of(out, obs))
            for k in CAMERA_FIELDS:
                out.pop(f'{obs}/{k}', None)
        return out

    def _encode_demos(self) -> None:
        if len(self.demos):
            rows = self._encoded(self.demos.all_samples())
            self.demos = TrajectoryReplayBuffer(seed=self.demos_seed, cache_size=0, sample_window_size=0)
            self.demos.add_trajectories([{k: v.unsqueeze(1) for k, v in rows.items()}])
            self.mixer = DemoOnlineMixer(self.online, self.demos, self.cfg.online_ratio)

    def pretrain_encoder(self) -> PretrainResult:
        """The keypoint encoder on every frame the learner holds (demonstrations, the rollouts so
        far), then frozen; the held rows are encoded and stored."""
        fields = [f'curr_obs/{k}' for k in CAMERA_FIELDS]
        views = [views_of(self.demos.all_samples(fields), 'curr_obs')] if len(self.demos) else []
        views += [views_of(flat, 'curr_obs') for flat, _ in self._early]
        if len({v.shape[1:] for v in views}) > 1:
            raise ValueError('the demonstrations\' frames and the rollouts\' differ in shape '
                             f'({sorted({tuple(v.shape[1:]) for v in views})}, [cameras, H, W, 3]): record the '
                             'demonstrations at the env\'s image_size with the same cameras')
        self.pretrained = pretrain_keypoints(self.keypoints, torch.cat(views), self.cfg.encoder_pretrain_epochs,
                                             seed=self.seed)
        self._encode_held()
        return self.pretrained

    def _encode_held(self) -> None:
        self._encode_demos()
        early, self._early = self._early, []
        for flat, shape in early:
            self._store(flat, shape)

    def _episode_figures(self, t: Trajectory) -> None:
        done, success = episode_ends(t, self.cfg.success_reward)
        self.counters['episodes'] += int(done.sum())
        self.counters['successes'] += int(success.sum())
        flags = t.intervene_flags.reshape(*t.rewards.shape, -1).any(-1)          # [T, B, C]
        for b in range(t.num_envs):   # episodes of env b that had an intervened step
            seg = False
            for d, f in zip(done[:, b].reshape(-1).tolist(), flags[:, b].reshape(-1).tolist()):
                seg = seg or f
                if d:
                    self.counters['episodes_with_intervention'] += int(seg)
                    seg = False

    def budget(self) -> int:
        """Gradient steps the data allows now."""
        if not len(self.demos) and not len(self.online):
            return 0
        if self.counters['env_steps'] < self.cfg.min_online_steps:
            return 0
        return max(0, int(self.cfg.utd_ratio * self.counters['env_steps']) - self.counters['updates'])

    def train(self, max_steps: int) -> Optional[Update]:
        """Up to ``max_steps`` gradient steps within the budget; a new version when one is due."""
        n = min(self.budget(), max_steps)
        t0 = time.perf_counter()
        if n and self.keypoints is not None and not bool(self.keypoints.frozen):
            self.pretrain_encoder()
        for _ in range(n):
            rows = self.mixer.sample(self.updater.cfg.batch_size, with_index=self.prioritized is not None)
            batch = to_transitions(rows, self.updater.cfg.gamma,
                                   self.cfg.success_reward if self.cfg.success_ends_episode else None)
            metrics = self.updater.step(batch)
            if self.prioritized is not None:  # the online rows' new priorities: their |TD error|
                online = rows['index/source'] == 0
                self.prioritized.update_priority(rows['index/seq'][online], rows['index/row'][online],
                                                 self.updater.td_errors[online])
            for k, v in metrics.items():
                self._sums[k] = self._sums.get(k, 0.0) + v
                self._counts[k] = self._counts.get(k, 0) + 1
        self._t_train += time.perf_counter() - t0
        self.counters['updates'] += n
        self._since_publish += n
        due = self._since_publish >= self.cfg.publish_every or (
            self.cfg.publish_period_s > 0 and self._since_publish
            and time.monotonic() - self._t_publish >= self.cfg.publish_period_s)
        return self._publish() if due else None

    def _publish(self) -> Update:
        now = time.monotonic()
        c = self.counters
        metrics = {k: self._sums[k] / self._counts[k] for k in self._sums}
        metrics.update(updates=float(c['updates']), env_steps=float(c['env_steps']),
                       utd=c['updates'] / max(c['env_steps'], 1), updates_per_s=self._since_publish / max(
                           self._t_train, 1e-9), online_rows=float(self.online.total_samples),
                       demo_rows=float(self.demos.total_samples), episodes=float(c['episodes']),
                       success_rate=c['successes'] / c['episodes'] if c['episodes'] else 0.0,
                       intervention_rate=c['intervened_steps'] / max(c['env_steps'], 1),
                       episodes_with_intervention=c['episodes_with_intervention'] / max(c['episodes'], 1),
                       version=float(self.version + 1), step_s=now - self._t_publish)
        if self.pretrained is not None:   # the keypoint encoder's pretraining, before the first step
            metrics.update(encoder_pretrain_s=self.pretrained.seconds, encoder_pretrain_frames=self.pretrained.frames,
                           encoder_pretrain_loss=self.pretrained.last_loss)
        self.version += 1
        self._since_publish, self._t_publish, self._t_train = 0, now, 0.0
        self._sums, self._counts = {}, {}
        sd = {k: v.detach().clone() for k, v in self.updater.actor.state_dict().items()}
        return Update(c['updates'], self.version, sd, metrics)

    # -- checkpoints -------------------------------------------------------------------------------
    def save_checkpoint(self, directory: str | Path) -> Path:
        """Actor, critics, targets, temperature, optimizers, version and counters, atomically."""
        return write_checkpoint(directory, {'algorithm': self.algorithm, 'rlpd': self.updater.state_dict(),
                                            'version': self.version, 'counters': dict(self.counters)})

    def load_checkpoint(self, directory: str | Path) -> bool:
        state = read_checkpoint(directory)
        if state is None:
            return False
        if state.get('algorithm') != self.algorithm:
            held = state.get('algorithm', LEARNER.algorithm)
            raise ValueError(f"{directory} holds a {held} learner's checkpoint, not an RLPD one")
        self.updater.load_state_dict(state['rlpd'])
        self.version = int(state['version'])
        if self.keypoints is not None and bool(self.keypoints.frozen):
            self._encode_held()   # the checkpoint's frozen encoder: no second pretraining
        # the data counters are rebuilt as the online buffer is (catching up from the writer's buffer)
        self.counters['updates'] = int(state['counters']['updates'])
        return True

    def warm_start_from(self, dataset_root: str, epochs: int = 100) -> Update:
        raise ValueError('RLPD learns from demonstrations in its buffer (demos_dir), not from a behaviour-cloned '
                         'warm start (warm_start_dataset)')


def load_demos(directory: str | Path, seed: int = RLPD.seed, cameras: int = 0) -> TrajectoryReplayBuffer:
    """A demonstrations directory (``real_collect``'s ``demos/``, or a sim expert run's replay
    buffer) as an in-memory buffer, every row checked to be a whole transition (with ``cameras``
    views when the learner sees the cameras)."""
    directory = Path(directory)
    buf = TrajectoryReplayBuffer(seed=seed, cache_size=0, sample_window_size=0)
    buf.load_checkpoint(str(directory))
    if not len(buf):
        raise ValueError(f'{directory} holds no demonstrations')
    row = buf.sample(1)
    check_rows(row, f'the demonstrations in {directory}')
    if cameras:
        have = ('curr_obs/main_images' in row) + (row['curr_obs/extra_view_images'].shape[1]
                                                  if 'curr_obs/extra_view_images' in row else 0)
        if have != cameras:
            raise ValueError(f'the demonstrations in {directory} have {have} camera(s), the learner sees {cameras} '
                             '(use_images, camera_names): record them with the same cameras (real_collect --camera, '
                             "sim_collect's image_obs) or train from state (use_images false)")
    return buf


__all__ = ['RLPDLearnerConfig', 'RLPDLearner', 'load_demos']
