"""What the training loop does differently under ``torchrun`` (K processes, one policy): each process (rank)
steps its own ``--num-envs`` rows with its own random streams, and the ranks agree on everything that decides
what happens next.

- Parameters start as rank 0's (:func:`broadcast_algorithm`) and stay identical: the algorithms average
  gradients before clipping, PPO averages the approximate KL that stops an epoch, and observation/return
  statistics merge every rank's batch (:mod:`rl_gpu.runtime.distributed`).
- An update's metrics are reduced over the ranks (:func:`reduce_metrics`): transitions and episodes summed,
  episode statistics weighted by episodes, losses averaged. A non-finite loss on any rank is non-finite on all.
- Evaluations are split: each rank plays its share of the episodes on its own seeds, and every rank summarises
  the episodes of all ranks together (:func:`split_episodes`, :func:`gather_episodes`), so validation decisions
  are the same everywhere.
- A stop signal on any rank is acted on by every rank at the same update boundary (:class:`RankStopRequest`).
- Only rank 0 writes files: ``last.pt`` and ``best.pt`` hold every rank's state (:func:`gather_payload`), and
  ``--resume`` gives each rank its own back (:func:`rank_trainer_state`). The other ranks log nothing.

Without a process group every function here is the identity, and a run is exactly a single-process run.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any, Self

import torch
from torch import Tensor, nn

from rl_gpu.algos.iteration import MetricLayout
from rl_gpu.algos.registry import algorithm_spec
from rl_gpu.core.errors import UsageError
from rl_gpu.core.seeding import derive_seed
from rl_gpu.runtime.checkpoint import CheckpointError
from rl_gpu.runtime.distributed import (
    agree_signal,
    all_gather_objects,
    broadcast_object,
    broadcast_parameters_,
    gather_objects,
    is_distributed,
    is_main_process,
    rank,
    world_size,
)
from rl_gpu.training.signals import StopRequest

REPEAT_WINDOW_S = 1.0
"""A second signal within this many seconds of the first counts once: a terminal's Ctrl-C reaches every
process directly and again through torchrun."""


def algorithm_seed(seed: int) -> int:
    """The seed of this rank's algorithm streams (sampling, shuffling, opponents): the run's seed on rank 0, so
    one process reproduces a plain run, a stream of its own on every other rank."""
    return seed if rank() == 0 else derive_seed(seed, "algorithm", rank())


def rank_log(log: Callable[[str], None]) -> Callable[[str], None]:
    """``log`` on rank 0; a function that prints nothing on the other ranks."""
    return log if is_main_process() else (lambda message: None)


def check_config(config) -> None:
    """Refuse what several processes cannot run (a :class:`UsageError` on every rank alike)."""
    if not is_distributed():
        return
    k = world_size()
    if len(config.seeds) > 1:
        raise UsageError(f"--seeds {' '.join(map(str, config.seeds))}: under torchrun the {k} processes train "
                         "one seed together; start one torchrun per seed")
    for flag in ("self_play", "parallel"):
        if getattr(config, flag, False):
            raise UsageError(f"--{flag.replace('_', '-')} cannot run under torchrun with {k} processes yet (its "
                             "state lives in one process); train it in one process")
    if not algorithm_spec(config.algo).torchrun:
        raise UsageError(f"--algo {config.algo} cannot run under torchrun with {k} processes (it trains in one "
                         "process: each process would repeat the same work); train it in one process")
    for flag, episodes in (("--eval-episodes", config.eval_episodes),
                           ("--final-eval-episodes", config.final_eval_episodes)):
        if episodes < k:
            raise UsageError(f"{flag} {episodes} is fewer than the {k} processes: each process plays a share of "
                             f"the episodes; give at least {k}")


def resolve_compile(mode: str, device: torch.device) -> str:
    """``--compile`` under several processes: the gradient and statistics all-reduces run between compiled
    units, never inside a captured CUDA graph, so ``cudagraphs`` is refused and ``auto`` means ``inductor`` on
    CUDA (``off`` on the CPU, as for one process)."""
    if not is_distributed():
        return mode
    if mode == "cudagraphs":
        raise UsageError(f"--compile cudagraphs cannot run under torchrun with {world_size()} processes: the "
                         "all-reduces between ranks cannot live inside a captured CUDA graph; use --compile "
                         "inductor (what auto means here) or off")
    if mode == "auto" and device.type == "cuda":
        return "inductor"
    return mode


def share_start(algo: Any, seed: int) -> None:
    """Every rank starts from rank 0's parameters (:func:`broadcast_algorithm`); then each rank but 0 reseeds
    torch's global generator with a stream of its own."""
    broadcast_algorithm(algo)
    if rank():
        torch.manual_seed(derive_seed(seed, "torch", rank()))


def broadcast_algorithm(algo: Any) -> None:
    """Give every rank rank 0's parameters: those of the policy and of every other network or parameter the
    algorithm holds (critics, targets, SAC's entropy coefficient). Buffers start as constants everywhere."""
    if not is_distributed():
        return
    seen: set[int] = set()
    tensors: list[Tensor] = []
    for value in (algo.policy, *vars(algo).values()):
        params = value.parameters() if isinstance(value, nn.Module) else (
            [value] if isinstance(value, nn.Parameter) else [])
        for p in params:
            if id(p) not in seen:
                seen.add(id(p))
                tensors.append(p)
    with torch.no_grad():
        broadcast_parameters_(tensors)


def reduce_metrics(values: Tensor, layout: MetricLayout) -> Tensor:
    """One update's ``[len(layout.names)]`` metrics over every rank (one all-reduce, on the device): counts
    summed, means over episodes weighted by each rank's episodes, the rest averaged (``layout`` says which is
    which, :meth:`~rl_gpu.algos.iteration.Iteration.layout`)."""
    if not is_distributed():
        return values
    import torch.distributed as dist

    episodes = values[layout.names.index("episodes")]
    per_episode, summed = _metric_kinds(layout, values.device)
    weight = torch.where(per_episode, episodes, torch.ones_like(values))
    packed = torch.cat([torch.where(weight > 0, values * weight, torch.zeros_like(values)), weight])
    dist.all_reduce(packed)
    total, weights = packed.chunk(2)
    return torch.where(summed, total, total / weights)


@functools.lru_cache(maxsize=8)
def _metric_kinds(layout: MetricLayout, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(per-episode, summed)`` boolean masks over the layout's names, made once per run (no copy to the device
    per update)."""
    return torch.tensor(layout.per_episode, device=device), torch.tensor(layout.summed, device=device)


def split_episodes(episodes: int) -> int:
    """This rank's share of ``episodes`` (the first ``episodes % K`` ranks play one more)."""
    k = world_size()
    return episodes // k + (1 if rank() < episodes % k else 0)


def gather_episodes(*columns: Tensor) -> tuple[Tensor, ...]:
    """Every rank's ``[E_k]`` columns (episode returns, lengths, seats, ...), each concatenated in rank order (CPU
    tensors)."""
    parts = all_gather_objects(tuple(c.cpu() for c in columns))
    return tuple(torch.cat([p[i] for p in parts]) for i in range(len(columns)))


def _to_cpu(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def gather_payload(payload: dict) -> dict | None:
    """A checkpoint payload for rank 0 to write, None on the other ranks: rank 0's own, plus ``world_size``
    and ``rank_trainers`` (ranks 1..K-1's trainer states: their environments, random streams and running
    returns). Every rank must call it at the same point."""
    if not is_distributed():
        return payload
    states = gather_objects(_to_cpu(payload["trainer"]) if rank() else None)
    if states is None:
        return None
    return {**payload, "world_size": world_size(), "rank_trainers": states[1:]}


def rank_trainer_state(payload: dict, path) -> dict:
    """This rank's trainer state in a checkpoint, refusing one written by a different number of processes."""
    saved = int(payload.get("world_size", 1))
    if saved != world_size():
        raise CheckpointError(f"{path} was written by {saved} process{'es' if saved > 1 else ''} and this run "
                              f"has {world_size()}: each process's environments and random streams are in it, "
                              f"so resume with the same number (torchrun --nproc-per-node x --nnodes = {saved})")
    return payload["trainer"] if rank() == 0 else payload["rank_trainers"][rank() - 1]


def read_on_main(read: Callable[[], Any]) -> Any:
    """``read()`` on rank 0 (where the files are), its result on every rank (tensors on the CPU)."""
    return broadcast_object(read() if is_main_process() else None)


@contextlib.contextmanager
def agreed_errors(config) -> Iterator[None]:
    """Checks that every rank runs before anything is written, :func:`check_config` first: a refusal on any
    rank is raised on every rank (so none goes on to wait in a collective for one that stopped)."""
    if not is_distributed():
        yield
        return
    check_config(config)  # the same configuration everywhere: every rank refuses it alike
    error: BaseException | None = None
    try:
        yield
    except (UsageError, CheckpointError) as e:
        error = e
    messages = all_gather_objects(None if error is None else (type(error).__name__, str(error)))
    if error is not None:
        raise error
    first = next(((r, m) for r, m in enumerate(messages) if m is not None), None)
    if first is not None:
        r, (kind, text) = first
        raise (CheckpointError if kind == "CheckpointError" else UsageError)(f"process {r}: {text}")


class QuietLogger:
    """What ranks other than 0 log through: the :class:`~rl_gpu.training.run_logger.RunLogger` calls the loop
    makes, writing and printing nothing."""

    def phase(self, name: str) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def take_phases(self) -> list:
        return []

    def log_update(self, *args: Any, **kwargs: Any) -> None:
        pass

    def log_validation(self, *args: Any, **kwargs: Any) -> None:
        pass

    def print(self, message: str) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class RankStopRequest(StopRequest):
    """SIGINT/SIGTERM under several processes: a signal is only noted; :meth:`agree` (at each update boundary)
    makes every rank act on a stop any rank received, so all save and exit together and none waits in a
    collective for one that left. An evaluation is never cut short (the ranks evaluate together); a second
    signal (after :data:`REPEAT_WINDOW_S`) still interrupts at once."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: int | None = None
        self._first_at = 0.0

    @contextlib.contextmanager
    def abortable(self) -> Iterator[None]:
        yield

    def _handle(self, signum, frame) -> None:
        now = time.monotonic()
        if self.pending is not None:
            if now - self._first_at < REPEAT_WINDOW_S:
                return
            raise KeyboardInterrupt
        self.pending, self._first_at = signum, now

    def agree(self) -> None:
        agreed = agree_signal(self.pending)
        self.signum = signal.Signals(agreed) if agreed is not None else None


def stop_request() -> StopRequest:
    """The stop handler for this process: :class:`RankStopRequest` under several processes."""
    return RankStopRequest() if is_distributed() else StopRequest()
