"""A graph pass handed to Inductor with every compiled unit (``torch.compile(options=...)``).

:class:`UnfuseCPUBiasAddmm` rewrites a CPU ``addmm`` with a broadcast bias and only elementwise users into
``mm`` followed by ``+ bias``, which Inductor then fuses into the elementwise loop that reads the product anyway
(a hidden layer's activation). ATen's CPU ``addmm`` first copies the broadcast bias into its whole output and
then accumulates the product onto it: one more write and read of the output than the product alone, for a
16,384 x 64 layer as long as the product itself (benchmarks/HISTORY.md, section 18). Inductor makes the same
rewrite for GPUs (``unfuse_bias_add_to_pointwise``), and on the CPU re-fuses ``mm + bias`` into ``addmm``; this
pass runs after its patterns.
"""

from __future__ import annotations

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files
from torch.fx import Graph, Node

_aten = torch.ops.aten
_VIEWS = frozenset({_aten.view.default, _aten.reshape.default, _aten.squeeze.dim, _aten.squeeze.dims,
                    _aten.unsqueeze.default, _aten.permute.default, _aten.expand.default})


def _elementwise(use: Node) -> bool:
    """``use`` is an elementwise operation, or a view whose own uses all are."""
    if use.op != "call_function" or not isinstance(use.target, torch._ops.OpOverload):
        return False
    if use.target in _VIEWS:
        return all(_elementwise(u) for u in use.users)
    return torch.Tag.pointwise in use.target.tags


def _bias_addmm(node: Node) -> bool:
    if node.op != "call_function" or node.target is not _aten.addmm.default:
        return False
    if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1 or len(node.args) != 3:
        return False
    bias, out = node.args[0], node.meta.get("val")
    bias_val = bias.meta.get("val") if isinstance(bias, Node) else None
    return (isinstance(out, torch.Tensor) and isinstance(bias_val, torch.Tensor) and out.device.type == "cpu"
            and bias_val.dim() == 1 and bias_val.dtype == out.dtype and len(node.users) > 0
            and all(_elementwise(u) for u in node.users))


class UnfuseCPUBiasAddmm(CustomGraphPass):
    """``addmm(b, x, W)`` -> ``mm(x, W) + b`` for CPU products whose users are all elementwise."""

    def __call__(self, graph: Graph) -> None:
        for node in [n for n in graph.nodes if _bias_addmm(n)]:
            bias, x, weight = node.args
            with graph.inserting_before(node):
                product = graph.call_function(_aten.mm.default, (x, weight))
                product.meta.update(node.meta)
                out = graph.call_function(_aten.add.Tensor, (product, bias))
                out.meta.update(node.meta)
            node.replace_all_uses_with(out)
            graph.erase_node(node)

    def uuid(self) -> bytes:
        return get_hash_for_files((__file__,))


INDUCTOR_OPTIONS = {"post_grad_custom_post_pass": UnfuseCPUBiasAddmm()}
"""Inductor options of every compiled unit."""


def fused_multiply_add_options() -> dict:
    """Inductor options letting its C++ kernels contract a multiply and an add into one fused multiply-add
    (``-ffp-contract=fast``; empty where this PyTorch has no such option). The rounding then differs from eager
    code's in the last bits; worth it for a compiled PPO update's graph (the rational tanh's polynomials and their
    gradient, the loss), not for a MinAtar rollout (benchmarks/HISTORY.md section 53)."""
    import torch._inductor.config as config

    if not hasattr(config.cpp, "enable_floating_point_contract_flag"):
        return {}
    return {"cpp.enable_floating_point_contract_flag": "fast"}
