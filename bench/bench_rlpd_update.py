"""The RLPD learner's gradient steps against a plain torch SAC update on the same batch.

Same networks (a squashed-Gaussian actor and 10 LayerNorm critics of 2 x 256 over the sim's 21
states and a 2 x 7 action chunk), the same batch of 256 transitions, the same schedule (a critic
step every step with a min over 2 of the 10 target critics, an actor and temperature step every
second step, Polyak targets). The anchor is written the way a careful torch user would: the
ensemble as ``torch.func.stack_module_state`` + ``vmap`` over ordinary ``nn.Sequential``
critics (the strongest plain-torch configuration; a Python loop over 10 critics is slower).
Interleaved runs, best of 3; ratio = ours / anchor (goal: >= 0.9).

    bash -c 'source env.sh && python bench/bench_rlpd_update.py [--steps 200]'
"""
from __future__ import annotations

import argparse
import copy
import math
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.func import functional_call, stack_module_state

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rl_traj_ros.learning.rlpd import RLPDConfig, RLPDUpdater  # noqa: E402
from rl_traj_ros.learning.transitions import TransitionBatch  # noqa: E402
from rl_traj_ros.policies.sac import CriticEnsemble, SquashedGaussianActor  # noqa: E402

S, A, C, E, H, N = 21, 7, 2, 10, 256, 256


def batch(g: torch.Generator) -> TransitionBatch:
    obs = {'states': torch.randn(N, S, generator=g)}
    nxt = {'states': torch.randn(N, S, generator=g)}
    return TransitionBatch(obs, torch.rand(N, C * A, generator=g) * 2 - 1, torch.rand(N, generator=g),
                           torch.full((N,), 0.97 ** C), nxt, torch.zeros(N, dtype=torch.bool))


class PlainSAC:
    """Textbook SAC/RLPD step in plain torch, ensemble by vmap."""

    def __init__(self, actor: SquashedGaussianActor):
        self.actor = actor
        members = [nn.Sequential(nn.Linear(S + C * A, H), nn.LayerNorm(H), nn.ReLU(), nn.Linear(H, H), nn.LayerNorm(H),
                                 nn.ReLU(), nn.Linear(H, 1)) for _ in range(E)]
        self.base = copy.deepcopy(members[0]).to('meta')
        self.params, self.buffers = stack_module_state(members)
        self.target = {k: v.detach().clone() for k, v in self.params.items()}
        self.log_alpha = torch.tensor(math.log(0.01), requires_grad=True)
        self.q_opt = torch.optim.Adam(self.params.values(), lr=3e-4, foreach=True)
        self.pi_opt = torch.optim.Adam(actor.parameters(), lr=3e-4, foreach=True)
        self.a_opt = torch.optim.Adam([self.log_alpha], lr=3e-4)
        self.g = torch.Generator().manual_seed(0)
        self.steps = 0

    def q(self, params, obs, act):
        x = torch.cat([obs['states'], act], 1)
        return torch.vmap(lambda p, b: functional_call(self.base, (p, b), (x,)))(params, self.buffers)[..., 0]

    def step(self, b: TransitionBatch) -> None:
        with torch.no_grad():
            a2, _ = self.actor.sample(b.next_obs, self.g)
            pick = torch.randperm(E, generator=self.g)[:2]
            y = b.rewards + b.discounts * self.q(self.target, b.next_obs, a2 / self.actor.scale)[pick].min(0).values
        loss = ((self.q(self.params, b.obs, b.actions) - y) ** 2).mean()
        self.q_opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(self.params.values()), 10.0)
        self.q_opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(self.target.values()), list(self.params.values()), 0.005)
        self.steps += 1
        if self.steps % 2 == 0:
            a, logp = self.actor.sample(b.obs, self.g)
            params = {k: v.detach() for k, v in self.params.items()}
            pl = (self.log_alpha.exp().detach() * logp - self.q(params, b.obs, a / self.actor.scale).mean(0)).mean()
            self.pi_opt.zero_grad(set_to_none=True)
            pl.backward()
            torch.nn.utils.clip_grad_norm_(self.actor.parameters(), 10.0)
            self.pi_opt.step()
            al = (self.log_alpha.exp() * (-logp.detach() + C * A / 2)).mean()
            self.a_opt.zero_grad(set_to_none=True)
            al.backward()
            self.a_opt.step()


def rate(step, batches, steps: int) -> float:
    for b in batches[:5]:   # warm-up
        step(b)
    t = time.perf_counter()
    for i in range(steps):
        step(batches[i % len(batches)])
    return steps / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--steps', type=int, default=200)
    ap.add_argument('--threads', type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    batches = [batch(g) for _ in range(8)]
    ours = RLPDUpdater(SquashedGaussianActor(S, A, C, H, seed=0), CriticEnsemble(S, A, C, E, H),
                       RLPDConfig(num_critics=E, critic_subsample=2, critic_actor_ratio=2, image_pad=0), seed=0)
    plain = PlainSAC(SquashedGaussianActor(S, A, C, H, seed=0))
    best = {'ours': 0.0, 'plain': 0.0}
    for _ in range(3):
        best['ours'] = max(best['ours'], rate(ours.step, batches, args.steps))
        best['plain'] = max(best['plain'], rate(plain.step, batches, args.steps))
    print(f"gradient steps/s (batch {N}, {E} critics of 2x{H}, actor every 2nd step, {args.threads} thread(s)), "
          f"best of 3: RLPDUpdater.step {best['ours']:.1f}, plain torch (vmap ensemble) {best['plain']:.1f}, "
          f"ratio {best['ours'] / best['plain']:.2f}")


if __name__ == '__main__':
    main()
