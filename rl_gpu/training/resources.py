"""Refusing a run that cannot fit in memory before anything is allocated or written.

A huge ``--num-envs`` or ``--hidden-sizes`` would otherwise be found out by the allocator (a crash, or the
machine swapping for minutes). The estimate counts the big buffers only, in float32 elements:

- the algorithm's storage, which its configuration counts (``storage_elements``): PPO's rollout storage
  ``N * T * (obs + 12)`` (observations plus ~12 scalars per slot: action, log-prob, value, reward, done flags,
  advantages, returns, masks) and the activations of one minibatch kept for the backward pass
  (``rows / minibatches * sum(hidden) * 2 nets * 2``); SAC's and TD3's replay buffer, one iteration's
  transitions and one batch's activations;
- the environments' own state: ``N * (obs + 12)``;
- network parameters: for the actor and the critic, ``sum(w_i * w_{i+1} + w_{i+1})`` over their layer widths
  ``[obs, *hidden, out]``, times 6 copies (weights, gradients, Adam's two moments, the frozen initial policy,
  best.pt's template).
"""

from __future__ import annotations

import torch

from rl_gpu.algos.registry import algorithm_spec
from rl_gpu.core.errors import UsageError
from rl_gpu.core.types import EnvSpec
from rl_gpu.runtime.hardware import host_memory_bytes
from rl_gpu.training.config import TrainConfig

BYTES_PER_ELEMENT = 4
PARAM_COPIES = 6
SLOT_SCALARS = 12


def _layer_elements(widths: list[int]) -> int:
    return sum(a * b + b for a, b in zip(widths, widths[1:]))


def _num_steps(config: TrainConfig, spec: EnvSpec) -> int:
    if config.num_steps is not None:
        return config.num_steps
    return algorithm_spec(config.algo).num_steps_for(spec)


def estimate_bytes(config: TrainConfig, spec: EnvSpec) -> int:
    """About how many bytes a run of ``config`` on environments described by ``spec`` needs (see the module
    docstring for what is counted)."""
    num_steps = _num_steps(config, spec)
    obs, hidden = spec.obs_size, list(config.hidden_sizes)
    out = max(spec.action_size, 1)
    count = getattr(config.algo_config(), "storage_elements", None)  # an algorithm without big storage has none
    storage = count(config.num_envs, num_steps, obs, out, tuple(hidden)) if callable(count) else 0
    env_state = config.num_envs * (obs + SLOT_SCALARS)
    params = _layer_elements([obs, *hidden, out]) + _layer_elements([obs, *hidden, 1])
    return (storage + env_state + PARAM_COPIES * params) * BYTES_PER_ELEMENT


def available_bytes(device: torch.device) -> int:
    """Memory a run on ``device`` can use: the free memory of a CUDA device, else the machine's physical
    memory."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    return host_memory_bytes()


def _gib(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB"


def check_memory(config: TrainConfig, spec: EnvSpec, device: torch.device) -> None:
    """Raise :class:`UsageError` if the run would need more memory than ``device`` has."""
    need, have = estimate_bytes(config, spec), available_bytes(device)
    if need > have:
        what = "free on" if device.type == "cuda" else "of memory on"
        raise UsageError(
            f"--num-envs {config.num_envs:,} x --num-steps {_num_steps(config, spec):,} with --hidden-sizes "
            f"{' '.join(str(h) for h in config.hidden_sizes)}{_buffer(config)} needs about {_gib(need)} "
            f"({'replay' if _buffer(config) else 'rollout'} storage, networks, optimiser state), more than "
            f"the {_gib(have)} {what} this machine's {device}; lower --num-envs, --num-steps"
            f"{', --buffer-size, --batch-size' if _buffer(config) else ''} or --hidden-sizes")


def _buffer(config: TrainConfig) -> str:
    params = config.algo_config()
    size, batch = getattr(params, "buffer_size", None), getattr(params, "batch_size", None)
    return "" if size is None else f", --buffer-size {size:,} and --batch-size {batch:,}"
