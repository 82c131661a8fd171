"""Real-robot RLPD with a human in the loop, without `launch` (HIL-SERL's actor and learner as
ROS 2 nodes).

franka_env_node (franky; one robot; the operator's device required: nothing moves without it;
an active intervention replaces the policy's action and is flagged) -> policy_node ('sac': the
learner's actor; waits for the learner's first weights, then never for newer ones) ->
trajectory_collector_node (rollout, whole transitions) -> replay_buffer_writer_node
(``<run>/replay_buffer``) and learner_node (RLPD: every batch half online, half the
real_collect demonstrations plus the intervened steps; weights back to the policy node with
their version). The same lifecycle and fail-fast rules as ``real_collect``: a missing robot,
camera or teleop device ends the run before any motion. ``observation: pixels`` (the shipped
default): the policy and the learner see the cameras through ``image_encoder`` (keypoints:
pretrained on the demonstrations' frames, then frozen).
"""
from __future__ import annotations

from pathlib import Path

import yaml

from ..data.identity import new_run_id
from ..params.paths import config_path
from ..params.defaults import ENV, RLPD, SAC
from . import real_collect as rc

DEFAULT_CONFIG = config_path('real_train.yaml')
WAIT_FOR_FIRST_WEIGHTS = 1 << 30  # max_version_lag: answer nothing before the learner's first weights


def load_config(path: str | Path) -> dict:
    return yaml.safe_load(Path(path).read_text()) or {}


def check_config(cfg: dict) -> dict:
    rc.check_config(cfg)
    demos = cfg.get('demos_dir') or ''
    if not demos:
        raise ValueError('demos_dir is required: a real_collect demos/ directory (--demos-dir)')
    if not (Path(demos) / 'trajectory_index.json').exists():
        raise ValueError(f'demos_dir {demos}: no trajectory_index.json (record demonstrations with real_collect)')
    if cfg.get('observation', 'pixels') not in ('state', 'pixels'):
        raise ValueError(f"observation must be 'state' or 'pixels', got {cfg.get('observation')!r}")
    if cfg.get('observation', 'pixels') == 'pixels' and not cfg.get('cameras'):
        raise ValueError("observation 'pixels' needs cameras (name: driver topic, e.g. --camera "
                         'front=/camera/front/color/image_raw); or set observation: state')
    return cfg


def node_params(cfg: dict, run_dir: Path) -> tuple[dict, dict]:
    """real_collect's env, teleop and camera set-up, with the policy acting and the learner training."""
    from .sim_train import learner_params
    collect_cfg = {**cfg, 'num_data_episodes': 0, 'demos_dir': str(run_dir / 'replay_buffer'),
                   'data_collection': {'enabled': False}}
    params, extra = rc.node_params(collect_cfg, run_dir)
    action_dim = params['franka_env_node']['action_dim']
    params['franka_env_node'].update(teleop_only=False, require_teleop=True, target_successes=0,
                                     num_steps=int(cfg.get('num_steps', 0)))  # steps of chunks_per_epoch (10) chunks
    lc = dict(cfg.get('learner') or {})
    shared = {'gamma': float(lc.pop('gamma', RLPD.gamma)),
              'sac_action_scale': [1.0] * action_dim}
    lag = int(cfg.get('max_version_lag', -1))
    params['policy_node'].update(policy='sac', hidden=int(lc.get('hidden', SAC.hidden)),
                                 collect_transitions=True,
                                 max_version_lag=lag if lag >= 0 else WAIT_FOR_FIRST_WEIGHTS,
                                 sac_action_scale=shared['sac_action_scale'])
    params['trajectory_collector_node'].update(mode='rollout', only_success=False, auto_reset=True,
                                               num_shards=1, gamma=shared['gamma'],
                                               run_id=new_run_id(f'{Path(run_dir).name}-'))
    pixels = cfg.get('observation', 'pixels') == 'pixels'
    vision = {'use_images': pixels, 'image_encoder': str(cfg.get('image_encoder', 'keypoints')),
              'camera_names': list(cfg.get('cameras') or {}) or ENV.camera_names}
    params['franka_env_node'].update(observation='pixels' if pixels else 'state')
    params['policy_node'].update(vision)
    learner = {'algorithm': 'rlpd', 'demos_dir': str(Path(cfg['demos_dir']).resolve()), 'state_dim': 21,
               **vision, **shared, **lc}
    params['learner_node'] = learner_params(params, learner, run_dir)
    extra['learner'] = ('learner_node', [])
    return params, extra


def main(args) -> int:
    def build() -> dict:
        cfg = rc.apply_overrides(load_config(args.config), args.robot_ip, args.demos_dir, args.log_dir,
                                 hid_udp_port=args.hid_udp_port, cameras=args.camera, camera_driver=args.camera_driver)
        if args.steps:
            cfg['num_steps'] = int(args.steps)
        if getattr(args, 'observation', None):
            cfg['observation'] = args.observation
        return check_config(cfg)
    cfg = rc.checked('real_train', build)
    if cfg is None:
        return 2
    run_dir, params, r = rc.run_nodes('real_train', cfg, node_params, args)
    from .sim_train import draw_learning_curve, read_metrics
    metrics = read_metrics(run_dir)
    draw_learning_curve(run_dir)
    print(f"\n[real_train] {r['episodes']} episodes, {r['successes']} successful, {len(metrics)} weight versions; "
          f"buffer: {run_dir / 'replay_buffer'}, metrics: {run_dir / 'metrics.jsonl'}")
    return 1 if r['failed'] else 0
