"""Real-robot demonstration collection without `launch` (spec: DataCollector, as ROS 2 nodes).

franka_env_node (franky; one robot; every step executes the teleop action, flags all 1) ->
policy_node ('zero': the operator drives) -> trajectory_collector_node (lerobot mode: finished
episodes, only successes, i.e. done with reward >= 0.5) -> replay_buffer_writer_node (pt,
auto-save, appending) under ``logs/{timestamp}/demos``; with ``data_collection.enabled`` the
env node also records the episodes with CollectEpisode under ``logs/{timestamp}/collected_data``.
The teleop node is the SpaceMouse or the GELLO one. The run stops after
``num_data_episodes`` successful episodes.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Optional

import yaml

from ..data.identity import new_run_id
from ..params.defaults import ENV
from ..params.paths import config_path
from . import sim_collect as sc
from .run_dir import new_run_dir

DEFAULT_CONFIG = config_path('real_collect.yaml')
# camera driver packages and the executable ``ros2 run`` starts for each
CAMERA_DRIVERS = {'realsense2_camera': 'realsense2_camera_node', 'usb_cam': 'usb_cam_node_exe',
                  'v4l2_camera': 'v4l2_camera_node'}


def load_config(path: str | Path) -> dict:
    """The config file, checked as far as it goes alone (the command line and launch arguments may
    still add cameras: the reward's checks run on the final config, ``check_config``)."""
    cfg = yaml.safe_load(Path(path).read_text()) or {}
    check_teleop_and_cameras(cfg)
    return cfg


def check_config(cfg: dict) -> dict:
    """Rejects what cannot run; also for a config changed after loading (launch arguments)."""
    check_teleop_and_cameras(cfg)
    check_reward(cfg)
    return cfg


def check_teleop_and_cameras(cfg: dict) -> None:
    if cfg.get('use_spacemouse') and cfg.get('use_gello'):
        raise ValueError('use_spacemouse and use_gello are mutually exclusive')
    if not cfg.get('use_spacemouse') and not cfg.get('use_gello'):
        raise ValueError('enable one teleop device: use_spacemouse or use_gello')
    cams = cfg.get('cameras') or {}
    if not isinstance(cams, dict) or not all(isinstance(t, str) and t for t in cams.values()):
        raise ValueError(f'cameras must map camera names to driver topics, got {cams!r}')
    camera_driver(cfg)


def check_reward(cfg: dict) -> None:
    """What gives the reward can work on this cell, before anything starts: a task without a pose
    target needs the classifier or the operator; the classifier's checkpoint loads (weights only)
    and was trained on this run's cameras at its image size (both named when not)."""
    from ..rewards.step_reward import REWARD_SOURCES
    source = cfg.get('reward_source') or ENV.reward_source
    if source not in REWARD_SOURCES:
        raise ValueError(f'reward_source must be one of {", ".join(REWARD_SOURCES)}, got {source!r}')
    if source == 'env' and not cfg.get('target_ee_pose'):
        raise ValueError('the task has no target_ee_pose, so the env gives no reward: set reward_source: classifier '
                         'with reward_classifier (run train_reward), or reward_source: operator')
    if source == 'classifier':
        if not cfg.get('reward_classifier'):
            raise ValueError('reward_source classifier needs reward_classifier: the success_classifier.pt that '
                             'run train_reward wrote from labeled real_collect runs')
        if not cfg.get('cameras'):
            raise ValueError('reward_source classifier needs the cameras it was trained on (cameras, or --camera '
                             'NAME=TOPIC): the classifier sees nothing else')
        from ..rewards.classifier import load
        model, _ = load(cfg['reward_classifier'])
        model.check_matches(list(cfg.get('cameras') or {}), int(cfg.get('image_size') or ENV.image_size))


def camera_driver(cfg: dict) -> Optional[str]:
    """``PKG/EXECUTABLE`` of the camera driver to start, or None."""
    d = (cfg.get('camera_driver') or '').strip()
    if not d:
        return None
    if '/' in d:
        return d
    if d not in CAMERA_DRIVERS:
        raise ValueError(f'camera_driver {d!r}: give PKG/EXECUTABLE, or one of {sorted(CAMERA_DRIVERS)}')
    return f'{d}/{CAMERA_DRIVERS[d]}'


def node_params(cfg: dict, run_dir: Path) -> tuple[dict, dict]:
    """Per-node parameters and the teleop node (name -> (module, ros args))."""
    dc = cfg.get('data_collection', {}) or {}
    action_dim = 6 if cfg.get('no_gripper') else 7
    common = {'topic_prefix': '/rl_traj', 'num_envs': 1, 'chunk': 1, 'action_dim': action_dim, 'num_epochs': 1,
              'chunks_per_epoch': 10, 'seed': 0}
    demos = Path(cfg['demos_dir']) if cfg.get('demos_dir') else run_dir / 'demos'
    start_step = next_step_id(demos)
    params = {
        'franka_env_node': {**common, 'env_type': 'franky', 'robot_ip': cfg['robot_ip'],
                            **({'target_ee_pose': [float(x) for x in cfg['target_ee_pose']]}  # (a ROS parameter
                               if cfg.get('target_ee_pose') else {}),                    # cannot be [])
                            'reward_source': str(cfg.get('reward_source') or ENV.reward_source),
                            'reward_classifier': str(cfg.get('reward_classifier') or ''),
                            'reward_hold': int(cfg.get('reward_hold') or ENV.reward_hold),
                            'steps_after_success': int(cfg.get('steps_after_success') or ENV.steps_after_success),
                            'pos_tolerance': float(cfg.get('pos_tolerance', 0.02)),
                            'rot_tolerance': float(cfg.get('rot_tolerance', 0.25)),
                            'success_hold_steps': int(cfg['success_hold_steps']),
                            'action_scale': [float(x) for x in cfg.get('action_scale', [0.05, 0.2])],
                            'no_gripper': bool(cfg.get('no_gripper', False)), 'teleop_only': True,
                            'require_teleop': True,
                            'num_steps': 0, 'start_step': start_step,
                            'target_successes': int(cfg['num_data_episodes']),
                            'max_episode_steps': int(cfg.get('max_episode_steps', 300)),
                            'task_description': str(cfg.get('record_task_description', '')),
                            'intervention_timeout_s': 0.5, 'camera_topic_rate_hz': 0.0,
                            'camera_topics': [f'{n}={t}' for n, t in (cfg.get('cameras') or {}).items()] or [''],
                            'camera_sync_tolerance_s': float(cfg.get('camera_sync_tolerance_s', 0.1)),
                            'image_size': int(cfg.get('image_size', 128)),
                            'collect_episodes': bool(dc.get('enabled', False)),
                            'collect_dir': str(run_dir / 'collected_data'),
                            'export_format': dc.get('export_format', 'lerobot'),
                            'only_success': bool(dc.get('only_success', True)), 'fps': int(dc.get('fps', 10)),
                            'finalize_interval': 1,
                            **{k: dc[k] for k in ('dataset_naming', 'image_storage', 'camera_names') if k in dc}},
        'policy_node': {**common, 'policy': 'zero', 'state_dim': 21, 'hidden': 64, 'use_images': False,
                        'weights': '', 'collect_transitions': True},
        'trajectory_collector_node': {**common, 'mode': 'lerobot', 'env_ranks': [0], 'only_success': True,
                                      'success_reward': 0.5, 'collect_transitions': True,  # whole transitions
                                      'run_id': new_run_id(f'{Path(run_dir).name}-')},
        'replay_buffer_writer_node': {**common, 'output_dir': str(demos), 'trajectory_format': 'pt',
                                      'cache_size': 5, 'sample_window_size': 0},
    }
    if cfg.get('use_spacemouse'):
        sm = {'no_gripper': bool(cfg.get('no_gripper', False)), **(cfg.get('spacemouse') or {})}
        teleop = {'spacemouse': ('spacemouse_teleop_node', _ros_args(sm))}
    else:
        gl = {'port': cfg['gello_port'], 'no_gripper': bool(cfg.get('no_gripper', False)),
              'pos_scale': float(cfg.get('action_scale', [0.05, 0.2])[0]),
              'rot_scale': float(cfg.get('action_scale', [0.05, 0.2])[1]),
              'follower_joint_states': '/env_0/joint_states', **(cfg.get('gello') or {})}
        teleop = {'gello': ('gello_teleop_node', _ros_args(gl))}
    driver = camera_driver(cfg)
    if driver:  # extra nodes: (node module | PKG/EXECUTABLE, ROS arguments)
        teleop['camera_driver'] = (driver, [str(a) for a in cfg.get('camera_driver_args') or []])
    return params, teleop


def next_step_id(demos: Path) -> int:
    """Appending to existing demos: continue after their highest step_id, so chunk keys stay
    unique across runs in one demos directory (runs are also kept apart by their run_id)."""
    index = demos / 'trajectory_index.json'
    if not index.exists():
        return 0
    data = yaml.safe_load(index.read_text())  # JSON is YAML
    steps = [k[0] for e in data['trajectories'].values() for k in e.get('keys', [])]
    return max(steps) + 1 if steps else 0


def _ros_args(values: dict) -> list[str]:
    out = []
    for k, v in values.items():
        out += ['-p', f'{k}:={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()}']
    return out


def apply_overrides(cfg: dict, robot_ip: Optional[str] = None, demos_dir: Optional[str] = None,
                    log_dir: Optional[str] = None, gello_port: Optional[str] = None, episodes: Optional[int] = None,
                    hid_udp_port: Optional[int] = None, teleop: Optional[str] = None,
                    image_storage: Optional[str] = None, cameras: Optional[list[str]] = None,
                    camera_driver: Optional[str] = None) -> dict:
    """The CLI's options and the launch file's arguments, one mapping onto the spec keys (an
    empty / None value keeps the file's)."""
    if teleop:
        if teleop not in ('spacemouse', 'gello'):
            raise ValueError(f"teleop must be 'spacemouse' or 'gello', got {teleop!r}")
        cfg['use_spacemouse'], cfg['use_gello'] = teleop == 'spacemouse', teleop == 'gello'
    for key, value in (('robot_ip', robot_ip), ('demos_dir', demos_dir), ('log_dir', log_dir),
                       ('gello_port', gello_port)):
        if value:
            cfg[key] = value
    if episodes:
        cfg['num_data_episodes'] = int(episodes)
    if hid_udp_port:
        cfg.setdefault('spacemouse', {})['hid_udp_port'] = int(hid_udp_port)
    if image_storage:
        cfg.setdefault('data_collection', {})['image_storage'] = image_storage
    cameras = [c.strip() for c in cameras or [] if c.strip()]
    if cameras:
        bad = [c for c in cameras if '=' not in c]
        if bad:
            raise ValueError(f'camera {bad[0]!r}: write NAME=TOPIC, e.g. front=/camera/camera/color/image_raw')
        cfg['cameras'] = dict(c.split('=', 1) for c in cameras)
    if camera_driver:
        cfg['camera_driver'] = camera_driver
    return cfg


def checked(pipeline: str, build: Callable[[], dict]) -> Optional[dict]:
    """The run's config, or None once the reason is printed: everything the command line or the
    config gets wrong (a camera driver that is not installed too) is refused before anything starts."""
    try:
        cfg = build()
        driver = camera_driver(cfg)
        if driver:
            from .ros_run import installed_executable
            installed_executable(*driver.split('/', 1))
        return cfg
    except (ValueError, FileNotFoundError) as e:
        print(f'[{pipeline}] refused: {e}', file=sys.stderr)
        return None


def run_nodes(pipeline: str, cfg: dict, make_params: Callable, args) -> tuple[Path, dict, dict]:
    """A fresh run directory (printed, absolute), then the nodes until the env node is done; a
    node that failed is named with its exit code (a negative one: the signal that ended it).
    ``args``: the CLI's quiet, run_id and secret_file."""
    from .ros_run import adopt_identity
    run_dir = new_run_dir(cfg.get('log_dir', 'logs')).resolve()
    params, extra = make_params(cfg, run_dir)
    print(f'[{pipeline}] output: {run_dir}', flush=True)
    r = sc.run_ros(adopt_identity(params, args.run_id, args.secret_file), 1, str(run_dir), extra_nodes=extra,
                   quiet=args.quiet)
    if r['failed']:
        codes = {n: r['exit_codes'][n] for n in r['failed']}
        print(f"[{pipeline}] FAILED nodes (exit codes): {codes}; their logs: {run_dir / 'node_logs'}", flush=True)
    return run_dir, params, r


def main(args) -> int:
    cfg = checked('real_collect', lambda: check_config(apply_overrides(
        load_config(args.config), args.robot_ip, args.demos_dir, args.log_dir, episodes=args.episodes,
        hid_udp_port=args.hid_udp_port, image_storage=args.image_storage, cameras=args.camera,
        camera_driver=args.camera_driver)))
    if cfg is None:
        return 2
    run_dir, params, r = run_nodes('real_collect', cfg, node_params, args)
    print(f"\n[real_collect] {r['episodes']} episodes, {r['successes']} successful; demos: "
          f"{params['replay_buffer_writer_node']['output_dir']}")
    if params['franka_env_node']['collect_episodes']:
        print(f"[real_collect] {params['franka_env_node']['export_format']} episodes: {run_dir / 'collected_data'}")
    return 0 if r['successes'] >= cfg['num_data_episodes'] and not r['failed'] else 1
