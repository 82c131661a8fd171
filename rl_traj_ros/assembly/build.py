"""Parameters in, a run's objects out: the one place where a node's parameters (``params/``)
become its core objects, for the ROS nodes and the in-process run alike.

Each factory resolves what it is given against the node's spec (the defaults of the selected
algorithm or policy included) and builds: the policy node's ``PolicyWorker``
(``make_policy_worker``), the learner node's PPO or RLPD learner (``make_learner``), the
collector node's ``TrajectoryPlan`` (``make_plan``), the writer node's buffer
(``make_buffer``) and the env node's ``RolloutConfig`` (``rollout_config``).
"""
from __future__ import annotations

import math
import os
import time
from typing import Callable, Optional

import torch

from ..collect.collector import TrajectoryPlan
from ..collect.steps import CollectConfig
from ..data.schema import RewardConfig
from ..params.collector_node import COLLECTOR_NODE
from ..params.env_node import ENV_NODE
from ..params.learner_node import LEARNER_NODE
from ..params.policy_node import POLICY_NODE
from ..params.spec import resolve
from ..params.writer_node import WRITER_NODE
from ..policies.actor_critic import ActorCritic
from ..policies.sac import CriticEnsemble, SquashedGaussianActor, action_scale
from ..policies.scripted import PickCubeExpert
from ..rollout.workers import PolicyWorker, RolloutConfig
from ..storage.files import TrajectoryFiles
from ..storage.replay_buffer import TrajectoryReplayBuffer


POLICIES = ('expert', 'mlp', 'sac', 'zero', 'lerobot')


def set_torch_threads(n: int) -> int:
    """``torch_threads`` (0: the cores less one, at least 1) for this process; what was set."""
    n = int(n) or max(1, (os.cpu_count() or 1) - 1)
    torch.set_num_threads(n)
    return n


def make_policy_worker(params: dict) -> PolicyWorker:
    """The policy node's worker from its parameters (the node and the in-process run share it;
    what ``params`` leaves out takes the node's default from its spec)."""
    pp = resolve(POLICY_NODE, params)
    if pp['chunk'] < 1 or pp['action_dim'] < 1:
        raise ValueError('chunk and action_dim must be >= 1')
    set_torch_threads(pp['torch_threads'])
    if pp['policy'] not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(map(repr, POLICIES))}, got {pp['policy']!r}")
    device = pp['device']
    if pp['policy'] == 'lerobot':  # the checkpoint runs in LeRobot's own process, on its own device
        from ..policies.lerobot_policy import LeRobotPolicy
        if not pp['checkpoint']:
            raise ValueError("policy 'lerobot' needs checkpoint: lerobot-train's .../checkpoints/<N>/pretrained_model")
        model = LeRobotPolicy(pp['checkpoint'], pp['chunk'], pp['action_dim'], pp['camera_names'],
                              pp['lerobot_python'], device, pp['temporal_ensemble_coeff'], pp['seed'])
        return PolicyWorker(model, None, pp['seed'], pp['collect_transitions'], pp['model_version'])
    if device.startswith('cuda') and not torch.cuda.is_available():
        raise ValueError(f'device {device!r} requested but CUDA is not available')
    if pp['policy'] == 'sac':
        model = sac_actor(pp)
    else:
        model = ActorCritic(pp['state_dim'], pp['action_dim'], pp['chunk'], pp['hidden'], pp['use_images'],
                            pp['image_size'], seed=pp['seed'])
    if pp['weights']:
        model.load_weights(pp['weights'])
    expert = None
    if pp['policy'] == 'expert':
        expert = PickCubeExpert(noise=pp['expert_noise'], seed=pp['seed'])
    elif pp['policy'] == 'zero':
        expert = 'zero'
    return PolicyWorker(model.to(device).eval(), expert, pp['seed'], pp['collect_transitions'], pp['model_version'])


def sac_actor(p: dict) -> SquashedGaussianActor:
    """The RLPD actor the policy node samples and the learner trains: the same parameters and
    seed give the same version-0 model on both sides."""
    return SquashedGaussianActor(p['state_dim'], p['action_dim'], p['chunk'], p['hidden'],
                                 action_scale(p['sac_action_scale'], p['action_dim']), p['use_images'], seed=p['seed'],
                                 image_encoder=p['image_encoder'], cameras=len(p['camera_names']))


def make_learner(params: dict, all_reduce: Optional[Callable[[list], None]] = None):
    """The learner node's learner from its parameters (the node and the in-process run share
    it): ``algorithm`` 'ppo' (``learning.ppo_learner.PPOLearner``: the policy node's actor-critic at the
    same seed, so version 0 is the same model; PPO and the step's shape; ``num_actors`` > 1:
    this rank's share of the rows) or 'rlpd' (``learning.rlpd_learner.RLPDLearner``)."""
    from ..learning.ppo_learner import PPOLearner, PPOLearnerConfig
    from ..learning.ppo import PPOConfig
    p = resolve(LEARNER_NODE, params)
    set_torch_threads(p['torch_threads'])
    if p['algorithm'] == 'rlpd':
        return make_offpolicy_learner(p)
    if p['algorithm'] != 'ppo':
        raise ValueError(f"algorithm must be 'ppo' or 'rlpd', got {p['algorithm']!r}")
    ranks, rank = int(p['num_actors']), int(p['actor_rank'])
    rows = int(p['num_envs']) * int(p['num_env_nodes'])
    if ranks < 1 or rows % ranks or not 0 <= rank < ranks:
        raise ValueError(f'num_actors {ranks} must divide the {rows} env rows and actor_rank {rank} be in '
                         f'[0, {ranks})')
    model = ActorCritic(p['state_dim'], p['action_dim'], p['chunk'], p['hidden'], seed=p['seed'])
    ppo = PPOConfig(clip_ratio=p['clip_ratio'], value_clip=p['value_clip'], entropy_coef=p['entropy_coef'],
                    value_coef=p['value_coef'], epochs=p['ppo_epochs'], minibatch_size=p['minibatch_size'],
                    max_grad_norm=p['max_grad_norm'], target_kl=p['target_kl'], critic_warmup=p['critic_warmup'],
                    lr=p['lr'], normalize_advantages=p['normalize_advantages'])
    cfg = PPOLearnerConfig(rows // ranks, p['action_dim'], p['gamma'], p['gae_lambda'], p['advantage'], p['auto_reset'],
                           p['max_version_lag'], p['num_epochs'] * p['chunks_per_epoch'], rank if ranks > 1 else -1,
                           p['run_id'], p['normalize_rewards'])
    return PPOLearner(model, ppo, cfg, all_reduce=all_reduce, seed=p['seed'])


def make_offpolicy_learner(p: dict):
    from ..learning.rlpd_learner import RLPDLearner, RLPDLearnerConfig, load_demos
    from ..learning.rlpd import RLPDConfig, RLPDUpdater
    if p['num_actors'] > 1:
        raise ValueError('algorithm rlpd runs one learner (num_actors 1)')
    cfg = RLPDConfig(batch_size=p['batch_size'], gamma=p['gamma'], tau=p['tau'], actor_lr=p['lr'], critic_lr=p['lr'],
                     temperature_lr=p['lr'], init_temperature=p['init_temperature'],
                     target_entropy=None if math.isnan(p['target_entropy']) else p['target_entropy'],
                     num_critics=p['num_critics'],
                     critic_subsample=p['critic_subsample'], critic_actor_ratio=p['critic_actor_ratio'],
                     backup_entropy=p['backup_entropy'], grad_clip=p['max_grad_norm'])
    critics = CriticEnsemble(p['state_dim'], p['action_dim'], p['chunk'], cfg.num_critics, p['hidden'],
                             p['use_images'], seed=p['seed'], image_encoder=p['image_encoder'],
                             cameras=len(p['camera_names']))
    updater = RLPDUpdater(sac_actor(p), critics, cfg, seed=p['seed'])
    demos = load_demos(p['demos_dir'], p['seed'], len(p['camera_names']) if p['use_images'] else 0) \
        if p['demos_dir'] else None
    return RLPDLearner(updater, RLPDLearnerConfig(
        utd_ratio=p['utd_ratio'], online_ratio=p['online_ratio'], min_online_steps=p['min_online_steps'],
        publish_every=p['publish_every'], publish_period_s=p['publish_period_s'], online_window=p['online_window'],
        normalize_states=p['normalize_states'], prioritized_replay=p['prioritized_replay'],
        priority_alpha=p['priority_alpha'], priority_beta=p['priority_beta'],
        encoder_pretrain_epochs=p['encoder_pretrain_epochs'], success_ends_episode=p['success_ends_episode'],
        run_id=p['run_id']), demos, seed=p['seed'])


def make_plan(params: dict) -> TrajectoryPlan:
    """The collector node's TrajectoryPlan from its parameters (the node and the in-process run
    share it, so both build the same outputs from the same YAML)."""
    pc = resolve(COLLECTOR_NODE, params)
    ranks = list(pc['env_ranks'])
    if not ranks:
        raise ValueError('env_ranks must name at least one source')
    return TrajectoryPlan(
        mode=pc['mode'], num_epochs=pc['num_epochs'], chunks_per_epoch=pc['chunks_per_epoch'],
        sources=[(r, 0) for r in ranks], envs_per_source=pc['num_envs'],
        collect=CollectConfig(RewardConfig(auto_reset=pc['auto_reset'], gamma=pc['gamma']),
                              collect_transitions=pc['collect_transitions']),
        num_shards=pc['num_shards'], num_actors=pc['num_actors'], micro_batch_size=pc['micro_batch_size'],
        shuffle_micro_batches=pc['shuffle_micro_batches'], normalize_advantages=pc['normalize_advantages'],
        gamma=pc['gamma'], gae_lambda=pc['gae_lambda'], seed=pc['seed'], only_success=pc['only_success'],
        success_reward=pc['success_reward'])


def make_buffer(params: dict, output_dir: Optional[str] = None) -> TrajectoryReplayBuffer:
    """The writer node's buffer from its parameters (``output_dir`` overrides the parameter's):
    durable files, its cache, window and bound on queued writes."""
    p = resolve(WRITER_NODE, params)
    return TrajectoryReplayBuffer(seed=p['seed'], cache_size=p['cache_size'], sample_window_size=p['sample_window_size'],
                                  storage=TrajectoryFiles(str(output_dir or p['output_dir']), p['trajectory_format']),
                                  max_pending_writes=p['max_pending_writes'])


def rollout_config(params: dict, env_rank: Optional[int] = None) -> RolloutConfig:
    """The env node's rollout settings from its parameters (``env_rank`` overrides the parameter's)."""
    p = resolve(ENV_NODE, params)
    if p['env_type'] == 'franky' and p['num_envs'] != 1:
        raise ValueError(f"env_type franky drives one robot: num_envs must be 1, got {p['num_envs']}")
    if p['env_type'] == 'franky' and p['action_dim'] != (6 if p['no_gripper'] else 7):
        raise ValueError(f"action_dim must be {6 if p['no_gripper'] else 7} with no_gripper={p['no_gripper']}")
    if env_rank is not None:
        p = p.replace(env_rank=env_rank)
    return RolloutConfig(**{k: p[k] for k in RolloutConfig.__dataclass_fields__})


def make_env(p: dict, frames=None, labels=None):
    """The env node's env from its parameters: the sim (``sim_franka``) or one franky robot with
    the cameras' ``frames`` (``envs.cameras.CameraFrames``), its reward from ``reward_source`` and
    the operator's ``labels`` (``rewards.events.EpisodeLabels``), wrapped by CollectEpisode when it
    records episodes. Made in the thread that steps it (an EGL context is bound to its thread)."""
    if p['env_type'] == 'franky':
        from ..envs.batched import BatchedEnv
        from ..envs.franky_env import FrankaFrankyEnv
        if p['observation'] == 'pixels' and frames is None:
            raise ValueError("observation 'pixels' needs camera_topics: the policy would act without seeing")
        target = list(p['target_ee_pose']) if p['reward_source'] == 'env' else []   # else no pose success
        robots = [FrankaFrankyEnv(p['robot_ip'], target, tuple(p['action_scale']),
                                  p['no_gripper'], p['pos_tolerance'], p['rot_tolerance'], p['success_hold_steps'],
                                  workspace_min=list(p['workspace_min']), workspace_max=list(p['workspace_max']),
                                  max_step_m=p['max_step_m'], control_dt=p['control_dt'],
                                  max_episode_steps=p['max_episode_steps'], connect_timeout_s=p['connect_timeout_s'],
                                  cameras=frames.observation if frames else None,
                                  num_cameras=len(frames.cameras) if frames else 0, image_size=p['image_size'])]
        env = BatchedEnv(robots, lambda i, raw: raw, p['task_description'], p['seed'])
    elif p['env_type'] == 'sim':
        from ..envs.sim_franka import sim_env_from_params
        env = sim_env_from_params(p, p['env_rank'])
    else:
        raise ValueError(f"env_type must be 'sim' or 'franky', got {p['env_type']!r}")
    try:
        env.step_reward = step_reward(p, [c.name for c in frames.cameras] if frames else p['camera_names'], labels)
    except Exception:
        env.close()
        raise
    if p['collect_episodes']:
        from ..episodes import CollectEpisode, collect_episode_kwargs
        try:
            env = CollectEpisode(env, f"{p['collect_dir']}/env_{p['env_rank']}", rank=p['env_rank'],
                                 num_envs=p['num_envs'], **collect_episode_kwargs(p))
        except Exception:
            env.close()  # here, in its own (EGL) thread, not in a destructor after EGL is gone
            raise
    return env


def step_reward(p: dict, cameras: list, labels=None):
    """The env's ``rewards.step_reward.StepReward`` from ``reward_source`` (None: the env's own
    reward, no label source and no steps after a success: nothing to decide)."""
    from ..rewards.step_reward import StepReward
    delay = p['sim_operator_delay']
    if delay >= 0:
        if p['env_type'] != 'sim':
            raise ValueError("sim_operator_delay is the sim's scripted operator: a real cell's labels come from its "
                             'operator (set it to -1)')
        if labels is None:   # a run without ROS (sim_collect --in-process): the operator's label path all the same
            from ..rewards.events import EpisodeLabels
            labels = EpisodeLabels(p['num_envs'], lambda: True, time.time_ns)
    if p['reward_source'] == 'env' and labels is None and not p['steps_after_success']:
        return None
    classifier, threshold = None, p['reward_threshold']
    if p['reward_source'] == 'classifier' and p['reward_classifier']:
        from ..rewards.classifier import load
        classifier, meta = load(p['reward_classifier'])
        threshold = meta['threshold'] if math.isnan(threshold) else threshold
    return StepReward(p['reward_source'], p['num_envs'], labels, classifier, threshold, p['reward_hold'], cameras,
                      p['image_size'], p['steps_after_success'], delay)


def joint_positions(env) -> list[int]:
    """Where the arm's joint positions are in the env's states (its ``state_names``: ``*joint<i>.pos``)."""
    from ..episodes.collect_episode import env_attr
    names = env_attr(env, 'state_names') or []
    return [i for i, n in enumerate(names) if n.split('.')[0].rstrip('1234567').endswith('joint') and n.endswith('.pos')]


def join_learner_ranks(p: dict, log: Callable[[str], None]) -> None:
    """``num_actors`` > 1 learners: this rank joins the others (torch.distributed, ``dist_backend``
    gloo on CPU or nccl, rendezvous at ``dist_init``) to all-reduce gradients."""
    if p['num_actors'] > 1:
        import torch.distributed as dist
        log(f"rank {p['actor_rank']} of {p['num_actors']}: joining {p['dist_init']} ({p['dist_backend']})")
        dist.init_process_group(p['dist_backend'], init_method=p['dist_init'], rank=p['actor_rank'],
                                world_size=p['num_actors'])


def leave_learner_ranks() -> None:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
