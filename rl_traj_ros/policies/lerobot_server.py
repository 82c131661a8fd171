"""LeRobot inference for the policy node, run under the LeRobot interpreter (Python >= 3.12).

    <lerobot python> lerobot_server.py --checkpoint .../pretrained_model --steps C [--device cpu]
        [--temporal-ensemble-coeff K] [--seed S]

Loads a ``lerobot-train`` output with LeRobot's own factory (``get_policy_class(type)
.from_pretrained``, ``make_pre_post_processors(pretrained_path=...)``: the normalization
statistics saved with the checkpoint), then answers frames from ``lerobot_wire`` on stdin:

- ``chunk`` (the node): C actions per row for one observation. Without ensembling the policy
  runs with ``n_action_steps = C`` and ``select_action`` is called C times on the observation,
  so the chunk is exactly what LeRobot's own loop executes over the next C control steps (an
  ACT chunk, a diffusion plan); the observation history of a policy that keeps one
  (diffusion's ``n_obs_steps``) holds one observation per chunk. With a temporal-ensemble
  coefficient K, ``predict_action_chunk`` runs once per request and each of the C actions is
  ACT's weighted mean (weight exp(-K i), oldest prediction first) over every earlier chunk
  prediction of that row that covers the control step; for C = 1 this is ACT's own ensembler.
- ``select`` (the reference): one row, one control step, LeRobot's synchronous call sequence
  (``prepare_observation_for_inference``, preprocessor, ``select_action``, postprocessor).
- ``reset``: rows that start a new episode.

Imports only the standard library, numpy, torch and LeRobot (never rl_traj_ros, which needs
ROS); ``lerobot_wire`` is loaded from this file's folder.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

from lerobot_wire import read_frame, write_frame  # noqa: E402


def load(checkpoint: str, steps: int, device: str, ensemble: float | None):
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    cfg = PreTrainedConfig.from_pretrained(checkpoint)
    cfg.device = device
    if hasattr(cfg, 'temporal_ensemble_coeff'):
        cfg.temporal_ensemble_coeff = None  # ensembling is done here, at the node's chunk granularity
    if ensemble is None and hasattr(cfg, 'n_action_steps'):
        cfg.n_action_steps = steps
        cfg.__post_init__()  # the policy's own checks (ACT: n_action_steps <= chunk_size)
    policy = get_policy_class(cfg.type).from_pretrained(checkpoint, config=cfg)
    policy.eval()
    pre, post = make_pre_post_processors(cfg, pretrained_path=checkpoint,
                                         preprocessor_overrides={'device_processor': {'device': device}})
    torch.set_grad_enabled(False)
    return cfg, policy, pre, post


class Server:
    def __init__(self, args):
        import torch
        self.torch = torch
        torch.manual_seed(args.seed)
        self.steps, self.device = args.steps, args.device
        self.coeff = args.temporal_ensemble_coeff if args.temporal_ensemble_coeff >= 0 else None
        self.cfg, self.policy, self.pre, self.post = load(args.checkpoint, self.steps, self.device, self.coeff)
        self.pending: dict[int, list] = {}  # row -> [(steps elapsed, normalized chunk [T, A])], oldest first

    def hello(self) -> dict:
        feats = {k: list(v.shape) for k, v in self.cfg.input_features.items()}
        action = self.cfg.output_features['action'].shape
        return {'ok': True, 'type': self.cfg.type, 'input_features': feats, 'action_dim': int(action[0]),
                'torch_threads': self.torch.get_num_threads(),
                'chunk_size': int(getattr(self.cfg, 'chunk_size', getattr(self.cfg, 'horizon', self.steps))),
                'n_action_steps': int(getattr(self.cfg, 'n_action_steps', 1)), 'ensemble': self.coeff}

    def _batch(self, arrays: dict, task: list) -> dict:
        """Batched twin of LeRobot's ``prepare_observation_for_inference``: images uint8 HWC ->
        float CHW in [0, 1]; then the checkpoint's preprocessor (normalization, device)."""
        torch = self.torch
        obs = {}
        for k, v in arrays.items():
            t = torch.from_numpy(v)
            if 'image' in k:
                if t.dtype == torch.uint8:
                    t = t.type(torch.float32) / 255
                t = t.permute(0, 3, 1, 2).contiguous()
            obs[k] = t.to(self.device)
        obs['task'] = task
        obs['robot_type'] = ''
        return self.pre(obs)

    def chunk(self, arrays: dict, header: dict) -> np.ndarray:
        for r in header.get('reset', []):
            self.pending.pop(int(r), None)
        b = next(iter(arrays.values())).shape[0]
        batch = self._batch(arrays, header.get('task') or [''] * b)
        if self.coeff is None:
            if header.get('reset'):  # as LeRobot's loop at an episode start (action queues are empty between chunks)
                self.reset()
            acts = [self.post(self.policy.select_action(batch)) for _ in range(self.steps)]
            return self.torch.stack(acts, 1).float().cpu().numpy()
        preds = self.policy.predict_action_chunk(batch)  # [B, T, A], normalized
        out = self.torch.empty(b, self.steps, preds.shape[-1], device=preds.device)
        for r in range(b):
            rows = self.pending.setdefault(r, [])
            rows.append([0, preds[r]])
            for j in range(self.steps):
                cover = [p[e + j] for e, p in rows if e + j < p.shape[0]]
                w = self.torch.tensor([math.exp(-self.coeff * i) for i in range(len(cover))], device=preds.device)
                out[r, j] = (self.torch.stack(cover) * w[:, None]).sum(0) / w.sum()
            for p in rows:
                p[0] += self.steps
            self.pending[r] = [p for p in rows if p[0] < p[1].shape[0]]
        return self.post(out).float().cpu().numpy()

    def reset(self) -> None:
        self.policy.reset()
        self.pre.reset()
        self.post.reset()

    def select(self, arrays: dict, header: dict) -> np.ndarray:
        from lerobot.policies.utils import prepare_observation_for_inference
        if header.get('reset'):
            self.reset()
        obs = {k: v[0] for k, v in arrays.items()}
        batch = self.pre(prepare_observation_for_inference(obs, self.torch.device(self.device),
                                                           (header.get('task') or [''])[0], ''))
        return self.post(self.policy.select_action(batch)).float().cpu().numpy()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument('--checkpoint', required=True)
    ap.add_argument('--steps', type=int, required=True)
    ap.add_argument('--device', default='cpu')
    ap.add_argument('--temporal-ensemble-coeff', type=float, default=-1.0)
    ap.add_argument('--seed', type=int, default=0)
    args = ap.parse_args()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal Ctrl-C reaches the group: the node ends us via EOF
    out, src = sys.stdout.buffer, sys.stdin.buffer
    sys.stdout = sys.stderr  # LeRobot's prints must not corrupt the frames
    try:
        server = Server(args)
    except Exception as e:  # noqa: BLE001 - reported to the node as one line, which names the checkpoint
        traceback.print_exc()
        write_frame(out, {'ok': False, 'error': f'{type(e).__name__}: {e}'})
        return 1
    write_frame(out, server.hello())
    while True:
        try:
            header, arrays = read_frame(src)
        except Exception:  # noqa: BLE001 - the node closed the pipe: done
            return 0
        try:
            op = header.get('op')
            if op == 'chunk':
                write_frame(out, {'ok': True}, {'actions': server.chunk(arrays, header)})
            elif op == 'select':
                write_frame(out, {'ok': True}, {'action': server.select(arrays, header)})
            else:
                write_frame(out, {'ok': False, 'error': f'unknown op {op!r}'})
        except Exception as e:  # noqa: BLE001 - a bad request is answered with its error; the server stays
            traceback.print_exc()
            write_frame(out, {'ok': False, 'error': f'{type(e).__name__}: {e}'})


if __name__ == '__main__':
    raise SystemExit(main())
