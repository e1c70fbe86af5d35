"""A linear layer on boolean frames for the CPU: ``x W^T + b`` summing only the weight columns of the set inputs.

MinAtar's frames (and board encodings) are boolean vectors with a few percent of their entries set; a dense
product multiplies every zero. For ``x`` ``[R, I]`` of bools (0 or 1),

    (x W^T + b)[r] = b + sum_{c: x[r, c]} W[:, c],       (g^T x)[:, c] = sum_{r: x[r, c]} g[r],

so the forward pass and the weight gradient each add one ``O``-wide row per set entry: ``nnz x O`` additions
where the dense products take ``R x I x O`` multiply-adds each. ATen has no fast form of either sum (its sparse
CSR product and ``embedding_bag`` need the set entries' indices, and ``nonzero`` alone costs more than the dense
product), so a small C kernel scans each row's bytes eight at a time and adds the rows of the set ones. It is
compiled once per machine with the system's C compiler into the user's cache folder; where there is no compiler
(or anything about it fails) the layer is ``F.linear`` on the frames as floats, and :func:`available` says so.

:func:`frame_linear` is a custom operator (``rl_gpu::frame_linear``) with its own autograd formula, so compiled
code (``--compile inductor``) calls it as one opaque node. The sums run in another order than a BLAS product's,
so results can differ from ``F.linear`` by float32 rounding (tested to 1e-5).

Shape legend: R = rows, I = inputs (frame cells), O = outputs.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import platform
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.nn import functional as F

_SOURCE = r"""
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define RL_GPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RL_GPU_CLONES
#endif

/* Runs BODY with c = each set column of row r of x[R, I], the row's bytes read eight at a time (a word of
   zeros costs one test; a set byte is found with a count of trailing zeros). */
#define FOR_EACH_SET(BODY)                                                              \
    {                                                                                   \
        const uint8_t *xr = x + r * I;                                                  \
        int64_t c0 = 0;                                                                 \
        for (; c0 + 8 <= I; c0 += 8) {                                                  \
            uint64_t word;                                                              \
            memcpy(&word, xr + c0, 8);                                                  \
            while (word) {                                                              \
                int64_t c = c0 + (__builtin_ctzll(word) >> 3);                          \
                BODY;                                                                   \
                word &= word - 1;                                                       \
            }                                                                           \
        }                                                                               \
        for (int64_t c = c0; c < I; ++c) if (xr[c]) { BODY; }                           \
    }

/* The forward pass with O a constant: a row's sums stay in registers. */
#define FORWARD_OF(N)                                                                                     \
    static inline void forward_##N(const uint8_t *x, const float *wt, const float *bias, float *out,    \
                                   int64_t R, int64_t I) {                                              \
        for (int64_t r = 0; r < R; ++r) {                                                               \
            float acc[N];                                                                               \
            for (int k = 0; k < N; ++k) acc[k] = bias[k];                                               \
            FOR_EACH_SET(for (int k = 0; k < N; ++k) acc[k] += wt[c * N + k])                           \
            for (int k = 0; k < N; ++k) out[r * N + k] = acc[k];                                        \
        }                                                                                               \
    }

/* The weight gradient with O a constant: a row of the gradient stays in registers. */
#define GRAD_OF(N)                                                                                        \
    static inline void grad_##N(const uint8_t *x, const float *grad, float *grad_wt, int64_t R,         \
                                int64_t I) {                                                            \
        for (int64_t r = 0; r < R; ++r) {                                                               \
            float g[N];                                                                                 \
            for (int k = 0; k < N; ++k) g[k] = grad[r * N + k];                                         \
            FOR_EACH_SET(for (int k = 0; k < N; ++k) grad_wt[c * N + k] += g[k])                        \
        }                                                                                               \
    }

FORWARD_OF(16)
FORWARD_OF(32)
FORWARD_OF(64)
GRAD_OF(16)
GRAD_OF(32)
GRAD_OF(64)

/* The forward pass of a wider layer whose width is a multiple of 64 (128, 256 hidden units): a row's set columns
   are listed once, then summed 64 outputs at a time, those 64 in eight vector registers (a plain loop over all O
   sums keeps them in memory). idx: scratch of I entries. */
typedef float f8 __attribute__((vector_size(32)));
#define LOAD8(v, p) memcpy(&(v), (p), 32)
#define ROW64_DO(OP, p)                                                                                     \
    { f8 t; LOAD8(t, (p)); OP(a0); LOAD8(t, (p) + 8); OP(a1); LOAD8(t, (p) + 16); OP(a2);                 \
      LOAD8(t, (p) + 24); OP(a3); LOAD8(t, (p) + 32); OP(a4); LOAD8(t, (p) + 40); OP(a5);                  \
      LOAD8(t, (p) + 48); OP(a6); LOAD8(t, (p) + 56); OP(a7); }
#define ADD_T(a) a += t
#define SET_T(a) a = t

static inline int64_t list_set(const uint8_t *x, int64_t r, int64_t I, int64_t *idx) {
    int64_t n = 0;
    FOR_EACH_SET(idx[n++] = c)
    return n;
}

static inline void forward_blocks(const uint8_t *x, const float *wt, const float *bias, float *out, int64_t R,
                                  int64_t I, int64_t O, int64_t *idx) {
    for (int64_t r = 0; r < R; ++r) {
        int64_t n = list_set(x, r, I, idx);
        for (int64_t j = 0; j < O; j += 64) {
            f8 a0, a1, a2, a3, a4, a5, a6, a7;
            ROW64_DO(SET_T, bias + j)
            for (int64_t m = 0; m < n; ++m) ROW64_DO(ADD_T, wt + idx[m] * O + j)
            float *o = out + r * O + j;
            memcpy(o, &a0, 32); memcpy(o + 8, &a1, 32); memcpy(o + 16, &a2, 32); memcpy(o + 24, &a3, 32);
            memcpy(o + 32, &a4, 32); memcpy(o + 40, &a5, 32); memcpy(o + 48, &a6, 32); memcpy(o + 56, &a7, 32);
        }
    }
}

/* out[R, O] = bias + the sum of the rows c of wt[I, O] (the weight transposed: one contiguous row per input cell)
   with x[r, c] set. idx: scratch of I entries, read where O is a multiple of 64 above 64 (else may be NULL). */
RL_GPU_CLONES
void rl_gpu_frame_linear(const uint8_t *x, const float *wt, const float *bias, float *out, int64_t *idx,
                         int64_t R, int64_t I, int64_t O) {
    switch (O) {
    case 16: forward_16(x, wt, bias, out, R, I); return;
    case 32: forward_32(x, wt, bias, out, R, I); return;
    case 64: forward_64(x, wt, bias, out, R, I); return;
    }
    if (O % 64 == 0) {
        forward_blocks(x, wt, bias, out, R, I, O, idx);
        return;
    }
    for (int64_t r = 0; r < R; ++r) {
        float *o = out + r * O;
        memcpy(o, bias, (size_t)O * sizeof(float));
        FOR_EACH_SET(for (int64_t k = 0; k < O; ++k) o[k] += wt[c * O + k])
    }
}

/* grad_wt[I, O] (the weight's gradient transposed): row c the sum of the rows r of grad[R, O] with x[r, c] set. */
RL_GPU_CLONES
void rl_gpu_frame_linear_grad(const uint8_t *x, const float *grad, float *grad_wt, int64_t R, int64_t I,
                              int64_t O) {
    memset(grad_wt, 0, (size_t)(I * O) * sizeof(float));
    switch (O) {
    case 16: grad_16(x, grad, grad_wt, R, I); return;
    case 32: grad_32(x, grad, grad_wt, R, I); return;
    case 64: grad_64(x, grad, grad_wt, R, I); return;
    }
    for (int64_t r = 0; r < R; ++r) {
        const float *g = grad + r * O;
        FOR_EACH_SET(for (int64_t k = 0; k < O; ++k) grad_wt[c * O + k] += g[k])
    }
}
"""

_FLAGS = ["-O3", "-std=c11", "-shared", "-fPIC"]


def _cache_dir() -> Path:
    """The folder the compiled kernel is kept in: ``$RL_GPU_CACHE_DIR``, else ``$XDG_CACHE_HOME/rl_gpu`` or
    ``~/.cache/rl_gpu``."""
    if os.environ.get("RL_GPU_CACHE_DIR"):
        return Path(os.environ["RL_GPU_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rl_gpu"


def _private(path: Path, kind: int) -> bool:
    """``path`` is a real folder or file (``kind``: ``stat.S_IFDIR`` or ``stat.S_IFREG``, not a link) owned by
    this user that nobody else may write to: a library loaded from it runs as this user."""
    st = path.lstat()
    return (stat.S_IFMT(st.st_mode) == kind and st.st_uid == os.getuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The compiled kernel, built on the first call (once per machine: the file name holds a hash of the source,
    flags, compiler and machine); None where it cannot be built or loaded."""
    try:
        compiler = shlex.split(os.environ.get("CC", ""))  # "ccache gcc" and the like: a command and its arguments
    except ValueError:  # unbalanced quotes
        return None
    if not compiler:
        found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        compiler = [found] if found else []
    # The kernel finds a set byte from the lowest set bit of a little-endian word.
    if not compiler or platform.system() != "Linux" or not hasattr(os, "getuid") or sys.byteorder != "little":
        return None
    key = hashlib.sha256("\0".join([_SOURCE, *_FLAGS, *compiler, platform.machine()]).encode()).hexdigest()[:16]
    try:
        folder = _cache_dir()
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(folder, stat.S_IFDIR):
            return None
        path = folder / f"frame_linear_{key}.so"
        if not path.exists() and not path.is_symlink():
            # Built in a folder of its own and moved into place in one step: processes starting together each
            # build and the last move wins, every one of them a whole library.
            with tempfile.TemporaryDirectory(dir=folder) as work:
                src, out = Path(work) / "frame_linear.c", Path(work) / "frame_linear.so"
                src.write_text(_SOURCE)
                subprocess.run([*compiler, *_FLAGS, str(src), "-o", str(out)], check=True, capture_output=True,
                               timeout=120)
                os.replace(out, path)
        if not _private(path, stat.S_IFREG):
            return None
        library = ctypes.CDLL(str(path))
    except (OSError, RuntimeError, subprocess.SubprocessError):  # RuntimeError: no home folder
        return None
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    library.rl_gpu_frame_linear.argtypes = [ptr, ptr, ptr, ptr, ptr, i64, i64, i64]
    library.rl_gpu_frame_linear.restype = None
    library.rl_gpu_frame_linear_grad.argtypes = [ptr, ptr, ptr, i64, i64, i64]
    library.rl_gpu_frame_linear_grad.restype = None
    return library


def available() -> bool:
    """The kernel is built and loaded on this machine (else :func:`frame_linear` runs ``F.linear``)."""
    return _library() is not None


USE_FRAME_KERNEL = True
"""Let networks take :func:`frame_linear` on boolean frames where it applies (a switch for benchmarks and
tests)."""


def ready() -> bool:
    """The kernel is built and torch runs on one thread (a constant to compiled code: a graph traced with the
    kernel keeps it if the thread count changes later)."""
    return torch.get_num_threads() == 1 and available()


# What torch.compiler.assume_constant_result does, without importing TorchDynamo with this module (1.5 s at every
# start of the command line); tests/nn/test_frame_kernels.py checks the decorator still sets this mark.
ready._dynamo_marked_constant = True


PAIR_FIRST_LAYERS = True
"""Let two networks' first layers on the same frames run as one kernel call where neither is trained
(:func:`pair_linear`; a switch for benchmarks and tests)."""


FRAME_FROM = (128, 256)
"""The kernel runs from this many inputs (I) and rows (R) where the weight is trained (the operator with its
autograd rule): below either its call's fixed cost (tens of microseconds) is more than the dense product's."""

INFER_FROM = 32
"""Eager code whose weight is not trained (no gradients: collection, evaluation) runs the kernel from this many
rows (and ``FRAME_FROM[0]`` inputs): its operator without an autograd rule costs a few microseconds a call.
Compiled code keeps ``FRAME_FROM``: there the dense product's one cast of the frames serves every network that
reads them (an actor's and a critic's), and below it two kernel calls (each with its dispatch into Python) cost
as much as the two products; one call for both, :func:`pair_linear`, costs less."""


def _trained(weight: Tensor, bias: Tensor) -> bool:
    return torch.is_grad_enabled() and (weight.requires_grad or bias.requires_grad)


def _rows_from(weight: Tensor, bias: Tensor) -> int:
    return FRAME_FROM[1] if _trained(weight, bias) or torch.compiler.is_compiling() else INFER_FROM


def applies(x: Tensor, weight: Tensor, bias: Tensor | None) -> bool:
    """``F.linear(x, weight, bias)`` on boolean ``x`` may run as :func:`frame_linear`: plain float32 CPU tensors
    (not a functorch transform's wrappers, for which the operator has no rule) of at least ``FRAME_FROM`` inputs
    and rows (``INFER_FROM`` rows in eager code whose weight is not trained), one torch thread (the kernel runs on
    one), no autocast, outside TorchScript and exports, with the kernel built."""
    return bias is not None and _applies(x, weight, bias, _rows_from(weight, bias))


def _applies(x: Tensor, weight: Tensor, bias: Tensor, rows_from: int) -> bool:
    inputs = x.shape[-1] if x.dim() else 0
    return (USE_FRAME_KERNEL and x.dtype == torch.bool and x.device.type == "cpu"
            and inputs >= FRAME_FROM[0]
            and x.numel() // inputs >= rows_from
            and weight.dtype == bias.dtype == torch.float32 and weight.device.type == "cpu"
            and ready() and not torch.is_autocast_enabled("cpu")
            and not torch.jit.is_tracing() and not torch.jit.is_scripting() and not torch.compiler.is_exporting()
            and (torch.compiler.is_compiling() or not (torch._C._functorch.is_functorch_wrapped_tensor(x)
                                                        or torch._C._functorch.is_functorch_wrapped_tensor(weight))))


def pair_applies(x: Tensor, first: nn.Linear, second: nn.Linear) -> bool:
    """Two linear layers on the same boolean ``x`` whose weights are not trained (an actor's and a critic's first,
    collecting or evaluating) may run as one kernel call on their stacked weights (:func:`pair_linear`): from
    ``INFER_FROM`` rows, compiled code included (one call then costs less than the two dense products), where
    each may run the kernel (:func:`applies`'s other conditions)."""
    if (not PAIR_FIRST_LAYERS or first.bias is None or second.bias is None
            or _trained(first.weight, first.bias) or _trained(second.weight, second.bias)):
        return False
    return (_applies(x, first.weight, first.bias, INFER_FROM)
            and _applies(x, second.weight, second.bias, INFER_FROM))


def pair_linear(x: Tensor, first: nn.Linear, second: nn.Linear) -> tuple[Tensor, Tensor]:
    """``(first(x), second(x))`` for boolean ``x`` ``[*B, I]`` as one call of the kernel without autograd on the
    stacked weights ``[O1 + O2, I]``, for a caller that has checked :func:`pair_applies`: the frames are scanned
    once, and one call's fixed cost is paid instead of two. ``[*B, O1]`` and ``[*B, O2]`` (views of one output)."""
    out = kernel_linear(x, torch.cat([first.weight, second.weight]), torch.cat([first.bias, second.bias]))
    return out[..., :first.out_features], out[..., first.out_features:]


def _check(x: Tensor, weight_t: Tensor, bias: Tensor | None = None) -> None:
    """The operators' inputs are what the kernel reads (it trusts the shapes it is given): CPU, ``x`` bool
    ``[*B, I]``, ``weight_t`` (the weight transposed) float32 ``[I, O]``, ``bias`` float32 ``[O]``."""
    ok = (x.dtype == torch.bool and x.is_cpu and weight_t.is_cpu and weight_t.dtype == torch.float32
          and x.dim() >= 1 and weight_t.dim() == 2 and weight_t.shape[0] == x.shape[-1]
          and (bias is None or (bias.is_cpu and bias.dtype == torch.float32 and bias.shape == weight_t.shape[1:])))
    if not ok:
        raise ValueError(f"frame_linear takes CPU tensors: bool x [..., I], float32 weight_t [I, O] (the weight "
                         f"transposed) and bias [O]; got x {x.dtype} {tuple(x.shape)}, weight_t {weight_t.dtype} "
                         f"{tuple(weight_t.shape)}"
                         + ("" if bias is None else f", bias {bias.dtype} {tuple(bias.shape)}"))


def _built() -> ctypes.CDLL:
    library = _library()
    if library is None:
        raise RuntimeError("the frame kernel is not built on this machine (no C compiler, or its cache folder is "
                           "not private to this user): call frame_linear, which falls back to F.linear")
    return library


def _forward(x: Tensor, weight_t: Tensor, bias: Tensor) -> Tensor:
    # Each tensor operation here costs microseconds, a share of a call on a minibatch: the frames are read as
    # contiguous bytes in place (bool and uint8 share a layout) and the output is made in its final shape.
    _check(x, weight_t, bias)
    in_features, out_features = weight_t.shape
    x, weight_t, bias = x.contiguous(), weight_t.contiguous(), bias.contiguous()
    out = torch.empty(*x.shape[:-1], out_features)
    # A wide layer's rows list their set cells first (the kernel's forward_blocks).
    idx = torch.empty(in_features, dtype=torch.int64) if out_features > 64 and out_features % 64 == 0 else None
    _built().rl_gpu_frame_linear(x.data_ptr(), weight_t.data_ptr(), bias.data_ptr(), out.data_ptr(),
                                 None if idx is None else idx.data_ptr(), math.prod(x.shape[:-1]), in_features,
                                 out_features)
    return out


def _forward_fake(x: Tensor, weight_t: Tensor, bias: Tensor) -> Tensor:
    return weight_t.new_empty(*x.shape[:-1], weight_t.shape[1])


@torch.library.custom_op("rl_gpu::frame_linear", mutates_args=())
def frame_linear_op(x: Tensor, weight_t: Tensor, bias: Tensor) -> Tensor:
    """The kernel as an operator: ``x W^T + b`` given ``weight_t = W^T`` (``[I, O]``), for a caller that has
    checked :func:`applies` (:func:`frame_linear` checks)."""
    return _forward(x, weight_t, bias)


frame_linear_op.register_fake(_forward_fake)

# The same forward pass as an operator with no autograd rule, for weights that are not trained: a custom_op's
# Python wrapper (its autograd dispatch and checks) costs 30-40 microseconds a call, this one's dispatch a few.
_LIB = torch.library.Library("rl_gpu", "FRAGMENT")
_LIB.define("frame_linear_infer(Tensor x, Tensor weight_t, Tensor bias) -> Tensor")
_LIB.impl("frame_linear_infer", _forward, "CPU")
torch.library.register_fake("rl_gpu::frame_linear_infer", _forward_fake, lib=_LIB)


def kernel_linear(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """The kernel's ``F.linear(x, weight, bias)``, for a caller that has checked :func:`applies`: the operator
    with the weight gradient where the weight is trained, else the one without.

    The operators take the weight transposed, made here: compiled code makes it with its own vectorised copy (once
    for every call on the same weight in a graph), and the weight's gradient goes back through the same
    transpose."""
    weight_t = weight.t().contiguous()
    if _trained(weight, bias):
        return frame_linear_op(x, weight_t, bias)
    return torch.ops.rl_gpu.frame_linear_infer(x, weight_t, bias)


@torch.library.custom_op("rl_gpu::frame_linear_weight_grad", mutates_args=())
def _weight_grad_op(x: Tensor, grad: Tensor) -> Tensor:
    """``weight_t``'s gradient ``[I, O]``: ``x^T grad`` summed over the set cells."""
    if (x.dtype != torch.bool or x.dim() < 1 or x.device.type != "cpu" or grad.dtype != torch.float32
            or grad.shape[:-1] != x.shape[:-1] or grad.device.type != "cpu"):
        raise ValueError(f"frame_linear's weight gradient takes CPU tensors: bool x [..., I] and a float32 gradient "
                         f"[..., O] with x's rows, got x {x.dtype} {tuple(x.shape)}, gradient {grad.dtype} "
                         f"{tuple(grad.shape)}")
    x, grad = x.contiguous(), grad.contiguous()
    grad_wt = torch.empty(x.shape[-1], grad.shape[-1])
    _built().rl_gpu_frame_linear_grad(x.data_ptr(), grad.data_ptr(), grad_wt.data_ptr(), math.prod(x.shape[:-1]),
                                      x.shape[-1], grad.shape[-1])
    return grad_wt


@_weight_grad_op.register_fake
def _(x: Tensor, grad: Tensor) -> Tensor:
    return grad.new_empty(x.shape[-1], grad.shape[-1])


def _setup_context(ctx, inputs, output) -> None:
    x, _, _ = inputs
    ctx.save_for_backward(x)


def _backward(ctx, grad: Tensor) -> tuple[None, Tensor | None, Tensor | None]:
    (x,) = ctx.saved_tensors
    _, needs_weight, needs_bias = ctx.needs_input_grad
    grad_weight_t = _weight_grad_op(x, grad) if needs_weight else None
    grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0) if needs_bias else None
    return None, grad_weight_t, grad_bias


frame_linear_op.register_autograd(_backward, setup_context=_setup_context)


def frame_linear(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``F.linear(x, weight, bias)`` for boolean ``x`` ``[*B, I]`` (``weight`` ``[O, I]``, ``bias`` ``[O]``):
    the C kernel where :func:`applies`, else the product of ``x`` as floats. ``[*B, O]``; gradients for the
    weight and bias (none for ``x``)."""
    if applies(x, weight, bias):
        return kernel_linear(x, weight, bias)
    return F.linear(x.to(weight.dtype), weight, bias)
