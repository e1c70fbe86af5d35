"""One PPO update on a ``[T, N]`` rollout: GAE, then epochs of shuffled minibatches, with no host
synchronisation.

Shape legend: T = steps, N = environments, B = T * N flattened slots, M = minibatch slots, E = epochs.

Minibatch permutations are drawn on the device, metrics stay 0-dim tensors, and ``target_kl`` early stopping is
a device-side flag: once an epoch ends with an approximate KL (averaged over ranks) above ``target_kl``, every
later minibatch of the update still runs (static work, no host read) but its optimiser step is undone on the
device (parameters and Adam's moments and step count restored) and its metrics are left out, which is exactly
the result of stopping there.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial

import torch
from torch import Tensor, nn

from rl_gpu.algos.anchor import Anchor
from rl_gpu.algos.optim import (
    clip_global_grad_norm,
    clip_grad_norm,
    fused_adam_ready,
    fused_adam_steps,
    set_learning_rate,
    undoable_step,
)
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.algos.ppo.loss import LOSS_STATS, MinibatchScale, explained_variance, minibatch_scale, ppo_loss
from rl_gpu.algos.ppo.batch import FlatBatch, flatten_batch
from rl_gpu.algos.ppo.sequences import sequence_batch, sequence_loss
from rl_gpu.algos.ppo.symmetry import MirrorMaps, with_mirror_image
from rl_gpu.algos.loss_scaler import LossScaler
from rl_gpu.algos.precision import autocast_dtype
from rl_gpu.algos.schedules import LRSchedule, adapt_to_kl
from rl_gpu.data.advantages import compute_gae
from rl_gpu.data.rollout import Rollout
from rl_gpu.nn.memory import is_recurrent
from rl_gpu.nn.normalization import ValueNormalizer, to_float
from rl_gpu.runtime.compile import compile_unit, guards_checked_once
from rl_gpu.runtime.distributed import all_reduce_grads_, all_reduce_mean, world_size


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


MINIBATCH_ROW = ("loss", *LOSS_STATS, "grad_norm")
"""What each minibatch adds to the update's totals, in order."""

FRAME_FIELDS = ("obs", "critic_obs")
"""The :class:`FlatBatch` fields that hold observations (which :meth:`UpdateUnits.gather_frames` may gather)."""

LossFn = Callable[..., tuple[Tensor, dict[str, Tensor]]]
"""A minibatch loss as :func:`~rl_gpu.algos.ppo.loss.ppo_loss` is one: ``(policy, mb, config, scale) -> (loss,
stats)`` with :data:`~rl_gpu.algos.ppo.loss.LOSS_STATS` among the stats."""


def _gae_unit(gamma: float, gae_lambda: float, reward_scale: float, batch: Rollout,
              weighted: bool = True) -> tuple[Tensor, Tensor]:
    return compute_gae(
        batch.reward * reward_scale, batch.value, batch.terminated, batch.truncated, batch.final_value,
        batch.bootstrap_value, gamma, gae_lambda, batch.weight if weighted else None,
    )


def _loss_unit(policy: nn.Module, config: PPOConfig, autocast: tuple[str, torch.dtype | None], loss_fn: LossFn,
               flat: FlatBatch, idx: Tensor, scale: MinibatchScale | None = None,
               gathered: dict[str, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """``(loss, stats [len(LOSS_STATS)])`` of the minibatch ``idx`` (``[M]`` int64 slot indices) of ``flat``, or,
    with ``scale``, of one micro-batch of the minibatch whose scale it is. ``autocast``: ``(device type, dtype)``
    of mixed precision (:mod:`rl_gpu.algos.precision`; dtype None: fp32). ``gathered``: fields of the minibatch
    already gathered (:meth:`UpdateUnits.gather_frames`), used in place of ``flat``'s."""
    gathered = gathered or {}
    mb = {k: gathered[k] if k in gathered else (_rows(v, idx) if v is not None else None)
          for k, v in flat._asdict().items()}
    if autocast[1] is None:
        loss, stats = loss_fn(policy, mb, config, scale)
    else:
        with torch.autocast(autocast[0], dtype=autocast[1]):
            loss, stats = loss_fn(policy, mb, config, scale)
        loss, stats = loss.float(), {k: v.float() for k, v in stats.items()}
    # Detached: metrics summed over the update must not keep each minibatch's autograd graph alive.
    return loss, torch.stack([stats[k].detach() for k in LOSS_STATS])


def _minibatch_unit(policy: nn.Module, config: PPOConfig, loss_fn: LossFn, params: list[Tensor], flat: FlatBatch,
                    idx: Tensor, gathered: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor, list[Tensor | None]]:
    """``(loss, stats, grad_norm, grads)`` of the minibatch ``idx``: :func:`_loss_unit`'s loss and statistics, the
    gradients of ``params`` (None for one the loss does not use) clipped by their global norm, and that norm
    before clipping. Compiled, the forward and backward passes and the clipping are one graph
    (:attr:`UpdateUnits.minibatch`)."""
    loss, stats = _loss_unit(policy, config, ("cpu", None), loss_fn, flat, idx, None, gathered)
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    # clip_grad_norm's maths, written out of place: its in-place multi-tensor multiply inside this graph gave the
    # same numbers 5% slower (the whole update, benchmarks/HISTORY.md section 49).
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads if g is not None]))
    coef = (config.max_grad_norm / (norm + 1e-6)).clamp(max=1.0)
    # Contiguous, as the parameters are: the fused Adam kernel reads a gradient in its parameter's element order, and
    # a weight's gradient may arrive transposed (rl_gpu.nn.frame_kernels); the clipping's multiply writes it so.
    return loss.detach(), stats, norm, [None if g is None else (g * coef).contiguous() for g in grads]


def _rows(v: Tensor, idx: Tensor) -> Tensor:
    """``v[idx]`` (``idx``: ``[M]`` int64), in the form each path runs fastest (benchmarks/HISTORY.md section 14):
    eager, ``index_select`` (faster than advanced indexing for these row gathers on the CPU); compiled, plain
    indexing, except that a ``[B, A]`` boolean (the action mask) is gathered through its flat view: Inductor's
    CPU code for a boolean row gather with a short inner dimension runs per element."""
    if not torch.compiler.is_compiling():
        return v.index_select(0, idx)
    if v.dtype == torch.bool and v.dim() == 2:
        width = v.shape[1]
        flat_idx = (idx.unsqueeze(1) * width + torch.arange(width, device=idx.device)).reshape(-1)
        return v.reshape(-1)[flat_idx].reshape(-1, width)
    return v[idx]


def _scale_unit(config: PPOConfig, flat: FlatBatch, idx: Tensor) -> MinibatchScale:
    return minibatch_scale(_rows(flat.advantage, idx), _rows(flat.weight, idx) if flat.weight is not None else None,
                           config)


def micro_batches(minibatch_size: int, config: PPOConfig) -> int:
    """How many micro-batches a minibatch of ``minibatch_size`` rows runs as (sizes differing by at most 1)."""
    size = config.micro_batch_size or minibatch_size
    return -(-minibatch_size // size)


class UpdateUnits:
    """The pieces of one PPO update, eager or compiled (:func:`rl_gpu.runtime.compile.compile_unit`).

    - ``gae(batch) -> (advantage, returns)``, ``[T, N]`` each;
    - ``loss(flat, idx) -> (loss, stats [len(LOSS_STATS)])``, the minibatch forward (its backward is compiled
      with it);
    - ``step(keep) -> grad_norm``: gradient averaging over ranks, clipping and the optimiser step; with ``keep``
      (0-dim bool) False the step is undone on the device. The optimiser step itself is not compiled (fused Adam
      on CPU; ``capturable`` Adam on CUDA, captured in the CUDA graph with the rest).
    - ``minibatch_step(flat, idx) -> (loss, stats, grad_norm)``: compiled on the CPU, a plain update's whole
      minibatch (:attr:`minibatch`'s one graph, then the optimiser step) in place of ``loss`` and ``step``.
    """

    def __init__(self, policy: nn.Module, optimizer: torch.optim.Optimizer, config: PPOConfig,
                 mode: str = "off", precision: str = "fp32", loss_fn: LossFn = ppo_loss) -> None:
        self.mirror: MirrorMaps | None = None
        """Set with ``--symmetry``: the task's mirror; each update appends the rollout's mirror image
        (:mod:`rl_gpu.algos.ppo.symmetry`)."""
        self.value_norm: ValueNormalizer | None = None
        """Set by an algorithm whose critic learns normalised value targets (MAPPO): the rollout's values are
        read through it, and the targets normalised by it (:func:`run_update`)."""
        self.max_steps: int | None = None
        """Optimizer steps the next update may take, in order; the rest are dropped as too stale
        (``max_policy_lag``). None: all ``update_epochs * num_minibatches``."""
        self.anchor: Anchor | None = None
        """Set in a task sequence (L2, EWC): its penalty's gradient joins each step's (:mod:`rl_gpu.algos.anchor`)."""
        self.kl_schedule: LRSchedule | None = None
        """Set for ``--lr-schedule adaptive-kl``: each minibatch's KL steers the learning rate before its step."""
        self.policy = policy
        self.optimizer = optimizer
        self.config = config
        self.mode = mode
        self.gae = compile_unit(partial(_gae_unit, config.gamma, config.gae_lambda, config.reward_scale), mode)
        device = next(policy.parameters()).device
        self.precision = precision
        self.scaler = LossScaler(device) if precision == "fp16" else None
        """fp16's loss scaler (:mod:`rl_gpu.algos.precision`), None otherwise."""
        self.loss = compile_unit(partial(_loss_unit, policy, config, (device.type, autocast_dtype(precision)),
                                         loss_fn), mode)
        self.scale = compile_unit(partial(_scale_unit, config), mode)
        # A policy with memory replays T steps of one memory cell per minibatch: compiled modes compile that step
        # (one small graph, called T times) rather than the whole unrolled replay (minutes of compilation).
        step = getattr(policy, "sequence_step", None)
        step = compile_unit(step, mode) if step is not None and mode != "off" else None
        self.sequence_loss = partial(sequence_loss, policy, config, step=step)
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.minibatch = None
        """Compiled on the CPU in fp32: a minibatch's forward, gradients and clipping as one graph
        (:func:`_minibatch_unit`), which :meth:`minibatch_step` runs for a plain update (no micro-batches, loss
        scaler, anchor, KL-driven rate, ``target_kl``, second rank or memory). Its Python and dispatch between the
        forward graph, the autograd engine, the backward graph, gradient accumulation and clipping were a
        third of a small network's update (benchmarks/HISTORY.md section 49). None otherwise."""
        if mode == "inductor" and device.type == "cpu" and precision == "fp32" and self.params:
            self.minibatch = compile_unit(partial(_minibatch_unit, policy, config, loss_fn, self.params), mode,
                                          autograd=True, fma=True)

    def fused_minibatches(self, splits: int, keep: Tensor | None) -> bool:
        """Whether this update's minibatches run as :meth:`minibatch_step`s."""
        return (self.minibatch is not None and splits == 1 and keep is None and self.scaler is None
                and self.anchor is None and self.kl_schedule is None and world_size() == 1
                and not is_recurrent(self.policy))

    def minibatch_step(self, flat: FlatBatch, idx: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(loss, stats, grad_norm)`` of the minibatch ``idx`` after its optimiser step: :attr:`minibatch`'s
        clipped gradients into ``.grad`` (each replaces the last, so nothing is zeroed) and the fused Adam step
        (``optimizer.step()`` for its first, which makes its state, or another optimiser)."""
        loss, stats, grad_norm, grads = self.minibatch(flat, idx, self.gather_frames(flat, idx))
        for p, g in zip(self.params, grads):
            p.grad = g
        self._optimizer_step(None)
        return loss, stats, grad_norm

    def gather_frames(self, flat: FlatBatch, idx: Tensor) -> dict[str, Tensor]:
        """The minibatch ``idx``'s observation fields stored as ``bool``/``uint8`` (frames), gathered and cast
        to float32 eagerly, for a compiled loss on the CPU; ``{}`` otherwise (the loss gathers them itself).
        Boolean frames stay boolean for a policy that takes them (``takes_bool_frames``).

        Inductor's CPU code for a row gather of boolean frames fused with their cast to float runs several times
        slower than ATen's row copy and its cast from bytes (benchmarks/HISTORY.md section 45); the float values
        are the same (:func:`~rl_gpu.nn.normalization.to_float`), and only one minibatch exists as floats."""
        if self.mode == "off" or idx.device.type != "cpu":
            return {}
        keep_bool = getattr(self.policy, "takes_bool_frames", lambda: False)()
        return {k: v.index_select(0, idx) if keep_bool and v.dtype == torch.bool else to_float(v.index_select(0, idx))
                for k in FRAME_FIELDS if (v := getattr(flat, k)) is not None and v.dtype in (torch.bool, torch.uint8)}

    def backward(self, loss: Tensor) -> None:
        (loss if self.scaler is None else self.scaler.scale_loss(loss)).backward()

    def _optimizer_step(self, keep: Tensor | None) -> None:
        """The optimiser step on the gradients in ``.grad``, undone where ``keep`` is False (:func:`undoable_step`)."""
        if keep is None and fused_adam_ready(self.optimizer):
            # The same fused kernel as optimizer.step(), without the Python around it (several times the kernel's
            # time for small networks, once per minibatch).
            fused_adam_steps([self.optimizer])
        else:
            undoable_step(self.optimizer, self.params, keep)

    def step(self, keep: Tensor | None) -> Tensor:
        if self.scaler is None:
            if self.anchor is not None:
                self.anchor.add_grad()
            grad_norm = clip_global_grad_norm(self.params, self.config.max_grad_norm)
            self._optimizer_step(keep)
            return grad_norm
        # fp16: every rank unscales the same averaged gradients, so all of them skip (or take) the same steps.
        grads = [p.grad for p in self.params if p.grad is not None]
        all_reduce_grads_(grads)
        finite = self.scaler.unscale(grads)
        if self.anchor is not None:
            self.anchor.add_grad()
        grad_norm = clip_grad_norm(grads, self.config.max_grad_norm)
        undoable_step(self.optimizer, self.params, finite if keep is None else keep & finite)
        self.scaler.update(finite)
        return grad_norm


def draw_permutations(size: int, epochs: int, generator: torch.Generator | None, device: torch.device) -> Tensor:
    """``[E, B]`` int64: one random permutation of the slots per epoch, drawn on ``device``."""
    return torch.stack([torch.randperm(size, generator=generator, device=device) for _ in range(epochs)])


def run_update(units: UpdateUnits, batch: Rollout, permutations: Tensor, weighted: bool = True) -> UpdateMetrics:
    """One PPO update on ``batch`` with the given ``[E, B]`` minibatch permutations; no host synchronisation.

    ``weighted=False`` is for rollouts whose weights are all 1 (single-player continuing collection): the same
    result with fewer operations (plain means, and a GAE recursion of two operations per step instead of 16).
    """
    config, policy, optimizer = units.config, units.policy, units.optimizer
    if units.value_norm is None:
        advantage, returns = units.gae(batch, weighted)
    else:
        # The critic outputs normalised values: advantages from the values in the task's units, then the targets
        # join the statistics and the critic learns them normalised (the clipped loss compares normalised values).
        norm = units.value_norm
        in_units = dataclasses.replace(batch, value=norm.denormalize(batch.value),
                                       final_value=norm.denormalize(batch.final_value),
                                       bootstrap_value=norm.denormalize(batch.bootstrap_value))
        advantage, returns = units.gae(in_units, weighted)
        norm.update(returns, batch.weight if weighted else None)
        returns = norm.normalize(returns)
    if units.mirror is not None:
        batch, advantage, returns = with_mirror_image(policy, units.mirror, batch, advantage, returns)
    if is_recurrent(policy):
        # Minibatches of whole columns replayed as sequences (rl_gpu.algos.ppo.sequences); permutations over N.
        data = sequence_batch(batch, advantage, returns, policy.is_continuous, weighted)
        size, loss_of, splits, steps = batch.num_envs, units.sequence_loss, 1, data.steps
    else:
        data = steps = flatten_batch(batch, advantage, returns, policy.is_continuous, weighted)
        size = data.returns.shape[0]
        splits = micro_batches(size // config.num_minibatches, config)

        def loss_of(flat: FlatBatch, idx: Tensor) -> tuple[Tensor, Tensor]:
            return units.loss(flat, idx, None, units.gather_frames(flat, idx))
    mb_size = size // config.num_minibatches
    device = batch.reward.device
    keep = torch.ones((), dtype=torch.bool, device=device) if config.target_kl is not None else None
    fused = units.fused_minibatches(splits, keep)
    totals = torch.zeros(len(MINIBATCH_ROW), device=device)
    count = torch.zeros((), device=device)
    kl_index = LOSS_STATS.index("approx_kl")
    # A static count (a Python int): compiled and graph-captured updates stay one fixed sequence of steps.
    steps_left = config.update_epochs * config.num_minibatches if units.max_steps is None else units.max_steps
    for epoch in range(config.update_epochs):
        for start in range(0, size, mb_size):
            if steps_left == 0:
                break
            steps_left -= 1
            idx = permutations[epoch, start:start + mb_size]
            if fused:
                # The first minibatch checks the unit's guards; the others have the same inputs' structure.
                with contextlib.nullcontext() if epoch == start == 0 else guards_checked_once():
                    loss, stats, grad_norm = units.minibatch_step(data, idx)
                totals = totals + torch.cat([loss[None], stats, grad_norm[None]])
                count = count + 1.0
                continue
            optimizer.zero_grad(set_to_none=True)
            if splits == 1:
                loss, stats = loss_of(data, idx)
                units.backward(loss)
            else:
                # Micro-batches: each one's loss is its share of the minibatch's (same denominators and
                # advantage statistics), so the gradients accumulated in .grad are the minibatch's.
                scale = units.scale(data, idx)
                loss, stats = 0.0, 0.0
                for part in idx.tensor_split(splits):
                    part_loss, part_stats = units.loss(data, part, scale, units.gather_frames(data, part))
                    units.backward(part_loss)
                    loss, stats = loss + part_loss.detach(), stats + part_stats
            if units.kl_schedule is not None:
                lr = optimizer.param_groups[0]["lr"]
                set_learning_rate(optimizer, adapt_to_kl(lr, all_reduce_mean(stats[kl_index]), units.kl_schedule))
            grad_norm = units.step(keep)
            row = torch.cat([loss.detach()[None], stats, grad_norm.detach().float()[None]])
            applied = keep.float() if keep is not None else 1.0
            totals = totals + applied * row
            count = count + applied
        if keep is not None:
            # ``not (kl > target)`` rather than ``kl <= target``: a NaN KL keeps going, as a host check would.
            keep = keep & ~(all_reduce_mean(stats[kl_index]) > config.target_kl)
    means = totals / count
    ev = explained_variance(steps.value.reshape(-1), steps.returns.reshape(-1),
                            None if steps.weight is None else steps.weight.reshape(-1))
    return UpdateMetrics(explained_variance=ev, **{k: means[i] for i, k in enumerate(MINIBATCH_ROW)})


def check_minibatches(num_slots: int, config: PPOConfig) -> None:
    """Raise ``ValueError`` unless ``num_slots`` (T * N) split into ``num_minibatches`` equal minibatches."""
    if num_slots % config.num_minibatches:
        raise ValueError(
            f"the rollout's {num_slots} slots (T * N) are not divisible by "
            f"num_minibatches={config.num_minibatches}"
        )


def update_policy(
    policy: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Rollout,
    config: PPOConfig | None = None,
    generator: torch.Generator | None = None,
) -> UpdateMetrics:
    """One PPO update (``update_epochs`` passes of ``num_minibatches`` shuffled minibatches) on ``batch``.

    Advantages come from :func:`rl_gpu.data.advantages.compute_gae` with the values stored at collection time.
    ``generator`` (on the batch's device) drives the minibatch shuffling. Returns metrics as 0-dim tensors
    without synchronising with the host (``target_kl`` included). ``config.norm_reward`` needs statistics kept
    from one update to the next, which :class:`rl_gpu.algos.ppo.PPO` owns: here it is a ``ValueError``.
    """
    config = config if config is not None else PPOConfig()
    if config.norm_reward:
        raise ValueError("norm_reward keeps running statistics across updates: use rl_gpu.algos.ppo.PPO, "
                         "not update_policy")
    check_minibatches(batch.reward.numel(), config)
    permutations = draw_permutations(batch.reward.numel(), config.update_epochs, generator, batch.reward.device)
    return run_update(UpdateUnits(policy, optimizer, config), batch, permutations)
