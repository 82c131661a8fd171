"""The learner's data path and PPO update, ROS-free (spec: the VLA PPO trainer, digest section 8).

From collector ``Trajectory`` batches to an update:
- ``flatten_trajectories``: ``[B, S, ...] -> [B*S, ...]`` and 1-D ``[B]`` tensors repeated
  per step, as the trainer document's function does;
- ``compute_response_mask``: which action entries count in the loss: every control slot up to
  and including the first completed one (flattened over steps and chunk slots), expanded over
  the action dimension (from the config, not a hard-coded 7);
- advantages: GAE (``trajectory.compute_gae``, the pipeline collector's own) or REINFORCE++
  (discounted returns-to-go over chunk rewards, whitened over the valid entries), the
  estimator the document's LIBERO example runs;
- ``PPOUpdater``: clipped surrogate on per-dimension log-probabilities, entropy bonus,
  minibatches and epochs, gradient clipping, approximate-KL early stop, clipped value loss.

Why not torchrl's ``ClipPPOLoss``: the spec's masks are per action entry (response mask over
``[S, C*A]``) with one advantage per chunk, and the loss aggregates over valid entries
("token-mean"); ClipPPOLoss reduces a single log-probability per sample through TensorDict
modules, so using it would mean re-deriving the mask semantics around it. The loss here is
the few lines of the PPO paper, each checked against hand-worked numbers in the tests.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from ..params.defaults import LEARNER
from ..data.trajectory import Trajectory, chunk_ends, chunk_starts
from ..params.shared import GAE_LAMBDA, GAMMA
from ..policies.protocol import TrainablePolicy
from .advantages import compute_gae, masked_normalize

ADVANTAGES = ('gae', 'reinforce++')
METRICS = ('policy_loss', 'value_loss', 'entropy', 'approx_kl', 'clip_fraction', 'grad_norm')  # per update


def flatten_trajectories(data: dict[str, torch.Tensor], batch_size: int, num_steps: int) -> dict[str, torch.Tensor]:
    """Batch-major ``[B, S, ...]`` tensors -> ``[B*S, ...]``; ``[B]`` tensors -> each value
    repeated ``S`` times (``[e1, e1, ..., e2, e2, ...]``); anything else unchanged."""
    out = {}
    for k, t in data.items():
        if t.dim() >= 2 and t.shape[0] == batch_size and t.shape[1] == num_steps:
            out[k] = t.reshape(batch_size * num_steps, *t.shape[2:])
        elif t.dim() == 1 and t.shape[0] == batch_size:
            out[k] = t.repeat_interleave(num_steps)
        else:
            out[k] = t
    return out


def compute_response_mask(complete: torch.Tensor, action_dim: int) -> torch.Tensor:
    """``complete [B, S, C]`` (a slot completed the episode) -> bool ``[B, S, C*action_dim]``:
    True up to and including each row's first completed slot over ``S*C``; all True when a
    row never completes."""
    b = complete.shape[0]
    flat = complete.reshape(b, -1).to(torch.bool)
    n = flat.shape[1]
    first = torch.where(flat.any(1), flat.to(torch.int64).argmax(1), torch.full((b,), n - 1))
    mask = torch.arange(n).unsqueeze(0) <= first.unsqueeze(1)
    return mask.reshape(complete.shape).repeat_interleave(action_dim, dim=-1)


def reinforce_pp_advantages(rewards: torch.Tensor, dones: torch.Tensor, num_epochs: int, gamma: float,
                            mask: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ over chunk rewards in the Trajectory layout (``rewards [T,B,C]``, ``dones
    [T+E,B,C]``): returns-to-go ``G_t = r_t + gamma * G_{t+1}`` that restart after a done,
    per epoch; advantages are the returns whitened over the valid chunks (``mask [T,B,1]``).
    Returns ``(advantages, returns)`` of shape ``[T,B,1]``."""
    t_total, b = rewards.shape[:2]
    chunks = t_total // num_epochs
    r = rewards.to(torch.float32).sum(-1)
    d = dones.to(torch.float32).amax(-1)
    ret = torch.zeros(t_total, b)
    for e in range(num_epochs):
        de = d[e * (chunks + 1):(e + 1) * (chunks + 1)]
        running = torch.zeros(b)
        for t in reversed(range(chunks)):
            running = r[e * chunks + t] + gamma * (1.0 - de[t + 1]) * running
            ret[e * chunks + t] = running
    ret = ret.unsqueeze(-1)
    return masked_normalize(ret.clone(), mask), ret


def training_batch(traj: Trajectory, action_dim: int, gamma: float = GAMMA, gae_lambda: float = GAE_LAMBDA,
                   advantage: str = LEARNER.advantage, auto_reset: bool = LEARNER.auto_reset) -> dict[str, Any]:
    """A collector Trajectory (time-major ``[T, B, ...]``) -> flat samples ``[B*T, ...]``:
    ``obs`` (a dict), ``actions``, ``old_logprobs`` (per action entry), ``old_values``,
    ``advantages``, ``returns``, ``response_mask``, ``versions``. The collector's GAE is used
    when it computed one (pipeline mode). Without ``auto_reset`` a row is one episode and the
    response mask ends at its first completed slot; with it every slot is a real step."""
    if advantage not in ADVANTAGES:
        raise ValueError(f'advantage must be one of {ADVANTAGES}, got {advantage!r}')
    if not traj.curr_obs:
        raise ValueError("the trajectory carries no curr_obs to train on: set the collector's "
                         'collect_transitions: true')
    t_total, b = traj.actions.shape[:2]
    e = traj.num_epochs
    values, dones_t = chunk_starts(traj.prev_values, e), chunk_ends(traj.dones, e)  # [T,B,1], [T,B,C]
    # batch-major [B, T, ...]: one row per env, as flatten_trajectories expects
    bm = {'actions': traj.actions, 'old_logprobs': traj.prev_logprobs.reshape(t_total, b, -1),
          'old_values': values[..., 0], 'versions': traj.versions.reshape(t_total, b, -1)[..., 0]}
    bm = {k: v.transpose(0, 1) for k, v in bm.items()}
    mask = compute_response_mask(dones_t.transpose(0, 1), action_dim)  # [B, T, C*A]
    if auto_reset:
        mask = torch.ones_like(mask)
    chunk_valid = mask.any(-1).transpose(0, 1).unsqueeze(-1)  # [T, B, 1]
    if advantage == 'gae':
        if traj.advantages is not None and traj.returns is not None:
            adv, ret = traj.advantages, traj.returns
        else:
            adv, ret = compute_gae(traj.rewards, traj.prev_values, traj.dones, e, gamma, gae_lambda)
    else:
        adv, ret = reinforce_pp_advantages(traj.rewards, traj.dones, e, gamma, chunk_valid)
    bm.update(advantages=adv[..., 0].transpose(0, 1), returns=ret[..., 0].transpose(0, 1), response_mask=mask)
    flat = flatten_trajectories(bm, b, t_total)
    obs = {k: v.transpose(0, 1).reshape(b * t_total, *v.shape[2:]) for k, v in (traj.curr_obs or {}).items()
           if torch.is_tensor(v) and v.shape[:2] == (t_total, b)}
    return {**flat, 'obs': obs}


@dataclass
class PPOConfig:
    """PPO's settings; defaults are the learner node's (``params/learner_node.py``)."""

    clip_ratio: float = LEARNER.clip_ratio
    value_clip: float = LEARNER.value_clip              # <= 0: unclipped value loss
    entropy_coef: float = LEARNER.entropy_coef
    value_coef: float = LEARNER.value_coef
    epochs: int = LEARNER.ppo_epochs
    minibatch_size: int = LEARNER.minibatch_size
    max_grad_norm: float = LEARNER.max_grad_norm
    target_kl: float = LEARNER.target_kl                # > 0: stop the epochs once approx KL exceeds 1.5x this
    critic_warmup: int = LEARNER.critic_warmup          # the first N updates train the critic only
    lr: float = LEARNER.lr
    normalize_advantages: bool = LEARNER.normalize_advantages


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp_min(1.0)


def policy_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                clip_ratio: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate on per-entry log-probabilities ``[N, K]`` with one advantage per row
    ``[N]``, averaged over the valid entries; also the clip fraction and approximate KL (k3)."""
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    adv = advantages.unsqueeze(-1)
    surrogate = torch.maximum(-adv * ratio, -adv * ratio.clamp(1.0 - clip_ratio, 1.0 + clip_ratio))
    m = mask.to(surrogate.dtype)
    denom = m.sum().clamp_min(1.0)  # one mask conversion for the loss and both statistics
    with torch.no_grad():
        stats = {'clip_fraction': (((ratio - 1.0).abs() > clip_ratio) * m).sum() / denom,
                 'approx_kl': (((ratio - 1.0) - log_ratio) * m).sum() / denom}
    return (surrogate * m).sum() / denom, stats


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, row_mask: torch.Tensor,
               clip: float) -> torch.Tensor:
    """0.5 * max((v - R)^2, (v_clipped - R)^2), v_clipped within ``clip`` of the rollout's value."""
    err = (values - returns) ** 2
    if clip > 0:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        err = torch.maximum(err, (clipped - returns) ** 2)
    return 0.5 * masked_mean(err, row_mask)


def explained_variance(pred: torch.Tensor, target: torch.Tensor) -> float:
    var = target.var(unbiased=False)
    return float('nan') if var == 0 else float(1.0 - (target - pred).var(unbiased=False) / var)


def all_reduce_gradients(params: list) -> None:
    """Average every gradient across the torch.distributed group (gloo on CPU, NCCL on GPUs):
    ranks fed different rows take the same optimizer step."""
    import torch.distributed as dist
    world = dist.get_world_size()
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        p.grad /= world


class PPOUpdater:
    """One PPO update over a batch of flat samples (``training_batch``).

    ``evaluate(obs, actions) -> (logprobs [N, K], entropy [N, K], values [N])`` is the model's
    differentiable evaluation. ``all_reduce(params)`` (optional) averages gradients across
    learner ranks before each optimizer step (torch.distributed), so every rank ends the step
    with the same weights."""

    def __init__(self, params: list, evaluate: Callable, cfg: PPOConfig,
                 all_reduce: Optional[Callable[[list], None]] = None, seed: int = LEARNER.seed):
        self.params, self.evaluate, self.cfg, self.all_reduce = list(params), evaluate, cfg, all_reduce
        # foreach: one fused kernel per step over all parameters (the default on CPU loops per tensor)
        self.optimizer = torch.optim.Adam(self.params, lr=cfg.lr, foreach=True)
        self.generator = torch.Generator().manual_seed(seed)

    def _mean_over_ranks(self, x: float) -> float:
        """``x`` averaged over the learner ranks (when they all-reduce): every rank then takes the
        same early-stop decision, so none waits in an all-reduce the others skipped."""
        import torch.distributed as dist
        if self.all_reduce is None or not dist.is_available() or not dist.is_initialized():
            return x
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return float(t) / dist.get_world_size()

    def update(self, batch: dict[str, Any], actor: bool = True) -> dict[str, float]:
        """``actor=False``: a critic-only update (value loss alone; the policy is unchanged), for a
        critic warm-up before PPO moves a warm-started actor."""
        cfg = self.cfg
        t0 = time.perf_counter()
        mask = batch['response_mask'].to(torch.bool)
        row_mask = mask.any(-1)
        adv = batch['advantages'].to(torch.float32)
        if cfg.normalize_advantages:
            adv = masked_normalize(adv, row_mask)
        n = adv.shape[0]
        total = torch.zeros(len(METRICS))  # summed per minibatch as one tensor: no host sync per step
        count, epochs_run, stopped = 0, 0, False
        for _ in range(cfg.epochs):
            order = torch.randperm(n, generator=self.generator)
            epoch = torch.zeros(len(METRICS))
            for start in range(0, n, cfg.minibatch_size):
                idx = order[start:start + cfg.minibatch_size]
                obs = {k: v[idx] for k, v in batch['obs'].items()}
                logp, ent, values = self.evaluate(obs, batch['actions'][idx])
                pg, stats = policy_loss(logp, batch['old_logprobs'][idx], adv[idx], mask[idx], cfg.clip_ratio)
                vl = value_loss(values, batch['old_values'][idx], batch['returns'][idx], row_mask[idx],
                                cfg.value_clip)
                entropy = masked_mean(ent, mask[idx])
                loss = (pg - cfg.entropy_coef * entropy if actor else 0.0) + cfg.value_coef * vl
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if self.all_reduce is not None:
                    self.all_reduce(self.params)
                grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                self.optimizer.step()
                epoch += torch.stack([pg.detach(), vl.detach(), entropy.detach(), stats['approx_kl'],
                                      stats['clip_fraction'], grad_norm.detach()])
                count += 1
            epochs_run += 1
            total += epoch
            kl = float(epoch[METRICS.index('approx_kl')]) / max(-(-n // cfg.minibatch_size), 1)
            if cfg.target_kl > 0 and self._mean_over_ranks(kl) > 1.5 * cfg.target_kl:
                stopped = True
                break
        with torch.no_grad():
            _, _, values = self.evaluate(batch['obs'], batch['actions'])
        metrics = {k: float(v) / max(count, 1) for k, v in zip(METRICS, total)}
        metrics.update(explained_variance=explained_variance(values[row_mask], batch['returns'][row_mask]),
                       epochs=float(epochs_run), kl_early_stop=float(stopped),
                       samples_per_s=n * epochs_run / max(time.perf_counter() - t0, 1e-9))
        return metrics


def behavior_clone(model: TrainablePolicy, states: torch.Tensor, actions: torch.Tensor, epochs: int = 100,
                   bc_batch_size: int = 256, bc_lr: float = 1e-3, seed: int = LEARNER.seed,
                   min_std: float = 0.005) -> dict[str, float]:
    """Warm start: fit the policy's mean action chunk to demonstrated ones (MSE over
    minibatches, Adam, on ``actor_parameters`` only), after folding the demo states into the
    model's normalizer; then set the policy's std per action entry to the remaining error (at
    least ``min_std``), so PPO explores about as far as the clone is off. The critic is left
    to PPO. Returns the MSE before and after."""
    if states.shape[0] != actions.shape[0] or not states.shape[0]:
        raise ValueError(f'need as many demo states as action chunks, got {states.shape[0]} and {actions.shape[0]}')
    x, y = states.to(torch.float32), actions.to(torch.float32)
    model.merge_obs_stats(float(x.shape[0]), x.mean(0), x.var(0, unbiased=False))
    opt = torch.optim.Adam(list(model.actor_parameters()), lr=bc_lr, foreach=True)
    g = torch.Generator().manual_seed(seed)

    def mean_of(obs: torch.Tensor) -> torch.Tensor:
        return model.action_mean({'states': obs})

    with torch.no_grad():
        before = float(((mean_of(x) - y) ** 2).mean())
    for _ in range(epochs):
        order = torch.randperm(x.shape[0], generator=g)
        for start in range(0, x.shape[0], bc_batch_size):
            idx = order[start:start + bc_batch_size]
            loss = ((mean_of(x[idx]) - y[idx]) ** 2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    with torch.no_grad():
        err = mean_of(x) - y
    model.set_action_std(err.pow(2).mean(0).sqrt().clamp_min(min_std))
    return {'bc_mse_before': before, 'bc_mse_after': float(err.pow(2).mean()), 'bc_samples': float(x.shape[0]),
            'bc_std_mean': float(model.action_std().mean())}
