"""`rl-traj-ros`: run the project's pipelines without `launch` (same nodes, same YAML)."""
from __future__ import annotations

import argparse
import sys


# What each ``run`` pipeline reads of the options; another one given is refused, named, instead
# of silently ignored (test_cli_options.py checks the table against each pipeline's code).
PIPELINE_OPTIONS = {
    'sim_collect': {'config', 'num_env_nodes', 'num_envs', 'episodes', 'steps', 'output_dir', 'policy', 'observation',
                    'image_obs', 'image_storage', 'in_process', 'checkpoint', 'eval_episodes', 'quiet', 'run_id',
                    'secret_file'},
    'sim_train': {'config', 'num_env_nodes', 'num_envs', 'steps', 'output_dir', 'in_process', 'algo', 'demos_dir',
                  'num_learners', 'eval_episodes', 'warm_start', 'quiet', 'run_id', 'secret_file'},
    'sim_eval': {'config', 'algo', 'checkpoint', 'eval_episodes', 'output_dir'},
    'real_collect': {'config', 'robot_ip', 'demos_dir', 'log_dir', 'episodes', 'hid_udp_port', 'image_storage',
                     'camera', 'camera_driver', 'quiet', 'run_id', 'secret_file'},
    'real_train': {'config', 'robot_ip', 'demos_dir', 'log_dir', 'steps', 'observation', 'hid_udp_port', 'camera',
                   'camera_driver', 'quiet', 'run_id', 'secret_file'},
    'train_reward': {'config', 'demos', 'output_dir'},
    'real_eval': {'config', 'robot_ip', 'log_dir', 'checkpoint', 'eval_episodes', 'hid_udp_port', 'camera',
                  'camera_driver', 'quiet', 'run_id', 'secret_file'},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='rl-traj-ros', description=__doc__)
    sub = parser.add_subparsers(dest='command', required=True)
    smoke = sub.add_parser('smoke', help='publish every message type to an echo process and verify it')
    smoke.add_argument('--envs', type=int, default=8)
    smoke.add_argument('--image-size', type=int, default=128)
    run = sub.add_parser('run', help='run a pipeline without launch (same nodes, same YAML)')
    run.add_argument('pipeline', choices=['sim_collect', 'sim_train', 'sim_eval', 'real_collect', 'real_train',
                                                'real_eval', 'train_reward'])
    run.add_argument('--config', default=None, help='params YAML (default: config/sim_collect.yaml)')
    run.add_argument('--num-env-nodes', type=int, default=1)
    run.add_argument('--num-envs', type=int, default=None, help='envs per env node')
    run.add_argument('--episodes', type=int, default=None, help='successful episodes to collect (total)')
    run.add_argument('--steps', type=int, default=None, help='training steps per env node')
    run.add_argument('--output-dir', default=None,
                     help='sim_collect: default outputs/sim_collect/<timestamp>/ (+ a "latest" link), new every run')
    run.add_argument('--policy', choices=['expert', 'mlp', 'lerobot'], default=None,
                     help="sim_collect: the policy node's policy; 'lerobot' evaluates --checkpoint (a lerobot-train "
                          'pretrained_model) on held-out state ids')
    run.add_argument('--observation', choices=['state', 'pixels'], default=None,
                     help="sim_collect: 'pixels' = proprioception + cameras, no cube position (default: the YAML's; "
                          "with --policy lerobot: what the checkpoint was trained on)")
    run.add_argument('--image-obs', dest='image_obs', action='store_true', default=None)
    run.add_argument('--no-images', dest='image_obs', action='store_false')
    run.add_argument('--image-storage', choices=['png', 'video'], default=None,
                     help="LeRobot camera streams: 'png' (lossless) or 'video' (MP4, AV1 as lerobot encodes it)")
    run.add_argument('--in-process', action='store_true', help='same pipeline in one process, without ROS')
    run.add_argument('--robot-ip', default=None, help='real_collect: robot (or franky-sim) address')
    run.add_argument('--demos-dir', default=None, help='real_collect: append to this demos directory; '
                     'sim_train --algo rlpd: the demonstrations of the demo half of every batch')
    run.add_argument('--demos', nargs='+', default=None, metavar='DIR',
                     help='train_reward: recorded runs (LeRobot datasets) with success labels')
    run.add_argument('--algo', choices=['ppo', 'rlpd'], default=None,
                     help='sim_train: the learner (default: the config\'s; rlpd: config/sim_train_rlpd.yaml)')
    run.add_argument('--log-dir', default=None, help='real_collect: logs/{timestamp}/ goes here')
    run.add_argument('--hid-udp-port', type=int, default=0, help='real_collect: SpaceMouse reports from UDP')
    run.add_argument('--camera', action='append', default=None, metavar='NAME=TOPIC',
                     help='real_collect: a camera driver topic (sensor_msgs/Image; .../compressed: CompressedImage); '
                          'repeat per camera, main camera first; replaces the config\'s cameras')
    run.add_argument('--camera-driver', default=None, metavar='PKG[/EXECUTABLE]',
                     help='real_collect: also start this camera driver (realsense2_camera, usb_cam, v4l2_camera)')
    run.add_argument('--num-learners', type=int, default=1,
                     help='sim_train: learner ranks (torch.distributed gloo), the collector routes rows to each')
    run.add_argument('--eval-episodes', type=int, default=0,
                     help='sim_train: score the final weights on this many held-out episodes; sim_eval, '
                          'sim_collect --policy lerobot: how many (default 32, 20)')
    run.add_argument('--checkpoint', default=None, help="sim_eval: a run's learner/ directory or checkpoint file; "
                     "sim_collect/real_eval --policy lerobot: lerobot-train's .../checkpoints/<N>/pretrained_model")
    run.add_argument('--warm-start', default=None,
                     help='sim_train: behaviour-clone the actor on the LeRobot datasets under this directory first')
    run.add_argument('--run-id', default=None, help="this run's id (default: a new one); "
                     'a node started beside the run (a teleop device, a tool) joins it with the same run_id')
    run.add_argument('--secret-file', default=None, help='sign and check commands with this '
                     'secret (hex, mode 600; default: a new one for the run, removed at its end)')
    run.add_argument('--quiet', action='store_true')
    sub.add_parser('contact-sheet', help='replay-buffer trajectories -> a PNG contact sheet', add_help=False)
    sub.add_parser('dataset-frames', help='LeRobot dataset -> per-episode jpg + txt folders', add_help=False)
    sub.add_parser('learning-curve', help="a training run's metrics.jsonl -> a learning-curve PNG", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == 'contact-sheet':
        from .viz.contact_sheet import main as sheet_main
        return sheet_main(rest)
    if args.command == 'dataset-frames':
        from .viz.dataset_frames import main as frames_main
        return frames_main(rest)
    if args.command == 'learning-curve':
        from .viz.learning_curve import main as curve_main
        return curve_main(rest)
    if rest:
        parser.error(f'unrecognized arguments: {rest}')
    if args.command == 'run':
        taken = PIPELINE_OPTIONS[args.pipeline] | {'quiet'}  # sim_eval starts no node: nothing to quiet
        flags = {a.dest: '/'.join(a.option_strings) for a in run._actions if a.option_strings and a.dest != 'help'}
        flags['image_obs'] = '--image-obs/--no-images'  # two actions, one dest
        defaults = vars(run.parse_args([args.pipeline]))
        ignored = [flags[k] for k in sorted(flags) if k not in taken and getattr(args, k) != defaults[k]]
        if ignored:
            print(f'run {args.pipeline} does not take {", ".join(ignored)} (it would be ignored); it takes '
                  + ', '.join(flags[k] for k in sorted(taken)), file=sys.stderr)
            return 2
    if args.command == 'run' and args.pipeline in ('sim_train', 'sim_eval'):
        from .pipelines import sim_train
        args.config = args.config or str(sim_train.RLPD_CONFIG if args.algo == 'rlpd' else sim_train.DEFAULT_CONFIG)
        return sim_train.main(args) if args.pipeline == 'sim_train' else sim_train.eval_main(args)
    if args.command == 'run' and args.pipeline == 'real_collect':
        from .pipelines import real_collect
        args.config = args.config or str(real_collect.DEFAULT_CONFIG)
        return real_collect.main(args)
    if args.command == 'run' and args.pipeline == 'real_train':
        from .pipelines import real_train
        args.config = args.config or str(real_train.DEFAULT_CONFIG)
        return real_train.main(args)
    if args.command == 'run' and args.pipeline == 'train_reward':
        from .pipelines import train_reward
        return train_reward.main(args)
    if args.command == 'run' and args.pipeline == 'real_eval':
        from .pipelines import real_eval
        args.config = args.config or str(real_eval.DEFAULT_CONFIG)
        return real_eval.main(args)
    if args.command == 'run':
        from .pipelines import sim_collect
        args.config = args.config or str(sim_collect.DEFAULT_CONFIG)
        return sim_collect.main(args)
    if args.command == 'smoke':
        from .pipelines.smoke import run_smoke
        return run_smoke(args.envs, args.image_size)
    return 2


if __name__ == '__main__':
    sys.exit(main())
