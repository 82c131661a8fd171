"""A LeRobot checkpoint on the real robot, the operator able to take over, without `launch`.

franka_env_node (franky; one robot; the operator's device required: nothing moves without it;
an active intervention replaces the policy's action and is flagged) -> policy_node
('lerobot': a ``lerobot-train`` checkpoint, e.g. ACT trained on real_collect's dataset) ->
trajectory_collector_node (rollout) -> replay_buffer_writer_node (``<run>/replay_buffer``);
every episode, failures and interventions included, is also recorded as a LeRobot dataset
under ``<run>/collected_data`` (``complementary_info.is_intervention`` per frame). The run
stops after ``num_episodes`` episodes. The same lifecycle and fail-fast rules as real_collect:
a missing robot, camera, teleop device or checkpoint ends the run before any motion.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from ..data.identity import new_run_id
from ..params.paths import config_path
from . import real_collect as rc

DEFAULT_CONFIG = config_path('real_eval.yaml')


def load_config(path: str | Path) -> dict:
    return yaml.safe_load(Path(path).read_text()) or {}


def check_config(cfg: dict) -> dict:
    from ..policies.lerobot_policy import pretrained_dir
    rc.check_config(cfg)
    if not cfg.get('checkpoint'):
        raise ValueError("checkpoint is required: lerobot-train's .../checkpoints/<N>/pretrained_model (--checkpoint)")
    cfg['checkpoint'] = str(pretrained_dir(cfg['checkpoint']))
    return cfg


def node_params(cfg: dict, run_dir: Path) -> tuple[dict, dict]:
    """real_collect's env, teleop and camera set-up, with the checkpoint acting."""
    dc = {**(cfg.get('data_collection') or {}), 'only_success': False}
    params, extra = rc.node_params({**cfg, 'num_data_episodes': 0, 'demos_dir': str(run_dir / 'replay_buffer'),
                                    'data_collection': dc}, run_dir)
    cams = list((cfg.get('cameras') or {}).keys())
    params['franka_env_node'].update(teleop_only=False, require_teleop=True, target_successes=0, num_steps=0,
                                     target_episodes=int(cfg.get('num_episodes', 10)),
                                     observation='pixels' if cams else 'state')
    if cams:
        params['franka_env_node']['camera_names'] = cams
    params['policy_node'].update(policy='lerobot', checkpoint=cfg['checkpoint'], chunk=int(cfg.get('chunk', 1)),
                                 camera_names=cams or ['front', 'wrist'],
                                 lerobot_python=str(cfg.get('lerobot_python') or ''),
                                 temporal_ensemble_coeff=float(cfg.get('temporal_ensemble_coeff', -1.0)),
                                 image_size=int(cfg.get('image_size', 128)), collect_transitions=True)
    for node in ('franka_env_node', 'trajectory_collector_node', 'replay_buffer_writer_node'):
        params[node]['chunk'] = params['policy_node']['chunk']
    params['trajectory_collector_node'].update(mode='rollout', only_success=False, auto_reset=True, num_shards=1,
                                               run_id=new_run_id(f'{Path(run_dir).name}-'))
    return params, extra


def main(args) -> int:
    def build() -> dict:
        cfg = rc.apply_overrides(load_config(args.config), args.robot_ip, None, args.log_dir,
                                 episodes=None, hid_udp_port=args.hid_udp_port, cameras=args.camera,
                                 camera_driver=args.camera_driver)
        if args.checkpoint:
            cfg['checkpoint'] = args.checkpoint
        if args.eval_episodes:
            cfg['num_episodes'] = int(args.eval_episodes)
        return check_config(cfg)
    cfg = rc.checked('real_eval', build)
    if cfg is None:
        return 2
    run_dir, params, r = rc.run_nodes('real_eval', cfg, node_params, args)
    rate = r['successes'] / r['episodes'] if r['episodes'] else 0.0
    print(f"\n[real_eval] {r['episodes']} episodes, {r['successes']} successful ({rate:.0%}); buffer: "
          f"{run_dir / 'replay_buffer'}, episodes: {run_dir / 'collected_data'}")
    return 1 if r['failed'] else 0
