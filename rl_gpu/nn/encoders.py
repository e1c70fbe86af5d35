"""Encoders: observations of any shape to one feature vector per row, chosen from the observation's shape.

Shape legend: B = leading (batch) dimensions, any number of them; O = the observation's shape; F = features;
H, W, C = an image's height, width and channels (channels last, as MinAtar and Gymnasium give frames).

- :class:`MLPEncoder`: flat observations (or any shape, flattened): tanh layers with orthogonal initialisation,
  the actor-critic MLP's hidden part.
- :class:`CNNEncoder`: ``[H, W, C]`` frames: 3x3 convolutions (stride 1, padding 0, ReLU), flattened, then ReLU
  layers. With ``channels=(16,)`` and ``hidden_sizes=(128,)`` it is MinAtar's network (Young and Tian, 2019).

An encoder takes observations ``[*B, *O]`` or flat ``[*B, prod(O)]`` (what an export feeds) of any dtype (bool
and uint8 frames become float32 at the input, except bool frames into an MLP encoder that takes them as they are,
:meth:`MLPEncoder.takes_bool_frames`) and returns ``[*B, F]``; ``out_size`` is F.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from rl_gpu.nn import frame_kernels
from rl_gpu.nn.cpu_kernels import takes_bool_frames
from rl_gpu.nn.layers import hidden_layers
from rl_gpu.nn.normalization import to_float


def leading_dims(x: Tensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The leading dimensions of ``x``, whose trailing ones are ``shape`` or its flat size."""
    if tuple(x.shape[-len(shape):]) == shape:
        return tuple(x.shape[:-len(shape)])
    if x.shape[-1] == math.prod(shape):
        return tuple(x.shape[:-1])
    raise ValueError(f"observations of shape {tuple(x.shape)} do not end in {shape} or its {math.prod(shape)} "
                     "values")


class _Frames(nn.Module):
    """Flat ``[N, H * W * C]`` -> ``[N, C, H, W]`` (what a convolution takes), TorchScript-friendly."""

    def __init__(self, obs_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.h, self.w, self.c = obs_shape

    def forward(self, x: Tensor) -> Tensor:
        return x.reshape(x.shape[0], self.h, self.w, self.c).permute(0, 3, 1, 2)


class MLPEncoder(nn.Module):
    """``[*B, *O]`` -> ``[*B, hidden_sizes[-1]]`` (``[*B, prod(O)]`` with no hidden layer): flattened, then tanh
    layers."""

    def __init__(self, obs_shape: Sequence[int], hidden_sizes: Sequence[int]) -> None:
        super().__init__()
        self.obs_shape = tuple(int(s) for s in obs_shape)
        layers, self.out_size = hidden_layers(math.prod(self.obs_shape), hidden_sizes)
        self.layers = nn.Sequential(*layers)

    def takes_bool_frames(self) -> bool:
        """Boolean observations enter the layers as they are (:func:`~rl_gpu.nn.cpu_kernels.takes_bool_frames`)."""
        return takes_bool_frames(self.layers)

    def forward(self, obs: Tensor) -> Tensor:
        lead = leading_dims(obs, self.obs_shape)
        x = obs if obs.dtype == torch.bool and self.takes_bool_frames() else to_float(obs)
        return self.layers(x.reshape(*lead, -1))

    def deploy_layers(self) -> nn.Module:
        """The encoder for flat float ``[N, prod(O)]`` input, as plain modules (what an export scripts)."""
        return self.layers


def encode_pair(actor: nn.Module, critic: nn.Module, obs: Tensor) -> tuple[Tensor, Tensor] | None:
    """``(actor(obs), critic(obs))`` for two :class:`MLPEncoder` s given the same boolean frames, their first layers
    as one kernel call where neither is trained (:func:`rl_gpu.nn.frame_kernels.pair_linear`: collecting and
    evaluating); None where that does not apply (the caller runs each encoder)."""
    if (obs.dtype != torch.bool or type(actor) is not MLPEncoder or type(critic) is not MLPEncoder
            or actor.obs_shape != critic.obs_shape or not (actor.takes_bool_frames() and critic.takes_bool_frames())):
        return None
    x = obs.reshape(*leading_dims(obs, actor.obs_shape), -1)
    if not frame_kernels.pair_applies(x, actor.layers[0], critic.layers[0]):
        return None
    actor_h, critic_h = frame_kernels.pair_linear(x, actor.layers[0], critic.layers[0])
    return actor.layers.forward_from(actor_h, 1), critic.layers.forward_from(critic_h, 1)


class CNNEncoder(nn.Module):
    """``[*B, H, W, C]`` frames -> ``[*B, hidden_sizes[-1]]``: 3x3 convolutions of ``channels`` (ReLU), flattened,
    then ReLU layers of ``hidden_sizes``."""

    def __init__(self, obs_shape: Sequence[int], channels: Sequence[int] = (16,),
                 hidden_sizes: Sequence[int] = (128,)) -> None:
        super().__init__()
        self.obs_shape = tuple(int(s) for s in obs_shape)
        if len(self.obs_shape) != 3:
            raise ValueError(f"a CNN encoder takes [H, W, C] frames, got observations of shape {self.obs_shape}")
        h, w, c = self.obs_shape
        if not channels or any(k <= 0 for k in channels):
            raise ValueError(f"channels must be positive, at least one, got {tuple(channels)}")
        if h - 2 * len(channels) <= 0 or w - 2 * len(channels) <= 0:
            raise ValueError(f"{len(channels)} 3x3 convolutions leave nothing of {h}x{w} frames")
        convs: list[nn.Module] = []
        for k in channels:
            convs += [nn.Conv2d(c, k, 3), nn.ReLU()]
            c = k
        self.convs = nn.Sequential(*convs)
        flat = c * (h - 2 * len(channels)) * (w - 2 * len(channels))
        layers, self.out_size = hidden_layers(flat, hidden_sizes, nn.ReLU)
        self.layers = nn.Sequential(*layers)

    def forward(self, obs: Tensor) -> Tensor:
        lead = leading_dims(obs, self.obs_shape)
        frames = to_float(obs).reshape(-1, *self.obs_shape).permute(0, 3, 1, 2)   # [B, C, H, W]
        return self.layers(self.convs(frames).flatten(1)).reshape(*lead, -1)

    def deploy_layers(self) -> nn.Module:
        """The encoder for flat float ``[N, H * W * C]`` input, as plain modules (what an export scripts)."""
        return nn.Sequential(_Frames(self.obs_shape), self.convs, nn.Flatten(1), self.layers)


def make_encoder(obs_shape: Sequence[int], hidden_sizes: Sequence[int], channels: Sequence[int] = ()) -> nn.Module:
    """The encoder for observations of ``obs_shape``: a CNN for ``[H, W, C]`` frames when ``channels`` are
    given, else an MLP over the flattened observation."""
    if channels:
        return CNNEncoder(obs_shape, channels, hidden_sizes)
    return MLPEncoder(obs_shape, hidden_sizes)
