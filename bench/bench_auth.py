"""What signing costs: HMAC-SHA256 of a command (``ros.run_link.canonical`` + ``RunGuard``) per message,
sender (sign) and receiver (admit: run id, then the signature), against the control period.

The messages as a run sends them: an ActionChunk (B=2 envs, C=4 steps, A=7), an Intervention at a
teleop device's rate, an EpisodeEvent (the operator's label), PolicyWeights inline (RLPD's actor, 256 wide), and, as the upper bound of a
message with images, a PolicyInput with the front and wrist cameras at 128x128 (not signed by the
package: it moves nothing; timed to show what signing an image message would cost). Also the
serialization rclpy does anyway for each, for scale.

    bash -c 'source env.sh && python bench/bench_auth.py [--repeat 2000]'
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def messages():
    from rl_traj_ros import msg as M
    from rl_traj_ros.data.schema import ActionChunk, PolicyInput, TrajectoryKey, TrajectorySource
    from rl_traj_ros.policies.sac import SquashedGaussianActor
    from rl_traj_ros.learning import weights as W
    from rl_traj_ros.ros import conversion as cv
    src = [TrajectorySource(TrajectoryKey(0, 0, 0, 0, 3), 2, 0)]
    chunk = cv.action_chunk_to_msg(ActionChunk(src, torch.rand(2, 28), 5))
    teleop = M.Intervention(source_device='spacemouse', env_index=-1, action=[0.1] * 7, active=True)
    actor = SquashedGaussianActor(21, 7, 4, hidden=256)
    data, path, digest = W.outgoing(actor.state_dict(), 1, 1 << 30, '')
    weights = M.PolicyWeights(model_version=1, sha256=digest, path=path)
    weights.data = data
    obs = {'states': torch.rand(2, 18),
           'main_images': torch.from_numpy(np.random.randint(0, 255, (2, 128, 128, 3), np.uint8)),
           'extra_view_images': torch.from_numpy(np.random.randint(0, 255, (2, 1, 128, 128, 3), np.uint8))}
    images = cv.policy_input_to_msg(PolicyInput(src, obs, None))
    label = M.EpisodeEvent(source_device='spacemouse', env_index=-1, label=1)
    return {'ActionChunk [2, 28]': chunk, 'Intervention [7]': teleop, 'EpisodeEvent (a label)': label,
            f'PolicyWeights inline ({len(data) / 1e6:.2f} MB)': weights,
            'PolicyInput, 2 cameras 128x128 (2 envs)': images}


def timed(fn, repeat: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--repeat', type=int, default=2000)
    ap.add_argument('--control-period-ms', type=float, default=100.0, help="franky's control_dt (0.1 s)")
    args = ap.parse_args()
    from rclpy.serialization import serialize_message

    from rl_traj_ros.delivery.run_guard import RunGuard
    from rl_traj_ros.ros.run_link import canonical
    guard = RunGuard('bench', b'k' * 32, True, print)
    print(f"{'message':44s} {'sign us':>9s} {'check us':>9s} {'serialize us':>13s} {'of a period':>12s}")
    for name, m in messages().items():
        m.run_id = 'bench'
        repeat = max(20, args.repeat // (1 + len(bytes(getattr(m, 'data', b''))) // 100000))
        sign = timed(lambda: guard.sign(canonical(m)), repeat)
        auth = guard.sign(canonical(m))
        if hasattr(m, 'auth'):  # a command (PolicyInput is not one: canonical covers all its fields)
            m.auth = auth
        check = timed(lambda: guard.admit('/t', m.run_id, auth, lambda: canonical(m)), repeat)
        assert guard.admit('/t', m.run_id, auth, lambda: canonical(m))
        ser = timed(lambda: serialize_message(m), repeat)
        share = (sign + check) / (args.control_period_ms / 1e3)
        print(f'{name:44s} {sign * 1e6:9.1f} {check * 1e6:9.1f} {ser * 1e6:13.1f} {share:12.3%}')
    print(f'(sign + check of one message, against one {args.control_period_ms:g} ms control period)')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
