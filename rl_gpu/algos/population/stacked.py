"""K networks of one architecture evaluated as one: their parameters and buffers stacked along a leading ``[K]``
axis and every method called through one ``torch.func.vmap`` over ``torch.func.functional_call``, so each layer
runs as one batched matrix multiply over the members.

Shape legend: K = members, N = rows per member, O = observation shape, A = discrete actions.

The member modules stay ordinary ``nn.Module`` objects holding their own leaf parameters (each can be saved,
evaluated and exported alone); :meth:`StackedModules.stack` builds the ``[K, ...]`` tensors from them with
``torch.stack``, which autograd differentiates, so a backward pass through a stacked call leaves each member's
gradient in its own parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from rl_gpu.core.types import PolicyOutput
from rl_gpu.nn.actor_critic import ActorCritic, GaussianActorCritic
from rl_gpu.nn.cpu_kernels import MLP, stacked_mlp
from rl_gpu.nn.normalization import to_float


class _MethodCall(nn.Module):
    """``forward(method, *args)`` calls ``module.<method>(*args)``: what lets ``functional_call`` (which only
    calls ``forward``) reach ``act``, ``evaluate`` and ``value``."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, method: str, *args: Any) -> Any:
        return getattr(self.module, method)(*args)


class StackedModules:
    """Calls of K same-shaped modules as one vmapped call.

    Args:
        members: K modules with the same parameter and buffer names and shapes (member 0 is the template the
            calls run through; its own tensors are swapped out for the stacked ones during a call).
    """

    def __init__(self, members: Sequence[nn.Module]) -> None:
        if not members:
            raise ValueError("a population needs at least one member")
        self.members = list(members)
        self._caller = _MethodCall(self.members[0])
        shapes = [[(n, t.shape) for n, t in m.state_dict().items()] for m in self.members]
        if any(s != shapes[0] for s in shapes):
            raise ValueError("population members must have the same architecture (parameter names and shapes)")
        self._param_names = [f"module.{n}" for n, _ in self.members[0].named_parameters()]
        self._buffer_names = [f"module.{n}" for n, _ in self.members[0].named_buffers()]
        self.member_params = [list(m.parameters()) for m in self.members]
        """Each member's own parameters (the leaves its gradients land in)."""
        self._buffers = [list(m.buffers()) for m in self.members]

    def __len__(self) -> int:
        return len(self.members)

    def stack(self, grad: bool = True) -> dict[str, Tensor]:
        """``name -> [K, ...]`` parameters and buffers of every member, stacked (differentiable when ``grad``:
        gradients flow back to each member's own parameters)."""
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            params = [torch.stack(ts) for ts in zip(*self.member_params)]
        buffers = [torch.stack(ts) for ts in zip(*self._buffers)]
        return {**dict(zip(self._param_names, params)), **dict(zip(self._buffer_names, buffers))}

    def call(self, state: dict[str, Tensor], method: str, *args: Any) -> Any:
        """``member_k.<method>(*args_k)`` for every k at once: tensor arguments are ``[K, ...]`` (member k reads
        index k), other arguments (None, flags, configurations) are shared. Returns the method's outputs with a
        leading ``[K]`` axis."""
        in_dims = (0, *(0 if isinstance(a, (Tensor, dict)) else None for a in args))
        return vmap(partial(self.call_member, method), in_dims=in_dims)(state, *args)

    def call_member(self, method: str, state: dict[str, Tensor], *args: Any) -> Any:
        """One member's ``<method>(*args)`` with ``state`` (one member's slice of :meth:`stack`, as vmap
        passes it) in place of the template's own tensors."""
        return functional_call(self._caller, state, (method, *args), strict=True)


def _split(x: Tensor | None, k: int) -> Tensor | None:
    """``[K * N, ...]`` rows -> ``[K, N, ...]`` (member k owns rows ``k*N:(k+1)*N``)."""
    return None if x is None else x.view(k, x.shape[0] // k, *x.shape[1:])


def _merge(x: Tensor) -> Tensor:
    return x.flatten(0, 1)


class StackedActor:
    """The :class:`~rl_gpu.core.types.Actor` of a population over ``[K * N]`` rows, member k acting on rows
    ``k*N:(k+1)*N`` with its own parameters; what a :class:`~rl_gpu.collect.engine.RolloutEngine` over the
    population's ``K * N``-row environment calls. :meth:`refresh` takes the members' current parameters (once
    per rollout: they do not change while it is collected)."""

    def __init__(self, stacked: StackedModules) -> None:
        self.stacked = stacked
        template = stacked.members[0]
        self.is_continuous = template.is_continuous
        self.direct = (isinstance(template, (ActorCritic, GaussianActorCritic)) and not template.critic_obs_dim
                       and all(isinstance(net, MLP) for net in (template.actor, template.critic)))
        """Members are actor-critics of two MLPs (no privileged critic input): their networks run as
        :func:`~rl_gpu.nn.layers.stacked_mlp` calls on the stacked weights and the sampling on all members' rows
        at once (``act_from``), outside ``vmap`` (whose batching rule for each linear layer costs a bias pass of
        its own)."""
        self.layers = {name: list(getattr(template, name)) for name in ("actor", "critic")} if self.direct else {}
        self.state: dict[str, Tensor] = {}
        self.params: dict[str, list[tuple[Tensor, Tensor]]] = {}
        self.refresh()

    def refresh(self) -> None:
        self.state = self.stacked.stack(grad=False)
        if self.direct:
            template = self.stacked.members[0]
            self.params = {name: [(self.state[f"module.{name}.{i}.weight"], self.state[f"module.{name}.{i}.bias"])
                                  for i, layer in enumerate(getattr(template, name)) if type(layer) is nn.Linear]
                           for name in ("actor", "critic")}

    def _network(self, name: str, x: Tensor) -> Tensor:
        """``[K, N, out]``: every member's ``actor`` or ``critic`` on its ``[K, N, O]`` preprocessed rows."""
        return stacked_mlp(self.layers[name], self.params[name], x)

    def _preprocess(self, obs: Tensor) -> Tensor:
        k = len(self.stacked)
        if self.stacked.members[0].obs_rms is None:
            return _split(to_float(obs), k)
        return self.stacked.call(self.state, "preprocess", _split(obs, k))

    def act(self, obs: Tensor, action_mask: Tensor | None = None, generator: torch.Generator | None = None,
            deterministic: bool = False, noise: Tensor | None = None,
            critic_obs: Tensor | None = None) -> PolicyOutput:
        if generator is not None:
            raise ValueError("a stacked population acts from pre-drawn noise (one stream per member), not from "
                             "one generator")
        k = len(self.stacked)
        if self.direct:  # the members' act, every member's rows at once
            x = self._preprocess(obs)
            out, value = self._network("actor", x), self._network("critic", x).squeeze(-1)
            template = self.stacked.members[0]
            extra = {"log_std": self.state["module.log_std"].unsqueeze(1)} if self.is_continuous else {}
            result = template.act_from(out, value, _split(action_mask, k), None, deterministic, _split(noise, k),
                                       **extra)
            return PolicyOutput(*(_merge(t) for t in result))
        out = self.stacked.call(self.state, "act", _split(obs, k), _split(action_mask, k), None, deterministic,
                                _split(noise, k), _split(critic_obs, k))
        return PolicyOutput(*(_merge(x) for x in out))

    def value(self, obs: Tensor, critic_obs: Tensor | None = None) -> Tensor:
        if self.direct:
            return _merge(self._network("critic", self._preprocess(obs))).squeeze(-1)
        k = len(self.stacked)
        return _merge(self.stacked.call(self.state, "value", _split(obs, k), _split(critic_obs, k)))
