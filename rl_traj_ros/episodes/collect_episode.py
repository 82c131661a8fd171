"""CollectEpisode: record every step of any gymnasium env and export finished episodes.

Supported env kinds (``num_envs``):
- a single ``gymnasium.Env`` (``num_envs=1``): an episode ends at terminated/truncated; the
  next ``reset()`` starts the next one.
- a ``gymnasium.vector.VectorEnv`` or any batched env returning ``[num_envs, ...]``
  observations, in each auto-reset convention:
  * gymnasium 1.x ``NEXT_STEP`` (default): the step after a done returns the reset obs
    (its action was ignored), so it starts the next episode and is not recorded as a step;
  * gymnasium 1.x ``SAME_STEP`` (``info['final_obs']``/``info['final_info']``) and the older
    ``final_observation``/``final_info`` convention (RLinf, ManiSkill): the pre-reset final
    observation ends the finishing episode, the returned obs starts the next;
  * ``DISABLED``: a done env waits for ``reset(options={'reset_mask': ...})``/``reset()``.
Finished episodes are written by ONE background thread; a writer error is re-raised on the
next ``step``/``reset``/``close`` (never silently lost). ``close()`` (also run at exit and on
SIGINT/SIGTERM) flushes and finalizes; calling it twice is safe.
"""
from __future__ import annotations

import atexit
import signal
import threading
import weakref
from pathlib import Path
from typing import Any, Optional

import gymnasium as gym
import numpy as np

from ..params.defaults import ENV
from ..storage.background import BackgroundWriter
from .lerobot_writer import LeRobotWriter
from .pickle_writer import PickleWriter
from .record import REWARD_FROM_ENV, EpisodeRecord

SUCCESS_KEYS = ('success_once', 'success_at_end', 'success')


def _scalar_bool(v: Any) -> Optional[bool]:
    try:
        a = np.asarray(v.detach().cpu() if hasattr(v, 'detach') else v)
        return bool(a.reshape(-1)[0]) if a.size else None
    except (TypeError, ValueError):
        return None


def infer_success(infos: list, fallback: bool) -> bool:
    """Spec order: scan infos from the last step back; per info final_info -> episode -> root;
    per source success_once -> success_at_end -> success; else the per-step flag."""
    for info in reversed(infos):
        if not isinstance(info, dict):
            continue
        for source in (info.get('final_info'), info.get('episode'), info):
            if not isinstance(source, dict):
                continue
            for k in SUCCESS_KEYS:
                if k in source:
                    b = _scalar_bool(source[k])
                    if b is not None:
                        return b
    return fallback


def _index(tree: Any, i: int) -> Any:
    """Row i of a batched obs/info tree (dicts recurse; gymnasium '_key' masks respected)."""
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            if isinstance(k, str) and k.startswith('_'):
                continue
            mask = tree.get(f'_{k}')
            if mask is not None and not bool(np.asarray(mask)[i]):
                continue
            out[k] = _index(v, i)
        return out
    if isinstance(tree, (list, tuple)):
        return tree[i]
    if hasattr(tree, 'shape') and len(tree.shape) > 0:
        return tree[i]
    return tree


def _copy(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    if hasattr(x, 'detach'):
        return x.detach().cpu().clone()
    if isinstance(x, np.ndarray):
        return x.copy()
    return x


class CollectEpisode(gym.Wrapper):
    def __init__(self, env: Any, save_dir: str, rank: int = 0, num_envs: Optional[int] = None,
                 show_goal_site: bool = True, export_format: str = ENV.export_format,
                 robot_type: Optional[str] = None, fps: int = ENV.fps, only_success: bool = ENV.only_success,
                 finalize_interval: int = ENV.finalize_interval, lerobot_version: str = ENV.lerobot_version,
                 max_queued_episodes: int = 64, naming: str = 'lerobot', image_storage: str = ENV.image_storage,
                 camera_names: Optional[list] = None, state_names: Optional[list] = None,
                 action_names: Optional[list] = None):
        if isinstance(env, gym.Env):
            super().__init__(env)
        else:  # vector / batched envs are not gym.Env: wrap them by delegation
            self.env = env
            self._action_space = self._observation_space = self._metadata = self._cached_spec = None
        if export_format not in ('pickle', 'lerobot'):
            raise ValueError(f"export_format must be 'pickle' or 'lerobot', got {export_format!r}")
        self.save_dir = Path(save_dir)
        self.save_dir.mkdir(parents=True, exist_ok=True)
        num_envs = int(num_envs if num_envs is not None else getattr(env, 'num_envs', 1))  # None: the env's own
        self.rank, self.num_envs, self.only_success = rank, num_envs, only_success
        self.finalize_interval = finalize_interval
        self.vector = not isinstance(env, gym.Env) or num_envs > 1
        mode = getattr(env, 'metadata', {}).get('autoreset_mode') if hasattr(env, 'metadata') else None
        self.autoreset_mode = str(getattr(mode, 'value', mode) or 'NextStep')
        if show_goal_site:
            self._try_show_goal_site()
        # what each camera and dimension is: given here, else what the env says about itself
        names = {k: v if v else env_attr(env, k) for k, v in
                 (('camera_names', camera_names), ('state_names', state_names), ('action_names', action_names))}
        robot_type = robot_type or env_attr(env, 'robot_type') or 'panda'  # info.json: the robot, as the env says
        self.writer = (PickleWriter(str(self.save_dir), rank) if export_format == 'pickle'
                       else LeRobotWriter(str(self.save_dir), fps=fps, robot_type=robot_type, version=lerobot_version,
                                          naming=naming, image_storage=image_storage, **names))
        self._open: list[Optional[EpisodeRecord]] = [None] * self.num_envs
        self._episode_ids = [0] * self.num_envs
        self._step_success = [False] * self.num_envs
        self._awaiting_reset = [False] * self.num_envs
        self.episodes_saved = 0
        self.episodes_dropped = 0
        self.episodes_rerecorded = 0   # ended by the operator's re-record label: not written
        self._since_finalize = 0
        # bounded: a stalled disk slows the loop instead of eating memory
        self._bg = BackgroundWriter(self._write_episode, max_queued_episodes, 'collect-episode-writer')
        self._closed = False
        self._step_interventions: Optional[np.ndarray] = None
        self._intervened: Optional[np.ndarray] = None
        self._install_exit_hooks()

    def get_wrapper_attr(self, name: str) -> Any:
        """Also through an env that is not a ``gymnasium.Env`` (a BatchedEnv wrapped by
        delegation has no ``get_wrapper_attr`` of its own), so ``env_attr`` reads through this
        recorder whatever it wraps."""
        if isinstance(self.env, gym.Env) or hasattr(self, name):
            return super().get_wrapper_attr(name)
        return getattr(self.env, name)

    def mark_interventions(self, flags: Any) -> None:
        """Which envs execute the operator's action in the next step (the rollout worker applies
        interventions outside the env); recorded per frame as complementary_info.is_intervention."""
        self._step_interventions = np.asarray(flags, bool).reshape(-1)

    # -- env API -------------------------------------------------------------------------------
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        self._raise_writer_error()
        obs, info = self.env.reset(seed=seed, options=options)
        mask = (options or {}).get('reset_mask') if self.vector else None
        for i in range(self.num_envs):
            if mask is not None and not bool(np.asarray(mask)[i]):
                continue
            self._discard(i)  # an unfinished episode cut by an explicit reset is not an episode
            self._start(i, self._obs(obs, i))
        return obs, info

    def step(self, action: Any):
        self._raise_writer_error()
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._intervened, self._step_interventions = self._step_interventions, None
        if not self.vector:
            self._record(0, action, obs, reward, terminated, truncated, info)
            return obs, reward, terminated, truncated, info
        term, trunc, rew = np.asarray(terminated).reshape(-1), np.asarray(truncated).reshape(-1), \
            np.asarray(_to_np(reward)).reshape(-1)
        final_obs = info.get('final_obs', info.get('final_observation')) if isinstance(info, dict) else None
        final_info = info.get('final_info') if isinstance(info, dict) else None
        final_mask = info.get('_final_obs', info.get('_final_observation')) if isinstance(info, dict) else None
        for i in range(self.num_envs):
            if self._awaiting_reset[i]:
                if self.autoreset_mode == 'NextStep':  # this step only reset env i
                    self._awaiting_reset[i] = False
                    self._start(i, self._obs(obs, i))
                continue
            done = bool(term[i] or trunc[i])
            step_info = _index(info, i) if isinstance(info, dict) else {}
            has_final = final_obs is not None and done and (final_mask is None or bool(np.asarray(final_mask)[i]))
            if has_final:  # SAME_STEP / legacy: obs is already the next episode's reset obs
                if isinstance(final_info, dict):
                    step_info = dict(step_info)
                    step_info['final_info'] = _index(final_info, i)
                elif isinstance(final_info, (list, tuple, np.ndarray)):
                    step_info = dict(step_info)
                    step_info['final_info'] = final_info[i]
                self._record(i, _row(action, i), _index(final_obs, i) if not isinstance(final_obs, np.ndarray)
                             or final_obs.dtype != object else final_obs[i], rew[i], term[i], trunc[i], step_info)
                self._start(i, self._obs(obs, i))
            else:
                self._record(i, _row(action, i), self._obs(obs, i), rew[i], term[i], trunc[i], step_info)
                if done:
                    self._awaiting_reset[i] = True
        return obs, reward, terminated, truncated, info

    # -- recording -----------------------------------------------------------------------------
    def _obs(self, obs: Any, i: int) -> Any:
        return _copy(_index(obs, i) if self.vector else obs)

    def _start(self, i: int, obs: Any) -> None:
        self._open[i] = EpisodeRecord(i, self._episode_ids[i], observations=[_copy(obs)])
        self._step_success[i] = False
        self._awaiting_reset[i] = False

    def _discard(self, i: int) -> None:
        self._open[i] = None

    def _record(self, i: int, action, obs, reward, terminated, truncated, info) -> None:
        ep = self._open[i]
        if ep is None:
            raise RuntimeError(f'env {i} stepped before reset(); call reset() first')
        ep.actions.append(_copy(_to_np(action)))
        ep.rewards.append(float(_to_np(reward)))
        ep.terminated.append(bool(terminated))
        ep.truncated.append(bool(truncated))
        ep.infos.append(_copy(info) if isinstance(info, dict) else info)
        ep.interventions.append(bool(self._intervened[i]) if self._intervened is not None else False)
        given = isinstance(info, dict) and 'reward_source' in info   # an env whose reward a source decides
        ep.reward_sources.append(int(_to_np(info['reward_source'])) if given else REWARD_FROM_ENV)
        ep.step_successes.append(bool(_scalar_bool(info.get('step_success'))) if isinstance(info, dict) else False)
        ep.observations.append(_copy(obs))
        # per-step fallback flag: a step that terminated with positive reward, or any step info success
        flag = _scalar_bool(info.get('success')) if isinstance(info, dict) and 'success' in info else None
        self._step_success[i] |= bool(flag) or (bool(terminated) and float(_to_np(reward)) > 0)
        if isinstance(info, dict) and bool(_to_np(info.get('rerecord', False))):  # the operator's re-record
            self._open[i] = None
            self._episode_ids[i] += 1
            self.episodes_rerecorded += 1
        elif terminated or truncated:
            ep.success = infer_success(ep.infos, self._step_success[i])
            self._finish(i)

    def _finish(self, i: int) -> None:
        ep, self._open[i] = self._open[i], None
        self._episode_ids[i] += 1
        if self.only_success and not ep.success:
            self.episodes_dropped += 1
            return
        self._bg.submit(ep)

    # -- background writer -----------------------------------------------------------------------
    def _write_episode(self, ep: EpisodeRecord) -> None:  # writer thread
        self.writer.write(ep)
        self.episodes_saved += 1
        self._since_finalize += 1
        if self.finalize_interval and self._since_finalize >= self.finalize_interval:
            self.writer.finalize()
            self._since_finalize = 0

    def _raise_writer_error(self) -> None:
        err = self._bg.take_error()
        if err is not None:
            raise RuntimeError(f'episode writer failed: {err!r}') from err

    def flush(self) -> None:
        """Wait until every finished episode is written."""
        self._bg.join()
        self._raise_writer_error()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._bg.close()
            if self._bg.error is None:
                self.writer.close()
        finally:
            try:
                self.env.close()
            except Exception:  # noqa: BLE001 - the env may already be closed
                pass
        self._raise_writer_error()

    def _install_exit_hooks(self) -> None:
        ref = weakref.ref(self)

        def at_exit() -> None:
            obj = ref()
            if obj is not None and not obj._closed:
                obj.close()
        atexit.register(at_exit)
        # SIGINT already unwinds as KeyboardInterrupt (atexit then runs); a default SIGTERM
        # would kill the process without atexit, so turn it into SystemExit.
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL):
            def on_term(signum, frame):
                raise SystemExit(128 + signum)
            signal.signal(signal.SIGTERM, on_term)

    def _try_show_goal_site(self) -> None:
        target = getattr(self.env, 'unwrapped', self.env)
        for name in ('show_goal_site', 'set_goal_site_visible'):
            fn = getattr(target, name, None)
            if callable(fn):
                try:
                    fn(True)
                except TypeError:
                    fn()
                return


# env node parameter -> CollectEpisode argument; a parameter left out keeps the signature's default
COLLECT_PARAMS = {'export_format': 'export_format', 'fps': 'fps', 'only_success': 'only_success',
                  'finalize_interval': 'finalize_interval', 'lerobot_version': 'lerobot_version',
                  'dataset_naming': 'naming', 'image_storage': 'image_storage', 'camera_names': 'camera_names'}


def collect_episode_kwargs(params: dict) -> dict[str, Any]:
    """CollectEpisode's arguments from an env node's parameters (the node and --in-process share it)."""
    return {arg: (list(params[k]) if isinstance(params[k], (list, tuple)) else params[k])
            for k, arg in COLLECT_PARAMS.items() if k in params}


def env_attr(env: Any, name: str) -> Any:
    """An attribute of the env or of what it wraps (gymnasium wrappers no longer forward them)."""
    if isinstance(env, gym.Env):
        try:
            return env.get_wrapper_attr(name)
        except AttributeError:
            return None
    return getattr(env, name, None)


def _to_np(x: Any) -> Any:
    if hasattr(x, 'detach'):
        return x.detach().cpu().numpy()
    return x


def _row(action: Any, i: int) -> Any:
    a = _to_np(action)
    if isinstance(a, dict):
        return {k: v[i] for k, v in a.items()}
    return np.asarray(a)[i]


__all__ = ['CollectEpisode', 'EpisodeRecord', 'collect_episode_kwargs', 'infer_success']
