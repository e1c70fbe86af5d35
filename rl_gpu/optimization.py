"""Clipped PPO on a ``[T, N]`` rollout, with every mean taken over the learner's decisions only.

Shape legend: T = steps, N = environments, B = T * N flattened slots, M = minibatch slots, E = epochs.

The update never synchronises with the host: minibatch permutations are drawn on the device, metrics stay
0-dim tensors, and ``target_kl`` early stopping is a device-side flag. Once an epoch ends with an approximate KL
above ``target_kl``, every later minibatch of the update still runs (static work, no host read) but its optimiser
step is undone on the device (parameters and Adam's moments and step count restored) and its metrics are left
out, which is exactly the result of stopping there.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import partial
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from rl_gpu.compile import GraphedFunction, compile_unit, resolve_compile
from rl_gpu.gae import compute_gae
from rl_gpu.rollout import Rollout, RolloutEngine, RolloutNoise, collect


@dataclass(frozen=True)
class PPOConfig:
    """PPO hyper-parameters (CleanRL's names)."""

    gamma: float = 0.99
    """discount factor per learner decision"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    update_epochs: int = 4
    """passes over the rollout per update"""
    num_minibatches: int = 4
    """minibatches per epoch (slots of the flattened [T * N] rollout, shuffled every epoch)"""
    clip_coef: float = 0.2
    """PPO's ratio clipping range"""
    clip_vloss: bool = True
    """clip the value loss around the collected values (as in PPO's reference implementation)"""
    norm_adv: bool = True
    """normalise advantages per minibatch, with mean and std over learner decisions only"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    reward_scale: float = 1.0
    """multiply rewards by this before computing advantages (returns in the logs stay unscaled)"""
    target_kl: float | None = None
    """stop the update's remaining epochs once the approximate KL exceeds this (checked once per epoch, on the
    device)"""

    def __post_init__(self) -> None:
        checks = {
            "gamma": 0.0 <= self.gamma <= 1.0,
            "gae_lambda": 0.0 <= self.gae_lambda <= 1.0,
            "update_epochs": self.update_epochs >= 1,
            "num_minibatches": self.num_minibatches >= 1,
            "clip_coef": self.clip_coef > 0,
            "ent_coef": self.ent_coef >= 0,
            "vf_coef": self.vf_coef >= 0,
            "max_grad_norm": self.max_grad_norm > 0,
            "reward_scale": self.reward_scale > 0,
            "target_kl": self.target_kl is None or self.target_kl > 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            values = ", ".join(f"{name}={getattr(self, name)!r}" for name in bad)
            raise ValueError(f"invalid PPO hyper-parameters: {values} (gamma and gae_lambda in [0, 1], "
                             "epochs/minibatches >= 1, clip_coef/max_grad_norm/target_kl > 0, coefficients >= 0)")


@dataclass
class UpdateMetrics:
    """0-dim tensors averaged over the update's minibatches; read them on the host once per log interval."""

    loss: Tensor
    policy_loss: Tensor
    value_loss: Tensor
    entropy: Tensor
    approx_kl: Tensor
    clip_fraction: Tensor
    explained_variance: Tensor
    grad_norm: Tensor

    def as_floats(self) -> dict[str, float]:
        """Every metric as a Python float (one host synchronisation for all of them)."""
        names = [f.name for f in fields(self)]
        values = torch.stack([getattr(self, n).detach().float() for n in names]).cpu().tolist()
        return dict(zip(names, values))


def masked_mean(x: Tensor, weight: Tensor | None) -> Tensor:
    """Mean of ``x`` over entries with ``weight`` 1 (0 when there are none); the plain mean when ``weight`` is None
    (every entry counts: the same value, with fewer operations)."""
    if weight is None:
        return x.mean()
    return (x * weight).sum() / weight.sum().clamp(min=1.0)


def ppo_loss(
    policy: nn.Module, mb: dict[str, Tensor], config: PPOConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped surrogate + value loss - entropy bonus for one minibatch of ``[M]`` slots.

    ``mb`` holds ``obs, action, action_mask, log_prob, value, advantage, returns, weight``. Every mean and the
    advantage statistics use only slots with ``weight`` 1.
    """
    w = mb["weight"]
    new_log_prob, entropy, new_value = policy.evaluate(mb["obs"], mb["action"], mb["action_mask"])
    log_ratio = new_log_prob - mb["log_prob"]
    ratio = log_ratio.exp()
    advantage = mb["advantage"]
    if config.norm_adv:
        mean = masked_mean(advantage, w)
        var = masked_mean((advantage - mean).square(), w)
        advantage = (advantage - mean) / (var.sqrt() + 1e-8)
    pg_loss = masked_mean(
        torch.maximum(-advantage * ratio, -advantage * ratio.clamp(1 - config.clip_coef, 1 + config.clip_coef)), w
    )
    if config.clip_vloss:
        v_clipped = mb["value"] + (new_value - mb["value"]).clamp(-config.clip_coef, config.clip_coef)
        v_loss = 0.5 * masked_mean(
            torch.maximum((new_value - mb["returns"]).square(), (v_clipped - mb["returns"]).square()), w
        )
    else:
        v_loss = 0.5 * masked_mean((new_value - mb["returns"]).square(), w)
    entropy_mean = masked_mean(entropy, w)
    loss = pg_loss - config.ent_coef * entropy_mean + config.vf_coef * v_loss
    with torch.no_grad():
        # k3 estimator of KL(old || new): E[(r - 1) - log r], unbiased and non-negative.
        approx_kl = masked_mean((ratio - 1) - log_ratio, w)
        clip_fraction = masked_mean(((ratio - 1).abs() > config.clip_coef).float(), w)
    stats = {"policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy_mean,
             "approx_kl": approx_kl, "clip_fraction": clip_fraction}
    return loss, stats


def explained_variance(prediction: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
    """``1 - Var[target - prediction] / Var[target]`` over weighted entries (NaN-free: 0 if Var[target] = 0)."""
    mean_t = masked_mean(target, weight)
    var_t = masked_mean((target - mean_t).square(), weight)
    resid = target - prediction
    var_r = masked_mean((resid - masked_mean(resid, weight)).square(), weight)
    return torch.where(var_t > 0, 1 - var_r / var_t.clamp(min=1e-12), torch.zeros_like(var_t))


class FlatBatch(NamedTuple):
    """A rollout flattened to ``[B, ...]`` slots with its advantages: what minibatches are gathered from."""

    obs: Tensor
    action: Tensor
    action_mask: Tensor | None
    log_prob: Tensor
    value: Tensor
    advantage: Tensor
    returns: Tensor
    weight: Tensor


STAT_NAMES = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm")
"""Order of the per-minibatch statistics vector ``[7]`` that :class:`UpdateUnits` accumulates."""


def _gae_unit(gamma: float, gae_lambda: float, reward_scale: float, batch: Rollout,
              weighted: bool = True) -> tuple[Tensor, Tensor]:
    return compute_gae(
        batch.reward * reward_scale, batch.value, batch.terminated, batch.truncated, batch.final_value,
        batch.bootstrap_value, gamma, gae_lambda, batch.weight if weighted else None,
    )


def _loss_unit(policy: nn.Module, config: PPOConfig, flat: FlatBatch, idx: Tensor) -> tuple[Tensor, Tensor]:
    """``(loss, stats [5])`` of the minibatch ``idx`` (``[M]`` int64 slot indices) of ``flat``."""
    mb = {k: (v[idx] if v is not None else None) for k, v in flat._asdict().items()}
    loss, stats = ppo_loss(policy, mb, config)
    # Detached: metrics summed over the update must not keep each minibatch's autograd graph alive.
    return loss, torch.stack([stats[k].detach() for k in STAT_NAMES[1:6]])


def _optimizer_tensors(optimizer: torch.optim.Optimizer, device: torch.device) -> list[Tensor]:
    """Every parameter and optimiser-state tensor on ``device`` (what one optimiser step may change)."""
    out = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            out.append(p.data)
            out.extend(v for v in optimizer.state.get(p, {}).values()
                       if isinstance(v, Tensor) and v.device == device)
    return out


def clip_grad_norm(grads: list[Tensor], max_norm: float) -> Tensor:
    """``nn.utils.clip_grad_norm_`` (L2, scale by ``max_norm / (norm + 1e-6)`` when that is below 1) in four
    multi-tensor operations: torch's version loops over the tensors on CPU (48 vs 28 us for a 64-64 actor-critic)."""
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp(max=1.0))
    return norm


class UpdateUnits:
    """The pieces of one PPO update, eager or compiled (:func:`rl_gpu.compile.compile_unit`).

    - ``gae(batch) -> (advantage, returns)``, ``[T, N]`` each;
    - ``loss(flat, idx) -> (loss, stats [5])``, the minibatch forward (its backward is compiled with it);
    - ``step(keep) -> grad_norm``: gradient clipping and the optimiser step; with ``keep`` (0-dim bool) False the
      step is undone on the device. The optimiser step itself is not compiled (fused Adam on CPU; ``capturable``
      Adam on CUDA, captured in the CUDA graph with the rest).
    """

    def __init__(self, policy: nn.Module, optimizer: torch.optim.Optimizer, config: PPOConfig,
                 mode: str = "off") -> None:
        self.policy = policy
        self.optimizer = optimizer
        self.config = config
        self.mode = mode
        self.gae = compile_unit(partial(_gae_unit, config.gamma, config.gae_lambda, config.reward_scale), mode)
        self.loss = compile_unit(partial(_loss_unit, policy, config), mode)
        self.params = [p for p in policy.parameters() if p.requires_grad]

    def step(self, keep: Tensor | None) -> Tensor:
        grad_norm = clip_grad_norm([p.grad for p in self.params if p.grad is not None], self.config.max_grad_norm)
        # Before the optimiser's first step it has no state to restore, and that step is never undone: the
        # first epoch of every update always applies.
        if keep is None or any(not self.optimizer.state.get(p) for p in self.params):
            self.optimizer.step()
            return grad_norm
        # A CPU-held step counter of a non-capturable optimiser on CUDA cannot be restored without a host read;
        # it is left counting (only Adam's bias correction sees it). PPO's own optimiser is capturable there.
        tensors = _optimizer_tensors(self.optimizer, keep.device)
        saved = [t.clone() for t in tensors]
        self.optimizer.step()
        for t, old in zip(tensors, saved):
            t.copy_(torch.where(keep, t, old))
        return grad_norm


def flatten_batch(
    batch: Rollout, advantage: Tensor, returns: Tensor, continuous: bool, weighted: bool = True
) -> FlatBatch:
    """The ``[T, N, ...]`` rollout as ``[B, ...]`` slots (no copies: views). ``weighted=False`` drops the weights
    of a rollout whose every slot is a learner decision (single-player, continuing), so means are plain means."""
    return FlatBatch(
        obs=batch.obs.flatten(0, 1),
        action=batch.action.flatten(0, 1),
        action_mask=None if continuous else batch.action_mask.flatten(0, 1),
        log_prob=batch.log_prob.flatten(0, 1),
        value=batch.value.flatten(0, 1),
        advantage=advantage.flatten(0, 1),
        returns=returns.flatten(0, 1),
        weight=batch.weight.flatten(0, 1) if weighted else None,
    )


def draw_permutations(size: int, epochs: int, generator: torch.Generator | None, device: torch.device) -> Tensor:
    """``[E, B]`` int64: one random permutation of the slots per epoch, drawn on ``device``."""
    return torch.stack([torch.randperm(size, generator=generator, device=device) for _ in range(epochs)])


def run_update(units: UpdateUnits, batch: Rollout, permutations: Tensor, weighted: bool = True) -> UpdateMetrics:
    """One PPO update on ``batch`` with the given ``[E, B]`` minibatch permutations; no host synchronisation.

    ``weighted=False`` is for rollouts whose weights are all 1 (single-player continuing collection): the same
    result with fewer operations (plain means, and a GAE recursion of two operations per step instead of 16).
    """
    config, policy, optimizer = units.config, units.policy, units.optimizer
    advantage, returns = units.gae(batch, weighted)
    flat = flatten_batch(batch, advantage, returns, policy.is_continuous, weighted)
    size = flat.returns.shape[0]
    mb_size = size // config.num_minibatches
    device = flat.returns.device
    keep = torch.ones((), dtype=torch.bool, device=device) if config.target_kl is not None else None
    totals = torch.zeros(len(STAT_NAMES), device=device)
    count = torch.zeros((), device=device)
    for epoch in range(config.update_epochs):
        for start in range(0, size, mb_size):
            loss, stats = units.loss(flat, permutations[epoch, start:start + mb_size])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = units.step(keep)
            row = torch.cat([loss.detach()[None], stats, grad_norm.detach().float()[None]])
            applied = keep.float() if keep is not None else 1.0
            totals = totals + applied * row
            count = count + applied
        if keep is not None:
            # ``not (kl > target)`` rather than ``kl <= target``: a NaN KL keeps going, as the host check did.
            keep = keep & ~(stats[STAT_NAMES.index("approx_kl") - 1] > config.target_kl)
    means = totals / count
    ev = explained_variance(flat.value, flat.returns, flat.weight)
    return UpdateMetrics(explained_variance=ev, **{k: means[i] for i, k in enumerate(STAT_NAMES)})


def check_minibatches(batch: Rollout, config: PPOConfig) -> None:
    check_minibatches_size(batch.reward.numel(), config)


def check_minibatches_size(size: int, config: PPOConfig) -> None:
    """Raise ``ValueError`` unless ``size`` slots split into ``num_minibatches`` equal minibatches."""
    if size % config.num_minibatches:
        raise ValueError(
            f"the rollout's {size} slots (T * N) are not divisible by num_minibatches={config.num_minibatches}"
        )


def update_policy(
    policy: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Rollout,
    config: PPOConfig | None = None,
    generator: torch.Generator | None = None,
) -> UpdateMetrics:
    """One PPO update (``update_epochs`` passes of ``num_minibatches`` shuffled minibatches) on ``batch``.

    Advantages come from :func:`rl_gpu.gae.compute_gae` with the values stored at collection time.
    ``generator`` (on the batch's device) drives the minibatch shuffling. Returns metrics as 0-dim tensors
    without synchronising with the host (``target_kl`` included).
    """
    config = config if config is not None else PPOConfig()
    check_minibatches(batch, config)
    permutations = draw_permutations(batch.reward.numel(), config.update_epochs, generator, batch.reward.device)
    return run_update(UpdateUnits(policy, optimizer, config), batch, permutations)


def make_adam(params, learning_rate: Tensor, device: torch.device) -> torch.optim.Adam:
    """PPO's Adam (eps 1e-5) with the learning rate as a device tensor (updated in place, never re-traced):
    ``capturable`` on CUDA (its step counters live on the device, so it can be captured in a CUDA graph and
    never reads back to the host), fused on CPU (4x faster than the per-tensor loop for small networks)."""
    if device.type == "cuda":
        return torch.optim.Adam(params, lr=learning_rate, eps=1e-5, capturable=True, foreach=True)
    if device.type == "cpu":
        return torch.optim.Adam(params, lr=learning_rate, eps=1e-5, fused=True)
    return torch.optim.Adam(params, lr=float(learning_rate), eps=1e-5)


class PPO:
    """The algorithm object the trainer talks to: it owns the policy, the optimiser and its random streams.

    Args:
        policy: an actor-critic with ``act``, ``evaluate``, ``value`` (see :mod:`rl_gpu.policy`).
        config: PPO hyper-parameters.
        learning_rate: Adam's initial learning rate (held in a device tensor, see :meth:`set_learning_rate`).
        seed: seeds the policy's sampling and the minibatch shuffling.
        compile: how :meth:`collect`, :meth:`update` and :meth:`iterate` run (:mod:`rl_gpu.compile`): ``off``,
            ``inductor``, ``cudagraphs`` (:meth:`collect` and :meth:`update` replay one CUDA graph each,
            :meth:`iterate` one for both) or ``auto``.
    """

    def __init__(self, policy: nn.Module, config: PPOConfig, learning_rate: float, seed: int,
                 compile: str = "off") -> None:
        self.policy = policy
        self.config = config
        self.learning_rate = learning_rate
        device = next(policy.parameters()).device
        self.device = device
        self.compile = resolve_compile(compile, device)
        self.lr = torch.tensor(float(learning_rate), device=device)
        self.optimizer = make_adam(policy.parameters(), self.lr, device)
        self.policy_rng = torch.Generator(device=device).manual_seed(seed)
        self.shuffle_rng = torch.Generator(device=device).manual_seed(seed + 1)
        self.units = UpdateUnits(policy, self.optimizer, config, self.compile)
        self._engines: dict[tuple, RolloutEngine] = {}
        self._graphs: dict[tuple, GraphedFunction] = {}
        self._storage: dict[tuple, Rollout] = {}

    def set_learning_rate(self, lr: float) -> None:
        """Write ``lr`` into the device tensor Adam reads (no re-tracing, no host synchronisation)."""
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    def _graphed(self) -> bool:
        return self.compile == "cudagraphs"

    def engine(self, env: Any, num_steps: int, episodic: bool = False) -> RolloutEngine:
        """The :class:`~rl_gpu.rollout.RolloutEngine` (in this object's compile mode) for ``env``."""
        key = (id(env), num_steps, episodic)
        engine = self._engines.get(key)
        if engine is None or engine.env is not env:
            engine = self._engines[key] = RolloutEngine(self.policy, env, num_steps, episodic=episodic,
                                                        compile=self.compile)
        return engine

    def _permutations(self, num_slots: int) -> Tensor:
        return draw_permutations(num_slots, self.config.update_epochs, self.shuffle_rng, self.device)

    def _update_body(self, rollout: Rollout, permutations: Tensor, weighted: bool = True) -> UpdateMetrics:
        metrics = run_update(self.units, rollout, permutations, weighted)
        self.policy.update_normalizer(rollout.obs, rollout.live.float())
        return metrics

    def _graph(self, key: tuple, fn) -> GraphedFunction:
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = GraphedFunction(fn)
        return graph

    def collect(
        self, env: Any, num_steps: int, *, episodic: bool = False, opponent_rng: torch.Generator | None = None
    ) -> Rollout:
        """One ``[num_steps, N]`` rollout with the policy (same streams and results as
        :func:`~rl_gpu.rollout.collect`). A :class:`~rl_gpu.envs.base.TensorEnv` runs through the rollout engine
        into storage this object reuses: the returned tensors are overwritten by the next call for the same
        environment (in ``cudagraphs`` mode they are a CUDA graph's outputs). Any other environment (e.g. a
        Gymnasium adapter) goes through :func:`~rl_gpu.rollout.collect`."""
        if not hasattr(env, "step_state"):
            return collect(self.policy, env, num_steps, self.policy_rng, episodic=episodic,
                           opponent_rng=opponent_rng)
        engine = self.engine(env, num_steps, episodic)
        noise = engine.draw(self.policy_rng, opponent_rng)
        if self._graphed():
            rollout, state = self._graph(("collect", id(env), num_steps, episodic), engine.run)(noise, env.state)
        else:
            key = (id(env), num_steps, episodic)
            if key not in self._storage:
                self._storage[key] = engine.empty_rollout()
            rollout, state = engine.run(noise, out=self._storage[key])
        # Marks a rollout whose weights are all 1 by construction, so update() may skip them. Others (a caller's
        # own Rollout, a copy) lack the mark and are updated with their weights.
        rollout._all_weights_one = not episodic and env.num_players == 1
        env.state = state
        return rollout

    def update(self, rollout: Rollout) -> UpdateMetrics:
        """One PPO update on ``rollout``, then the rollout's observations join the normaliser statistics.
        No host synchronisation; in ``cudagraphs`` mode one CUDA graph (the rollout is copied into its input)."""
        check_minibatches(rollout, self.config)
        permutations = self._permutations(rollout.reward.numel())
        weighted = not getattr(rollout, "_all_weights_one", False)
        if self._graphed():
            shape = (rollout.reward.shape, rollout.obs.shape, rollout.action.shape, rollout.action_mask.shape)
            body = partial(self._update_body, weighted=weighted)
            return self._graph(("update", shape, weighted), body)(rollout, permutations)
        return self._update_body(rollout, permutations, weighted)

    def iterate(
        self, env: Any, num_steps: int, *, episodic: bool = False, opponent_rng: torch.Generator | None = None
    ) -> tuple[Rollout, UpdateMetrics]:
        """:meth:`collect` then :meth:`update`: the whole hot loop, with the same results. In ``cudagraphs``
        mode the whole iteration (rollout, GAE, update, normaliser) is one CUDA graph; every random number is
        drawn before it into the graph's static input buffers."""
        if not self._graphed() or not hasattr(env, "step_state"):
            rollout = self.collect(env, num_steps, episodic=episodic, opponent_rng=opponent_rng)
            return rollout, self.update(rollout)
        engine = self.engine(env, num_steps, episodic)
        check_minibatches_size(num_steps * env.num_envs, self.config)
        noise = engine.draw(self.policy_rng, opponent_rng)
        permutations = self._permutations(num_steps * env.num_envs)

        weighted = episodic or env.num_players > 1

        def body(noise: RolloutNoise, permutations: Tensor, state: Any) -> tuple[Rollout, UpdateMetrics, Any]:
            rollout, final_state = engine.run(noise, state)
            return rollout, self._update_body(rollout, permutations, weighted), final_state

        key = ("iterate", id(env), num_steps, episodic)
        rollout, metrics, state = self._graph(key, body)(noise, permutations, env.state)
        env.state = state
        return rollout, metrics

    def state_dict(self) -> dict:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "policy_rng": self.policy_rng.get_state(),
            "shuffle_rng": self.shuffle_rng.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        flags = [{k: g[k] for k in ("foreach", "fused", "capturable") if k in g} for g in self.optimizer.param_groups]
        held = {p: dict(s) for p, s in self.optimizer.state.items()}
        self.optimizer.load_state_dict(state["optimizer"])
        # Loading replaces each group's options and each state tensor with the saved ones. Keep this optimiser's
        # flags, its learning-rate tensor and (where it already had state) its state tensors, with the saved
        # values copied in: the loop's compiled units and any captured CUDA graph read those very tensors.
        for group, own in zip(self.optimizer.param_groups, flags):
            saved_lr = group["lr"]
            group.update(own)
            group["lr"] = self.lr
            if isinstance(saved_lr, Tensor):
                self.lr.copy_(saved_lr)
            else:
                self.lr.fill_(saved_lr)
            on_device = group.get("capturable") or group.get("fused")
            for p in group["params"]:
                loaded = self.optimizer.state.get(p, {})
                for name, value in list(loaded.items()):
                    if not isinstance(value, Tensor):
                        continue
                    if name == "step":
                        value = value.to(device=p.device if on_device else "cpu", dtype=torch.float32)
                    old = held.get(p, {}).get(name)
                    if isinstance(old, Tensor) and old.shape == value.shape and old.device == value.device:
                        old.copy_(value)
                        value = old
                    loaded[name] = value
        self.policy_rng.set_state(state["policy_rng"].cpu())
        self.shuffle_rng.set_state(state["shuffle_rng"].cpu())
