"""How the hot loop runs: eager, compiled with Inductor, or replayed as CUDA graphs (``--compile``).

The loop is cut into units with static shapes and no randomness inside: the rollout step (policy + opponent +
environment transition + auto-reset + the step's record), GAE and the minibatch loss (forward; its backward is
compiled with it by AOTAutograd). The optimiser step stays eager: fused Adam on CPU, ``capturable`` Adam on CUDA,
where it is captured with the rest. Every random number (sampling noise, fresh episode
starts, minibatch permutations) is drawn eagerly before the units run, in the order the eager reference code
draws it, so the three modes give the same results for the same generator states.

Modes:

- ``off``: eager PyTorch.
- ``inductor``: each unit is ``torch.compile``-d (Inductor, ``dynamic=False``): the first iteration pays the
  compile time (reported separately by ``rl-gpu bench``), later ones run fused kernels.
- ``cudagraphs`` (CUDA only): Inductor units, and :class:`CUDAGraphRunner` captures one whole iteration
  (T rollout steps, GAE, every minibatch's forward, backward, gradient clipping and Adam step with
  ``capturable=True``, the observation normaliser) into a single CUDA graph that is replayed each iteration. Only
  the random draws into static buffers and the learning-rate ``fill_`` run outside it.
- ``auto``: ``cudagraphs`` on CUDA; on CPU :data:`CPU_AUTO`.
"""

from __future__ import annotations

import contextlib
import itertools
import types
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import torch

from rl_gpu.core.pytree import clone_tree, copy_tree_

CompileMode = Literal["auto", "off", "inductor", "cudagraphs"]
MODES: tuple[str, ...] = ("auto", "off", "inductor", "cudagraphs")

CPU_AUTO = "off"
"""What ``auto`` means on CPU: a cold compile costs more than the short runs CPU training is used for repay
(the measurement is in benchmarks/README.md); ``--compile inductor`` is the choice for long CPU runs."""

F = TypeVar("F", bound=Callable[..., Any])


def resolve_compile(mode: str, device: torch.device | str) -> str:
    """``mode`` with ``auto`` resolved for ``device``; ``cudagraphs`` without CUDA is a ``ValueError``."""
    device = torch.device(device)
    if mode not in MODES:
        raise ValueError(f"compile mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "auto":
        return "cudagraphs" if device.type == "cuda" else CPU_AUTO
    if mode == "cudagraphs" and device.type != "cuda":
        raise ValueError(f"--compile cudagraphs needs a CUDA device, the loop runs on {device}")
    return mode


def env_simd(env: Any) -> bool:
    """Whether a compiled unit that steps ``env`` keeps Inductor's SIMD CPU kernels throughout
    (``env.compile_simd``, default True; False: its float loops only)."""
    return bool(getattr(env, "compile_simd", True))


def compile_unit(fn: F, mode: str, *, simd: bool = True, autograd: bool = False, fma: bool = False) -> F:
    """``fn`` itself (``off``) or compiled with Inductor for static shapes (every other mode).

    ``fullgraph=True``: a unit that would break the graph (a host read, a data-dependent shape) fails loudly
    instead of silently falling back to eager code. ``simd`` False: a unit that steps a grid game (a unit stepping
    an environment passes :func:`env_simd`), whose CPU kernels are plain loops but for the float ones
    (:mod:`rl_gpu.runtime.inductor_loops`). ``autograd``: ``fn``
    calls ``torch.autograd.grad``, traced into the unit's graph (TorchDynamo's ``trace_autograd_ops``, set
    around every call of the unit, so a recompilation traces it too) rather than a graph break. ``fma``: its C++
    kernels may contract multiplies and adds into fused multiply-adds (:func:`~rl_gpu.runtime.inductor_passes.
    fused_multiply_add_options`; results equal eager code's to float rounding, not bit for bit).
    """
    if mode == "off":
        return fn
    if mode not in ("inductor", "cudagraphs"):
        raise ValueError(f"unresolved compile mode {mode!r}; call resolve_compile first")
    try:  # here, not at the top: torch._inductor takes seconds to import
        from rl_gpu.runtime.inductor_loops import grid_unit_options
        from rl_gpu.runtime.inductor_passes import INDUCTOR_OPTIONS, fused_multiply_add_options
    except ImportError:  # torch < 2.6 has no cacheable custom passes; the units compile without the pass
        INDUCTOR_OPTIONS, grid_unit_options = {}, lambda: {"cpp.simdlen": 1}
        fused_multiply_add_options = dict
    options = INDUCTOR_OPTIONS if simd else grid_unit_options()
    if fma:
        options = {**options, **fused_multiply_add_options()}
    compiled = torch.compile(_own_code(fn), dynamic=False, fullgraph=True, options=options)
    return torch._dynamo.config.patch(trace_autograd_ops=True)(compiled) if autograd else compiled


def guards_checked_once() -> contextlib.AbstractContextManager:
    """A context in which compiled units skip their guard checks (TorchDynamo's ``skip_guard_eval_unsafe``: with
    one cache entry none, with several only those that tell them apart): for calls whose inputs have the structure,
    shapes, strides and dtypes of calls already made (a rollout's steps after its second; checking them again cost
    a tenth of a small batch's compiled step). Where another stance is set (a user's ``force_eager``, say), or this
    PyTorch has no such stance, the guards run as usual."""
    stance = getattr(getattr(torch._dynamo, "eval_frame", None), "_stance", None)
    if getattr(stance, "stance", None) != "default" or getattr(stance, "backend", None) is not None:
        return contextlib.nullcontext()
    try:  # torch < 2.6: no set_stance, or none with this flag
        return torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)
    except (AttributeError, TypeError):
        return contextlib.nullcontext()


def _own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` behind a wrapper with a code object of its own.

    Dynamo caches compiled graphs per code object and allows 8 per object: every unit built from the same
    function (a ``partial`` of ``rollout_step`` per environment, a loss per policy) would share one cache and the
    ninth would fail. A fresh code object gives each unit its own cache, freed with the unit.
    """

    def unit(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    code = unit.__code__.replace(co_name=f"unit_{next(_UNIT_IDS)}")
    return types.FunctionType(code, unit.__globals__, code.co_name, unit.__defaults__, unit.__closure__)


_UNIT_IDS = itertools.count()


class CUDAGraphRunner:
    """Run ``fn()`` (which reads only static input buffers) eagerly ``warmup`` times on a side stream, then
    capture it into one CUDA graph and replay that graph on every later call.

    The eager warm-up calls are real calls (their results are returned), so nothing is run twice: the capture
    records without executing, and the replay right after it performs that call. Outputs of a replay live in
    the graph's memory pool and are overwritten by the next replay.
    """

    def __init__(self, fn: Callable[[], Any], warmup: int = 1) -> None:
        self.fn = fn
        self.warmup = warmup
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.output: Any = None

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def __call__(self) -> Any:
        self.calls += 1
        if self.graph is None and self.calls <= self.warmup:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                output = self.fn()
            torch.cuda.current_stream().wait_stream(side)
            return output
        if self.graph is None:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.output = self.fn()
            self.graph = graph
        self.graph.replay()
        return self.output


class GraphedFunction:
    """``fn(*inputs)`` replayed as a CUDA graph. ``inputs`` are nests of tuples/dataclasses of tensors; each call
    copies them into static buffers (allocated on the first call) that the captured graph reads. Warm-up and
    capture as in :class:`CUDAGraphRunner`; outputs are the graph's and are overwritten by the next call."""

    def __init__(self, fn: Callable[..., Any], warmup: int = 1) -> None:
        self.fn = fn
        self.warmup = warmup
        self.static: tuple | None = None
        self.runner: CUDAGraphRunner | None = None

    def __call__(self, *inputs: Any) -> Any:
        if self.static is None:
            self.static = clone_tree(inputs)
            static = self.static
            self.runner = CUDAGraphRunner(lambda: self.fn(*static), self.warmup)
        else:
            copy_tree_(self.static, inputs)
        return self.runner()
