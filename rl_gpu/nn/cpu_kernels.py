"""The CPU kernels of the networks, as an opt-in pass over a built network (:func:`use_cpu_kernels`): the same
parameters, the same ``state_dict``, faster forms on the CPU.

- :class:`MLP` runs a ``nn.Sequential`` of linear layers and activations without a module call per layer; without
  gradients a tanh MLP takes the folded sigmoid form or oneDNN's fused linear + tanh; with gradients each
  ``Linear`` + ``Tanh`` is one autograd node (:class:`_LinearTanh`) and other linear layers take the weight
  gradient in the orientation this CPU's BLAS does fast (:class:`_Linear`).
- :class:`Tanh` computes ``tanh`` as ``2 sigmoid(2x) - 1`` on large CPU inputs, and as a rational approximation
  in code compiled for the CPU.
- An :class:`MLP` given boolean frames runs its first layer as :func:`rl_gpu.nn.frame_kernels.frame_linear`
  (the sum of the set cells' weight columns) where that applies, else on the frames as floats.

:func:`plain_modules` undoes the pass (what an export holds). Networks are defined plain (:mod:`rl_gpu.nn.layers`).

Shape legend: N = batch rows, I = input size, H = hidden width.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from rl_gpu.nn import frame_kernels
from rl_gpu.nn.normalization import to_float


def _tanh_by_sigmoid(x: Tensor) -> Tensor:
    return torch.sigmoid(2.0 * x).mul_(2.0).sub_(1.0)


class _TanhBySigmoid(torch.autograd.Function):
    """``2 sigmoid(2x) - 1`` as one autograd node that saves only its output, as ``tanh`` does, with ``tanh``'s
    own fused backward kernel (one kernel instead of the three operations of ``grad * (1 - y^2)``).

    Written in the ``setup_context`` form with a generated vmap rule, so ``torch.func.vmap`` over a population
    of networks (and ``torch.func.grad``) runs through it."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor) -> Tensor:
        return _tanh_by_sigmoid(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


# tanh(x) ~= x P(x^2) / Q(x^2) on [-c, c], c = 7.90531110763549805 (beyond it tanh rounds to +-1 in float32):
# the float32 minimax rational approximation of Eigen's generic_fast_tanh_float (MPL-2.0), which XLA's CPU
# backend also evaluates. Largest error against tanh in float64: 3.4e-7 absolute (torch.tanh's float32 result:
# 5.4e-8; the sigmoid form's: 2e-7).
_TANH_CLAMP = 7.90531110763549805
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
           1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)


def _tanh_rational(x: Tensor) -> Tensor:
    x = x.clamp(-_TANH_CLAMP, _TANH_CLAMP)
    x2 = x * x
    p = x2 * _TANH_P[0] + _TANH_P[1]
    for c in _TANH_P[2:]:
        p = p * x2 + c
    q = x2 * _TANH_Q[0] + _TANH_Q[1]
    for c in _TANH_Q[2:]:
        q = q * x2 + c
    return x * p / q


class _TanhRational(_TanhBySigmoid):
    """:func:`_tanh_rational` with tanh's derivative ``1 - y^2`` from the saved output (the backward of
    :class:`_TanhBySigmoid`): inside a compiled region Inductor fuses both into the loops around them (a dozen
    FMAs and one division per element, no exponential)."""

    @staticmethod
    def forward(x: Tensor) -> Tensor:
        return _tanh_rational(x)


def _batched(weight: Tensor) -> bool:
    """``weight`` is one member's slice of stacked weights inside ``vmap`` (a population's update)."""
    return torch._C._functorch.is_batchedtensor(weight)


def _trained(weight: Tensor) -> bool:
    """``weight`` is on the autograd tape. Under ``vmap`` (a population's update) a stacked weight that is on the
    tape reports ``requires_grad`` False inside the vmapped function, so a batched weight counts as trained."""
    return weight.requires_grad or _batched(weight)


ONEDNN_FROM = 32768
"""From this many output elements an eager CPU float32 ``tanh(x W^T + b)`` is oneDNN's linear with the bias and
tanh in its epilogue (:func:`_onednn_linear_tanh`); below it the call's fixed cost is more than it saves."""


USE_ONEDNN = torch.backends.cpu.get_cpu_capability().startswith("AVX512")
"""Let eager CPU Linear + tanh layers take :func:`_onednn_linear_tanh` (a switch for benchmarks and tests). On by
default where ATen's CPU kernels use AVX-512: there oneDNN's fused call beats the sigmoid form, while on an
AVX2-only CPU its call is the slower of the two at every shape the MLPs here run (``benchmarks/cpu_tanh.py
--linear``)."""


@functools.cache
def _onednn_available() -> bool:
    """This build runs oneDNN's fused linear (probed once with a 1 x 1 call: a build can list the operator and
    still not run it)."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    try:
        torch.ops.mkldnn._linear_pointwise(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), "tanh", [], "")
    except RuntimeError:
        return False
    return True


def _onednn_applies(x: Tensor, weight: Tensor) -> bool:
    """``tanh(x W^T + b)`` can run as :func:`_onednn_linear_tanh`: plain float32 CPU tensors (not a functorch
    transform's wrappers, for which the op has no rule) with at least ``ONEDNN_FROM`` output elements, outside
    any tracing (an exported or scripted model keeps portable operators)."""
    return (USE_ONEDNN and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32
            and not torch.compiler.is_compiling() and not torch.jit.is_tracing() and not torch.jit.is_scripting()
            and not torch._C._functorch.is_functorch_wrapped_tensor(x)
            and not torch._C._functorch.is_functorch_wrapped_tensor(weight)
            and x.numel() // max(x.shape[-1], 1) * weight.shape[0] >= ONEDNN_FROM and _onednn_available())


def _onednn_linear_tanh(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``tanh(x W^T + b)`` in one oneDNN call: the bias and tanh are applied as the product's tiles are written,
    where ``addmm`` first copies the broadcast bias into the whole output and the activation is another pass
    (benchmarks/HISTORY.md, section 18). oneDNN's tanh is within 6e-8 of ``torch.tanh``."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "tanh", [], "")


def _sigmoid_linear_tanh(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``tanh(x W^T + b)`` as ``2 sigmoid(x (2W)^T + 2b) - 1``: the factor 2 applied to the small weights rather
    than in a pass over the activations (doubling is exact)."""
    return torch.sigmoid(F.linear(x, 2.0 * weight, 2.0 * bias)).mul_(2.0).sub_(1.0)


def _compiling_for_cpu(x: Tensor) -> bool:
    return x.device.type == "cpu" and torch.compiler.is_compiling() and not torch.compiler.is_exporting()


class Tanh(nn.Tanh):
    """``tanh``, computed on CPU for large inputs as ``2 sigmoid(2x) - 1`` (derivative ``1 - tanh(x)^2``).

    PyTorch's CPU ``tanh`` kernel is several times slower than ``sigmoid`` (benchmarks/cpu_tanh.py). Below
    ``SIGMOID_FROM`` elements the form's extra operations cost more than they save, so ``torch.tanh`` runs; with
    gradients the form is one autograd node running ``tanh``'s own backward kernel. The two agree to 2e-7
    absolute (the form rounds near 0 to float32's spacing at 1.0). Other devices use ``torch.tanh``. A subclass
    of ``nn.Tanh`` without parameters: checkpoints are unaffected and exports compute ``nn.Tanh``.

    Compiled for the CPU (``--compile inductor``), at any size, it is XLA's rational approximation instead
    (``x P(x^2) / Q(x^2)``, within 3.4e-7 of tanh; derivative ``1 - y^2``): Inductor fuses its polynomial into
    the surrounding loop, where an exponential (sigmoid's or tanh's) costs several times more per element.
    """

    SIGMOID_FROM = 8192
    RATIONAL_WHEN_COMPILED = True
    """Use the rational form in compiled CPU code (a switch for benchmarks and tests)."""

    def forward(self, x: Tensor) -> Tensor:
        if self.RATIONAL_WHEN_COMPILED and _compiling_for_cpu(x):
            return _TanhRational.apply(x)
        if x.device.type != "cpu" or x.numel() < self.SIGMOID_FROM:
            return torch.tanh(x)
        # Only without gradients may the form work in place: under vmap a tensor on the autograd tape can report
        # requires_grad False.
        if torch.is_grad_enabled():
            return _TanhBySigmoid.apply(x)
        return _tanh_by_sigmoid(x)


class _LinearNode(torch.autograd.Function):
    """Context and backward of ``x W^T + b`` shared by :class:`_Linear` and :class:`_StackedLinear`."""

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        x, weight, _ = inputs
        ctx.save_for_backward(x, weight)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        x, weight = ctx.saved_tensors
        return _linear_backward(ctx.needs_input_grad, grad, x, weight)


class _LinearTanhNode(torch.autograd.Function):
    """Context and backward of ``tanh(x W^T + b)`` shared by :class:`_LinearTanh` and
    :class:`_StackedLinearTanh`: tanh's fused backward kernel on the saved output, then the linear products."""

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        x, weight, _ = inputs
        ctx.save_for_backward(x, weight, output)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        x, weight, y = ctx.saved_tensors
        return _linear_backward(ctx.needs_input_grad, torch.ops.aten.tanh_backward(grad, y), x, weight)


class _Linear(_LinearNode):
    """``F.linear`` whose weight gradient is computed in the orientation this CPU's BLAS does fast.

    ``grad_W = g^T x`` (``[out, in]``, a sum over the rows) is the same sum as ``(x^T g)^T``, but MKL runs a
    product with few result rows and many result columns several times faster than the transposed one (a
    4 -> 64 layer's ``g^T x`` is the slow kind, a 64 -> 2 layer's the fast one; benchmarks/HISTORY.md section 14), so the
    product is taken with the smaller of ``in`` and ``out`` as its rows. The sums come out in another order, so
    the gradient can differ from autograd's by float32 rounding."""

    @staticmethod
    def forward(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        return F.linear(x, weight, bias)

    @staticmethod
    def vmap(info, in_dims, x: Tensor, weight: Tensor, bias: Tensor) -> tuple[Tensor, int]:
        return _stacked_call(_StackedLinear, info.batch_size, in_dims, x, weight, bias)


def _linear_backward(needs: tuple[bool, ...], grad: Tensor, x: Tensor, weight: Tensor
                     ) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """Gradients of ``x W^T + b`` for the inputs ``needs`` marks, the weight's product in the fast orientation
    (:class:`_Linear`): one layer (``weight`` ``[out, in]``, ``grad`` ``[..., out]``) or K stacked layers
    (``weight`` ``[K, out, in]``, ``x`` ``[K, R, in]``, ``grad`` ``[K, R, out]``: one batched product each)."""
    grad_x = grad_w = grad_b = None
    stacked = weight.dim() == 3
    if needs[0]:
        if stacked and weight.shape[1] == 1:
            grad_x = grad * weight  # [K, R, 1] x [K, 1, I]: a product of depth 1 is a broadcast multiply
        else:
            grad_x = grad.bmm(weight) if stacked else grad @ weight
    g = grad if stacked else grad.reshape(-1, grad.shape[-1])
    if needs[1]:
        rows = x if stacked else x.reshape(-1, x.shape[-1])
        mm = torch.bmm if stacked else torch.mm
        out_features, in_features = weight.shape[-2:]
        grad_w = mm(rows.mT, g).mT.contiguous() if in_features < out_features else mm(g.mT, rows)
    if needs[2]:
        grad_b = g.sum(-2)
    return grad_x, grad_w, grad_b


class _LinearTanh(_LinearTanhNode):
    """``tanh(x W^T + b)`` as one node on the CPU: forward oneDNN's fused linear + tanh where it applies
    (:func:`_onednn_applies`), else the sigmoid form ``2 sigmoid(x (2W)^T + 2b) - 1``, the factor 2 applied to
    the small weights rather than in a pass over the activations (doubling is exact, so the result is bit for bit
    :class:`Tanh`'s form after ``F.linear``); backward tanh's fused kernel on the output, then
    :class:`_Linear`'s products."""

    @staticmethod
    def forward(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        if _onednn_applies(x, weight):
            return _onednn_linear_tanh(x, weight, bias)
        return _sigmoid_linear_tanh(x, weight, bias)

    @staticmethod
    def vmap(info, in_dims, x: Tensor, weight: Tensor, bias: Tensor) -> tuple[Tensor, int]:
        return _stacked_call(_StackedLinearTanh, info.batch_size, in_dims, x, weight, bias)


def _stacked_call(function: type[torch.autograd.Function], size: int, in_dims: tuple[int | None, ...],
                  x: Tensor, weight: Tensor, bias: Tensor) -> tuple[Tensor, int]:
    """The vmap rule of :class:`_Linear` and :class:`_LinearTanh`: every operand with the vmapped dimension first
    (expanded where it has none), ``x`` as ``[K, R, I]``, then ``function``'s stacked form, one node on the tape.
    (A generated rule would run the backward operation by operation under vmap, and ``F.linear``'s batching rule
    adds the bias in a pass of its own.)"""
    x, weight, bias = (t.movedim(d, 0) if d is not None else t.expand(size, *t.shape)
                       for t, d in zip((x, weight, bias), in_dims))
    y = function.apply(x.reshape(size, math.prod(x.shape[1:-1]), x.shape[-1]), weight, bias)
    return y.view(*x.shape[:-1], y.shape[-1]), 0


class _StackedLinear(_LinearNode):
    """K layers' :class:`_Linear` at once: ``x`` ``[K, R, I]``, ``weight`` ``[K, O, I]``, ``bias`` ``[K, O]``."""

    generate_vmap_rule = True  # for a vmap around the one that produced this call

    @staticmethod
    def forward(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        if weight.shape[1] <= NARROW_OUT:
            # A head (O <= 4): the product with O result rows and R columns, transposed back, runs several
            # times faster than the [R, O] one, whose few output columns this CPU's BLAS handles poorly.
            return torch.baddbmm(bias.unsqueeze(2), weight, x.transpose(1, 2)).transpose(1, 2).contiguous()
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


class _StackedLinearTanh(_LinearTanhNode):
    """K layers' :class:`_LinearTanh` at once (shapes as :class:`_StackedLinear`)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        # One batched product starting from the bias, then tanh in place: oneDNN's fused Linear + tanh member by
        # member (a lone run's form) needs a torch.stack of the outputs after it, which costs more than the
        # fusion saves (benchmarks/HISTORY.md, section 20).
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2)).tanh_()


class _NarrowLinear(_LinearNode):
    """``F.linear`` for a layer with at most ``NARROW_OUT`` outputs (a policy or value head), compiled for the
    CPU: its input gradient ``g W`` (``[R, O] @ [O, I]``, O <= 4) is the sum of O broadcast products
    ``g[:, k] W[k]``, which Inductor fuses into the loop that reads the gradient next (the activation's
    derivative), where BLAS would write ``[R, I]`` out with a product of depth O, far from its speed."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        x, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad
        _, grad_w, grad_b = _linear_backward((False, needs[1], needs[2]), grad, x, weight)
        grad_x = None
        if needs[0]:
            grad_x = grad[..., :1] * weight[0]
            for k in range(1, weight.shape[0]):
                grad_x = grad_x + grad[..., k:k + 1] * weight[k]
        return grad_x, grad_w, grad_b


NARROW_OUT = 4
"""Compiled for the CPU, layers with at most this many outputs take :class:`_NarrowLinear` (0: none)."""


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear``; on the CPU with gradients, for a layer with fewer inputs than outputs, through
    :class:`_Linear` (the other layers' weight gradient already has autograd's fast orientation, and the
    Python autograd function costs tens of microseconds a call), and so is a head of at most ``NARROW_OUT``
    outputs under a population's ``vmap`` (its stacked form takes the fast orientation of the forward too);
    compiled for the CPU, a layer with at most ``NARROW_OUT`` outputs through :class:`_NarrowLinear`."""
    if bias is not None and x.device.type == "cpu" and torch.is_grad_enabled() and _trained(weight):
        if weight.shape[0] <= NARROW_OUT and _compiling_for_cpu(x):
            return _NarrowLinear.apply(x, weight, bias)
        if weight.shape[1] < weight.shape[0] or (weight.shape[0] <= NARROW_OUT and _batched(weight)):
            return _Linear.apply(x, weight, bias)
    return F.linear(x, weight, bias)


class MLP(nn.Sequential):
    """``nn.Sequential`` of layers whose forward calls each ``nn.Linear``'s function directly (no per-layer
    module call, so no forward hooks on the layers): on CPU the module-call overhead is a large share of a small
    batch's forward. Same parameters and ``state_dict`` keys.

    **The folded sigmoid form, without gradients.** Collection and evaluation run a tanh MLP (``Linear``,
    :class:`Tanh`, ..., ``Linear``) on CPU with at least ``SIGMOID_FROM`` hidden elements as ``Linear`` +
    ``sigmoid`` only, the affine maps of ``tanh(z) = 2 sigmoid(2z) - 1`` folded into the (small) weights and
    biases: with the layer input ``h = a s + c`` held as ``s`` (``a, c = 1, 0`` for the observation, ``2, -1``
    after a hidden layer),

        W h + b = (a W) s + (b + c W 1),    tanh(W h + b) = 2 sigmoid(2 (a W) s + 2 (b + c W 1)) - 1,

    so each hidden layer is one ``addmm`` and one ``sigmoid`` (no elementwise pass of its own). It agrees with
    ``torch.tanh`` to about 1e-6 (tested). From ``ONEDNN_FROM`` output elements, in float32 with oneDNN present,
    each hidden layer is instead one oneDNN call with the bias and tanh fused (:func:`_onednn_linear_tanh`).
    With gradients (the update) each ``Linear`` and the ``Tanh`` after it are one :class:`_LinearTanh` node
    (forward that oneDNN call or the sigmoid form with only the factor 2 folded into the weights; backward
    ``tanh``'s fused kernel, measured faster than the folded form's ``sigmoid_backward``,
    benchmarks/HISTORY.md sections 13 and 14); other linear layers with gradients go through :class:`_Linear`. Compiled for the CPU,
    the layers run one by one and :class:`Tanh` takes its rational form.
    """

    SIGMOID_FROM = Tanh.SIGMOID_FROM

    def forward(self, x: Tensor) -> Tensor:
        layers = list(self._modules.values())
        i = 0
        if x.dtype == torch.bool:  # frames, kept as bools for the first layer's sum over their set cells
            if type(layers[0]) is nn.Linear and frame_kernels.applies(x, layers[0].weight, layers[0].bias):
                x = frame_kernels.kernel_linear(x, layers[0].weight, layers[0].bias)
                i = 1
            else:
                x = to_float(x)
        if i == 0 and self._sigmoid_form(x):
            return self._forward_sigmoid_form(x)
        return self.forward_from(x, i)

    def forward_from(self, x: Tensor, start: int) -> Tensor:
        """The layers from index ``start`` on ``x`` (what the layers before it gave)."""
        layers = list(self._modules.values())
        i = start
        while i < len(layers):
            layer = layers[i]
            if type(layer) is not nn.Linear:
                x = layer.forward(x)
            elif i + 1 < len(layers) and self._fused_tanh(x, layer, layers[i + 1]):
                x = _LinearTanh.apply(x, layer.weight, layer.bias)
                i += 1
            else:
                x = linear(x, layer.weight, layer.bias)
            i += 1
        return x

    @staticmethod
    def _fused_tanh(x: Tensor, layer: nn.Linear, next_layer: nn.Module) -> bool:
        """``layer`` and the :class:`Tanh` after it run as one :class:`_LinearTanh` node: with gradients, on the
        CPU, outside a compiled region, at sizes where :class:`Tanh` takes its sigmoid form."""
        return (type(next_layer) is Tanh and layer.bias is not None and x.device.type == "cpu"
                and torch.is_grad_enabled() and _trained(layer.weight) and not torch.compiler.is_compiling()
                and x.numel() // x.shape[-1] * layer.out_features >= Tanh.SIGMOID_FROM)

    def _sigmoid_form(self, x: Tensor) -> bool:
        layers = list(self._modules.values())
        if x.device.type != "cpu" or torch.is_grad_enabled() or len(layers) < 3 or len(layers) % 2 == 0:
            return False
        if Tanh.RATIONAL_WHEN_COMPILED and _compiling_for_cpu(x):
            return False
        linear, act = layers[::2], layers[1::2]
        if any(type(m) is not nn.Linear or m.bias is None for m in linear) or any(type(m) is not Tanh for m in act):
            return False
        return x.numel() // x.shape[-1] * linear[0].out_features >= self.SIGMOID_FROM

    def _forward_sigmoid_form(self, x: Tensor) -> Tensor:
        layers = list(self._modules.values())
        if _onednn_applies(x, layers[0].weight):
            for layer in layers[:-1:2]:
                x = _onednn_linear_tanh(x, layer.weight, layer.bias)
            return F.linear(x, layers[-1].weight, layers[-1].bias)
        a, c = 1.0, 0.0
        s = x
        for layer in layers[:-1:2]:
            w, b = layer.weight, layer.bias
            bias = 2.0 * b if c == 0.0 else 2.0 * (b + c * w.sum(1))
            s = torch.sigmoid(F.linear(s, (2.0 * a) * w, bias))
            a, c = 2.0, -1.0
        w, b = layers[-1].weight, layers[-1].bias
        return F.linear(s, a * w, b + c * w.sum(1))


def stacked_mlp(layers: Sequence[nn.Module], params: Sequence[tuple[Tensor, Tensor]], x: Tensor) -> Tensor:
    """K networks shaped like the MLP ``layers`` (``nn.Linear`` and elementwise activations) at once, without
    the MLP's own parameters: ``x`` ``[K, R, I]`` -> ``[K, R, out]``, the i-th linear layer with ``params[i]`` =
    (weight ``[K, out_i, in_i]``, bias ``[K, out_i]``) as one batched product per layer; the activations apply
    to ``[K, R, H]`` as they do to ``[R, H]``, except that without gradients :class:`Tanh` is ``torch.tanh`` in
    place on the product (as the stacked update's layers compute it, :class:`_StackedLinearTanh`)."""
    i = 0
    for layer in layers:
        if type(layer) is nn.Linear:
            weight, bias = params[i]
            x = torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
            i += 1
        elif type(layer) is Tanh and i > 0 and not torch.is_grad_enabled():  # on a product of this call
            x = x.tanh_()
        else:
            x = layer(x)
    return x



def takes_bool_frames(network: nn.Module) -> bool:
    """``network`` may be given boolean frames as they are: an :class:`MLP` starting with a linear layer, which
    runs it as :func:`rl_gpu.nn.frame_kernels.frame_linear` (the kernel built and allowed on this run's one
    thread)."""
    return (type(network) is MLP and len(network) > 0 and type(network[0]) is nn.Linear
            and frame_kernels.USE_FRAME_KERNEL and frame_kernels.ready())


_SEQUENCE_LAYERS = (nn.Linear, nn.Tanh, nn.ReLU)


def use_cpu_kernels(module: nn.Module, only_on_cpu: bool = True) -> nn.Module:
    """Swap the CPU kernels into ``module`` in place and return it: each ``nn.Sequential`` of linear layers and
    tanh/ReLU activations becomes an :class:`MLP`, each ``nn.Tanh`` a :class:`Tanh` (the same children and
    parameters: checkpoints and ``state_dict`` keys do not change). With ``only_on_cpu`` (the default) a module
    whose parameters are on another device is left plain (the forms would fall back to PyTorch's own there)."""
    if only_on_cpu and any(p.device.type != "cpu" for p in module.parameters()):
        return module
    for child in module.modules():
        if type(child) is nn.Tanh:
            child.__class__ = Tanh
        elif type(child) is nn.Sequential and len(child) and all(isinstance(m, _SEQUENCE_LAYERS) for m in child):
            child.__class__ = MLP
    return module


def plain_modules(module: nn.Module) -> nn.Module:
    """Undo :func:`use_cpu_kernels` in place (each :class:`MLP` back to ``nn.Sequential``, each :class:`Tanh` to
    ``nn.Tanh``), so ``module`` holds only PyTorch's modules (TorchScript scripts it; exports compute exact
    ``tanh``); returns it."""
    for child in module.modules():
        if type(child) is Tanh:
            child.__class__ = nn.Tanh
        elif type(child) is MLP:
            child.__class__ = nn.Sequential
    return module
