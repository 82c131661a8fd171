"""The policy node's CUDA path (device: cuda) against its CPU path, on the same requests.

Checks that actions, logprobs and values agree (sampling noise is drawn on the CPU from a
per-key generator, so both devices take the same actions) and times inference per chunk for
B=64 envs with the CNN over 128x128 images. Needs a GPU; no ROS (the policy worker only).

    python bench/gpu_policy_check.py
"""
import time

import torch

from rl_traj_ros.data.schema import PolicyInput
from rl_traj_ros.data.synthetic import SyntheticSpec, make_parts
from rl_traj_ros.assembly import make_policy_worker


def worker(device: str, images: bool):
    return make_policy_worker({'policy': 'mlp', 'state_dim': 8, 'action_dim': 7, 'chunk': 8, 'hidden': 256,
                               'use_images': images, 'image_size': 128, 'seed': 3, 'device': device})


def main() -> None:
    assert torch.cuda.is_available(), 'no CUDA device'
    print('device:', torch.cuda.get_device_name(0), 'torch', torch.__version__)
    for images in (False, True):
        spec = SyntheticSpec(num_epochs=1, chunks_per_epoch=4, sources=((0, 0),), envs_per_source=64, chunk=8,
                             action_dim=7, state_dim=8, image_hw=(128, 128) if images else None)
        reqs = [PolicyInput(p.sources, p.obs) for p, _ in make_parts(spec)]
        cpu, gpu = worker('cpu', images), worker('cuda', images)
        worst = {'actions': 0.0, 'logprobs': 0.0, 'values': 0.0}
        for r in reqs:
            (ca, cp), (ga, gp) = cpu.infer(r), gpu.infer(r)
            assert ga.actions.device.type == 'cpu'  # the reply leaves the GPU
            worst['actions'] = max(worst['actions'], float((ca.actions - ga.actions).abs().max()))
            worst['logprobs'] = max(worst['logprobs'], float((cp.output.prev_logprobs - gp.output.prev_logprobs).abs().max()))
            worst['values'] = max(worst['values'], float((cp.output.prev_values - gp.output.prev_values).abs().max()))
        timing = {}
        for name, w in (('cpu', cpu), ('cuda', gpu)):
            for r in reqs[:2]:
                w.infer(r)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            n = 0
            while time.perf_counter() - t0 < 2.0:
                w.infer(reqs[n % len(reqs)])
                n += 1
            torch.cuda.synchronize()
            timing[name] = (time.perf_counter() - t0) / n * 1e3
        ok = worst['actions'] < 1e-4 and worst['values'] < 1e-3
        print(f"{'CNN+MLP, 128x128 images' if images else 'MLP, state only'}: max |cpu-cuda| "
              f"actions {worst['actions']:.2e} logprobs {worst['logprobs']:.2e} values {worst['values']:.2e}; "
              f"ms/chunk (B=64) cpu {timing['cpu']:.2f} cuda {timing['cuda']:.2f}: {'OK' if ok else 'MISMATCH'}")
        assert ok


if __name__ == '__main__':
    main()
