"""Which CPU loops of a compiled unit Inductor writes as SIMD code, kernel by kernel.

A unit that steps a grid game (``TensorEnv.compile_simd = False``) holds two kinds of loops: the game's, integer
and boolean work over rows (counters, masks, one-hot cells, gathers at per-row indices), which Inductor vectorises
along the rows with a gathered load per lane and runs several times slower than as plain loops; and the
policy's, float loops over activations (a layer's bias and tanh, the frames' cast, log-softmax), which gain from
SIMD as any float loop does. Inductor decides vectorisation for a whole unit (``cpp.simdlen``); this module
decides it per kernel: a kernel that reads and writes only floating-point buffers, with no index read from a
tensor, keeps Inductor's SIMD form, and every other kernel of such a unit is a plain loop.

The decision is made in Inductor's C++ code generation (``CppKernelProxy.codegen_nodes``), patched once per
process; the patch acts only in units compiled with :data:`MIXED_LOOP_OPTIONS` (its graph pass, a marker,
is part of the unit's cache key), so nothing else compiled in the process changes. Where this PyTorch's Inductor
lacks what the patch relies on, :func:`grid_unit_options` gives ``cpp.simdlen = 1``: every loop of the unit plain.
"""

from __future__ import annotations

import functools
from typing import Any

from torch._inductor.custom_graph_pass import get_hash_for_files

from rl_gpu.runtime.inductor_passes import INDUCTOR_OPTIONS, UnfuseCPUBiasAddmm

SCALAR_CPU_KERNELS = {"cpp.simdlen": 1}
"""Inductor options that make every CPU loop of a unit a plain loop (the fallback of :func:`grid_unit_options`)."""


class PlainNonFloatLoops(UnfuseCPUBiasAddmm):
    """The graph pass of every unit (:class:`UnfuseCPUBiasAddmm`), marking a unit whose CPU kernels other than
    float ones are plain loops. Its ``uuid`` differs from the plain pass's, so such a unit never shares a cache
    entry with a unit compiled without the mark."""

    def uuid(self) -> bytes:
        return get_hash_for_files((__file__,)) + super().uuid()


MIXED_LOOP_OPTIONS = {**INDUCTOR_OPTIONS, "post_grad_custom_post_pass": PlainNonFloatLoops()}
"""Inductor options of a unit that steps a grid game, where :func:`install` took."""


def float_only(nodes: list[Any]) -> bool:
    """Every buffer the scheduler nodes of one kernel read or write is floating point, and no index is read
    from a tensor (``LoopBody.indirect_vars``)."""
    from torch._inductor.virtualized import V

    for node in nodes:
        rw = node.read_writes
        for dep in (*rw.reads, *rw.writes):
            try:
                dtype = V.graph.get_dtype(dep.name)
            except (KeyError, AttributeError):
                return False
            if not dtype.is_floating_point:
                return False
        if getattr(getattr(node, "_body", None), "indirect_vars", None):
            return False
    return True


@functools.cache
def install() -> bool:
    """Patch Inductor's C++ code generation (once) so that units compiled with :data:`MIXED_LOOP_OPTIONS` get
    plain loops for all but their float kernels; returns whether it could."""
    try:
        from torch._inductor import config, cpu_vec_isa
        from torch._inductor.codegen.cpp import CppKernelProxy
    except ImportError:
        return False
    original = getattr(CppKernelProxy, "codegen_nodes", None)
    if original is None or not hasattr(cpu_vec_isa, "invalid_vec_isa"):
        return False

    @functools.wraps(original)
    def codegen_nodes(self, nodes):
        if isinstance(config.post_grad_custom_post_pass, PlainNonFloatLoops) and not float_only(nodes):
            self.picked_vec_isa = cpu_vec_isa.invalid_vec_isa  # read by codegen_functions: no SIMD form
        return original(self, nodes)

    CppKernelProxy.codegen_nodes = codegen_nodes
    return True


def grid_unit_options() -> dict[str, Any]:
    """Inductor options of a unit that steps a grid game: :data:`MIXED_LOOP_OPTIONS` where :func:`install`
    took, else every loop plain."""
    return dict(MIXED_LOOP_OPTIONS) if install() else {**INDUCTOR_OPTIONS, **SCALAR_CPU_KERNELS}
