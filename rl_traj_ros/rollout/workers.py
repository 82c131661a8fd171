"""The env side and the policy side of the chunk protocol, without ROS (spec §2 flow).

``EnvWorker`` turns a vector env into a stream of PolicyInputs: each carries the current
obs under a new key and the previous chunk's EnvPart. ``PolicyWorker`` answers a request
with the action chunk, the PolicyPart and the completed attached EnvPart. The ROS nodes
only move these objects over topics; ``run_inprocess`` wires them directly, which is both
the reference for the end-to-end test and the no-ROS baseline of the benchmark. Both build
them with ``assembly`` (the one place that turns parameters into objects).
"""
from __future__ import annotations

import copy

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Generator, Optional

import numpy as np
import torch

from ..params.defaults import ENV, POLICY
from ..data.schema import (ActionChunk, EnvPart, EnvTransition, PolicyInput, PolicyOutput, PolicyPart,
                           TrajectoryKey, TrajectorySource)

if TYPE_CHECKING:  # the annotations' names; ``assembly`` builds the models
    from ..policies.actor_critic import ActorCritic
    from ..policies.scripted import PickCubeExpert


@dataclass
class RolloutConfig:
    env_rank: int = ENV.env_rank
    stage_id: int = ENV.stage_id
    num_envs: int = ENV.num_envs
    chunk: int = ENV.chunk
    action_dim: int = ENV.action_dim
    num_epochs: int = ENV.num_epochs
    chunks_per_epoch: int = ENV.chunks_per_epoch
    num_steps: int = ENV.num_steps    # training steps to run; with target_successes: at most this many (0 = no cap)
    target_successes: int = ENV.target_successes  # stop at the first step boundary after this many successes
    target_episodes: int = ENV.target_episodes    # ... after this many episodes ended (evaluation)
    seed: int = ENV.seed
    image_obs: bool = ENV.image_obs
    image_size: int = ENV.image_size
    max_episode_steps: int = ENV.max_episode_steps
    teleop_only: bool = ENV.teleop_only     # demonstrations: every step executes the teleop action (flags all 1)
    start_step: int = ENV.start_step           # first step_id: a run appending to stored data continues its steps


@dataclass
class EnvStats:
    chunks: int = 0
    env_steps: int = 0
    episodes: int = 0
    successes: int = 0
    interventions: int = 0
    env_time_s: float = 0.0
    started: float = field(default_factory=time.monotonic)


def obs_to_torch(obs: dict) -> dict:
    out = {}
    for k, v in obs.items():
        if isinstance(v, np.ndarray) and v.dtype != object:
            out[k] = torch.from_numpy(np.ascontiguousarray(v))
        else:
            out[k] = list(v)
    return out


# (expert action [A], active, env index or -1) or None
InterventionSource = Callable[[], Optional[tuple[np.ndarray, bool, int]]]


class EnvWorker:
    def __init__(self, cfg: RolloutConfig, env, interventions: Optional[InterventionSource] = None,
                 should_stop: Optional[Callable[[], bool]] = None):
        self.cfg, self.env = cfg, env
        self.interventions = interventions
        self.should_stop = should_stop or (lambda: False)
        self.stats = EnvStats()

    def _source(self, step: int, epoch: int, chunk: int) -> list[TrajectorySource]:
        key = TrajectoryKey(step, epoch, self.cfg.env_rank, self.cfg.stage_id, chunk)
        return [TrajectorySource(key, self.cfg.num_envs, 0)]

    def run(self) -> Generator[PolicyInput, Optional[torch.Tensor], None]:
        """Yields requests; send() the reply's actions [B, C*A]. Ends with a key-less request
        that only carries the last EnvPart."""
        cfg = self.cfg
        obs, _ = self.env.reset(seed=cfg.seed)
        prev: Optional[EnvPart] = None
        step = cfg.start_step
        while True:
            for epoch in range(cfg.num_epochs):
                for l in range(cfg.chunks_per_epoch):
                    src = self._source(step, epoch, l)
                    actions = yield PolicyInput(src, obs_to_torch(obs), prev)
                    obs, transition, next_obs = self._execute(actions)
                    last = l == cfg.chunks_per_epoch - 1
                    terminal = bool(transition.dones.any())
                    prev = EnvPart(src, transition, next_obs=next_obs if (terminal or last) else None,
                                   requires_inference=last or terminal,
                                   initial_transition=EnvTransition.zeros(cfg.num_envs, cfg.chunk, cfg.action_dim)
                                   if l == 0 else None)
            step += 1
            done_target = ((cfg.target_successes and self.stats.successes >= cfg.target_successes)
                           or (cfg.target_episodes and self.stats.episodes >= cfg.target_episodes))
            if (cfg.num_steps and step - cfg.start_step >= cfg.num_steps) or done_target or self.should_stop():
                break
        yield PolicyInput([], obs_to_torch(obs), prev)

    def wrong_actions(self, actions: torch.Tensor) -> Optional[str]:
        """Why ``actions`` cannot be this env's chunk ([B, C*A] or [B, C, A] floats, finite), or None."""
        cfg = self.cfg
        b, c, a_dim = cfg.num_envs, cfg.chunk, cfg.action_dim
        shape = tuple(actions.shape)
        if shape not in ((b, c * a_dim), (b, c, a_dim)):
            return f'actions of shape {list(shape)}, expected [B, C*A] = [{b}, {c * a_dim}] (B={b}, C={c}, A={a_dim})'
        if not actions.dtype.is_floating_point:
            return f'actions of dtype {actions.dtype}, expected floats'
        if not bool(torch.isfinite(actions).all()):
            return 'non-finite actions (NaN or inf)'
        return None

    def _execute(self, actions: torch.Tensor) -> tuple[dict, EnvTransition, dict]:
        cfg = self.cfg
        b, c, a_dim = cfg.num_envs, cfg.chunk, cfg.action_dim
        acts = actions.detach().cpu().numpy().astype(np.float32).reshape(b, c, a_dim).copy()
        rewards = np.zeros((b, c), np.float32)
        term = np.zeros((b, c), bool)
        trunc = np.zeros((b, c), bool)
        iflags = np.zeros((b, c), bool)
        iacts = np.zeros((b, c * a_dim), np.float32)
        final: dict[int, dict] = {}
        obs = None
        t0 = time.perf_counter()
        for s in range(c):
            a = acts[:, s]
            cmd = self.interventions() if self.interventions else None
            if cfg.teleop_only:  # the operator drives; no fresh command = hold still
                a[:] = cmd[0] if cmd is not None else 0.0
                iflags[:, s] = True
                iacts[:, s * a_dim:(s + 1) * a_dim] = a
            elif cmd is not None and cmd[1]:
                rows = range(b) if cmd[2] < 0 else [cmd[2]]
                for i in rows:
                    a[i] = cmd[0]
                    iflags[i, s] = True
                    iacts[i, s * a_dim:(s + 1) * a_dim] = cmd[0]
                self.stats.interventions += 1
            if hasattr(self.env, 'mark_interventions'):  # a recorder: flags it per frame
                self.env.mark_interventions(iflags[:, s])
            obs, r, te, tr, info = self.env.step(a)
            rewards[:, s], term[:, s], trunc[:, s] = r, te, tr
            for i in np.nonzero(np.asarray(te) | np.asarray(tr))[0]:
                self.stats.episodes += 1
                fin = info.get('final_info', {})  # the env's truth where it has one (the sim), else the decided success
                if bool(np.asarray(fin.get('true_success', fin.get('success', info.get('success', np.zeros(b)))))[i]):
                    self.stats.successes += 1
                final.setdefault(int(i), info['final_obs'][i])
        self.stats.env_time_s += time.perf_counter() - t0
        self.stats.chunks += 1
        self.stats.env_steps += b * c
        next_obs = obs_to_torch(obs)
        for i, fo in final.items():  # the pre-reset observation ends the chunk's transition
            for k, v in fo.items():
                next_obs[k][i] = torch.from_numpy(np.array(v))
        transition = EnvTransition(torch.from_numpy(rewards), torch.from_numpy(term | trunc), torch.from_numpy(term),
                                   torch.from_numpy(trunc), torch.from_numpy(iacts), torch.from_numpy(iflags))
        return obs, transition, next_obs


def _key_seed(seed: int, key: TrajectoryKey) -> int:
    h = seed * 1000003
    for v in key.as_tuple():
        h = (h * 31 + v) & 0x7FFFFFFF
    return h


def check_obs(model, obs: dict, rows: int) -> None:
    """A request the model cannot take is refused, named (ValueError), before it reaches torch."""
    states, dim = obs.get('states'), getattr(model, 'state_dim', None)
    if states is None or states.ndim != 2 or states.shape[0] != rows or (dim is not None and states.shape[1] != dim):
        raise ValueError(f"obs.states has shape {None if states is None else tuple(states.shape)}: the request's "
                         f"sources hold {rows} rows and the policy takes [{rows}, {dim if dim is not None else 'S'}]")
    if getattr(model, 'use_images', False) and 'main_images' not in obs:
        raise ValueError('obs.main_images missing: the policy sees the cameras (use_images)')


class PolicyWorker:
    """Answers PolicyInputs. New weights (``set_weights``, from the learner) apply from the
    next training step on, never inside a step: a request is answered by the newest version
    whose first step is <= the request's step_id (the previous version is kept for env nodes
    still finishing the older step), and that version is stamped into its ActionChunk,
    PolicyPart and per-slot ``versions`` (synchronous PPO: step k+1 uses update k's weights)."""
    KEEP_VERSIONS = 2

    def __init__(self, model: ActorCritic, expert: Optional[PickCubeExpert] = None, seed: int = ENV.seed,
                 keep_next_obs: bool = False, model_version: int = POLICY.model_version):
        self.expert, self.seed, self.keep_next_obs = expert, seed, keep_next_obs
        self._versions: list[tuple[int, int, ActorCritic]] = [(0, int(model_version), model)]  # (from step, v, m)
        self._max_step = -1
        self._first_step = self._first_version = None  # latched by the first ready_for

    @property
    def model(self) -> ActorCritic:
        return self._versions[-1][2]

    @property
    def model_version(self) -> int:
        return self._versions[-1][1]

    def set_weights(self, state_dict: dict, version: int) -> int:
        """Stage weights with their version; returns the first step_id they answer."""
        if version <= self.model_version:
            raise ValueError(f'model version {version} is not newer than the current {self.model_version}')
        if not isinstance(self.model, torch.nn.Module):
            raise ValueError('this policy serves a fixed checkpoint (policy lerobot): it takes no learner weights')
        own = self.model.state_dict()
        bad = {k for k in own if k not in state_dict or tuple(state_dict[k].shape) != tuple(own[k].shape)}
        bad |= set(state_dict) - set(own)
        if bad:
            raise ValueError(f'weights do not fit the policy model: {sorted(bad)[:5]}')
        model = copy.deepcopy(self.model)
        model.load_state_dict(state_dict)
        first = self._max_step + 1
        self._versions = (self._versions + [(first, int(version), model.eval())])[-self.KEEP_VERSIONS:]
        return first

    def ready_for(self, step: int, max_version_lag: int) -> bool:
        """Whether a request of ``step`` may be answered now: with ``max_version_lag`` >= 0 only
        once the weights of update ``step - lag`` (counted from the first step asked) are in;
        0 is synchronous PPO (step k+1 by update k's weights)."""
        if max_version_lag < 0:
            return True
        if self._first_step is None:  # counted from the weights that answer the first request: a resumed
            self._first_step, self._first_version = step, self.model_version  # learner's version is no head start
        return self.model_version - self._first_version >= step - self._first_step - max_version_lag

    def _for_step(self, step: int) -> tuple[ActorCritic, int]:
        self._max_step = max(self._max_step, step)
        for first, version, model in reversed(self._versions):
            if step >= first:
                return model, version
        return self._versions[0][2], self._versions[0][1]  # older than every kept version

    def infer(self, req: PolicyInput) -> tuple[ActionChunk, PolicyPart]:
        b = sum(s.size for s in req.sources)
        check_obs(self.model, req.obs, b)
        g = torch.Generator().manual_seed(_key_seed(self.seed, req.sources[0].key))
        given = None
        if self.expert == 'zero':  # demonstrations: the operator's teleop actions replace these
            given = torch.zeros(b, self.model.chunk * self.model.action_dim)
        elif self.expert is not None:
            states = req.obs.get('privileged_states', req.obs['states']).numpy()  # the sim's truth (pixels)
            given = torch.from_numpy(np.stack([self.expert.act_chunk(states[i], self.model.chunk).reshape(-1)
                                               for i in range(b)])).clamp(-1.0, 1.0)
        model, version = self._for_step(req.sources[0].key.step_id)
        if hasattr(model, 'new_episodes'):  # a policy with per-episode state (LeRobot's queues, ensembling)
            done = req.env_part.transition.dones.any(1) if req.env_part is not None else torch.ones(b, dtype=bool)
            model.new_episodes(torch.nonzero(done).flatten().tolist())
        actions, logp, values = model.act(req.obs, generator=g, actions=given)
        versions = torch.full((b, model.chunk), version, dtype=torch.int64)
        out = PolicyOutput({'action': actions}, logp, values, versions)
        return ActionChunk(req.sources, actions, version), PolicyPart(req.sources, req.obs, output=out)

    def complete(self, req: PolicyInput) -> Optional[EnvPart]:
        part = req.env_part
        if part is None:
            return None
        resolved = part.next_obs if part.next_obs is not None else req.obs
        model, _ = self._for_step(part.sources[0].key.step_id)  # the values of the step's own version
        values = model.values(resolved) if part.requires_inference else None
        return part.complete(req.obs, values, keep_next_obs=self.keep_next_obs)

    def close(self) -> None:
        """Ends what the model runs outside this process (LeRobot's inference process)."""
        if hasattr(self.model, 'close'):
            self.model.close()

    def handle(self, req: PolicyInput) -> tuple[Optional[ActionChunk], Optional[PolicyPart], Optional[EnvPart]]:
        chunk, pol = self.infer(req) if req.sources else (None, None)
        return chunk, pol, self.complete(req)


def drive(worker: EnvWorker, answer: Callable[[PolicyInput], Optional[torch.Tensor]]) -> None:
    """Run an EnvWorker to its end, answering each request with ``answer``."""
    gen = worker.run()
    req = next(gen)
    while True:
        actions = answer(req)
        try:
            req = gen.send(actions)
        except StopIteration:
            return
