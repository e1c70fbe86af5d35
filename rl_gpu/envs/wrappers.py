"""Observation wrappers written in an environment's id, so that a checkpoint's id rebuilds the same task:

- ``obs_mask=I,J,...``: keep only entries I, J, ... (in that order) of the observation's last axis, a partially
  observed task (``"HalfCheetah-v5?obs_mask=0,1,2,3,4,5,6,7"`` keeps the positions, hides the velocities);
- ``frame_stack=K``: the observation is the last K observations, oldest first, joined along the last axis
  (MinAtar's ``[10, 10, C]`` frames become ``[10, 10, K C]``, a vector of O entries one of K O); an episode's first
  observation fills all K places.

- ``action_perm=P0,P1,...``: discrete actions reach the environment permuted: the agent's action ``a`` is the
  environment's ``P[a]`` (a task whose controls are rewired: ``"CartPole-v1?action_perm=1,0"`` pushes right where
  CartPole pushes left, the interference a sequence of tasks needs to show forgetting); legal actions follow.
- ``action_sign=S0,S1,...``: continuous actions reach the environment with dimension ``d`` multiplied by ``S_d``
  (each 1 or -1; ``"Pendulum-v1?action_sign=-1"`` turns the torque around): the continuous tasks' rewiring. A
  reversed dimension needs bounds symmetric about 0.

All may be given (``"CartPole-v1?obs_mask=0,2&frame_stack=4"``: masked, then stacked). Any other name is one
of the environment's own parameters (its ``params_type``: ``"CartPole-v1?length=0.6"``,
``"Go1-Velocity-v0?obs_noise=1&action_delay=0,2"``; tuples as numbers joined by ``,``), bound by
:func:`with_params`. They wrap a
:class:`~rl_gpu.envs.base.TensorEnv` (every registered id except the ``gym:``, ``vmas:`` and ``pettingzoo:``
families) as a subclass built once per (class, settings), so compiled and graph-captured collection, state injection
and exact resume work as for the environment itself. The earlier frames are state: the inner state becomes a
``NamedTuple`` with the environment's own fields followed by ``previous_frames``, so same-step auto-reset refills
a finished row's window with ``torch.where`` as it resets the rest, and checkpoints carry it. Every method of the
environment still receives its own inner state, and observes only states it would observe itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch
from torch import Tensor

from rl_gpu.core.errors import UsageError
from rl_gpu.envs.params import split_id_parameters

WRAPPER_PARAMETERS = ("obs_mask", "frame_stack", "seats_as_agents", "action_perm", "action_sign")
"""What the query of a registered (or ``package.module:Class``) id may set."""

MAX_FRAME_STACK = 64
"""Most observations one stack joins."""


class Wrapping(NamedTuple):
    """What an id asks: kept indices of the observation's last axis (None: all) and frames per stack."""

    obs_mask: tuple[int, ...] | None
    frame_stack: int
    seats_as_agents: bool = False
    """A turn-based game's seats as agents of one world (:mod:`rl_gpu.envs.seat_agents`)."""
    action_perm: tuple[int, ...] | None = None
    """The environment's action for each of the agent's (None: the same)."""
    action_sign: tuple[float, ...] | None = None
    """Each continuous action dimension's factor, 1 or -1 (None: all 1)."""


def split_wrappers(env_id: str) -> tuple[str, Wrapping | None, dict[str, Any]]:
    """``"CartPole-v1?obs_mask=0,2&length=0.6"`` -> ``("CartPole-v1", Wrapping((0, 2), 1), {"length": 0.6})``: the
    base id, the wrappers it asks for (None: none) and the other parameters, the environment's own
    (:func:`with_params` checks them against its class); an id without ``?`` comes back as it is with None and
    no parameters. Malformed settings raise :class:`~rl_gpu.core.errors.UsageError` in one line."""
    base, query = env_id.split("?", 1) if "?" in env_id else (env_id, "")
    if not query:
        if "?" in env_id:
            raise UsageError(f"{env_id!r}: nothing follows '?' (write ID?obs_mask=I,J,... or ID?frame_stack=K)")
        return env_id, None, {}
    _, params = split_id_parameters("", f"{base}?{query}")
    own = {k: v for k, v in params.items() if k not in WRAPPER_PARAMETERS}
    if len(own) == len(params):
        return base, None, own
    mask = params.get("obs_mask")
    if mask is not None:
        parts = str(mask).split(",")
        if not all(p.isdigit() for p in parts):
            raise UsageError(f"{env_id!r}: obs_mask is a list of indices of the observation's last axis joined "
                             f"by ',' (obs_mask=0,2), got {mask!r}")
        mask = tuple(int(p) for p in parts)
        if len(set(mask)) != len(mask):
            raise UsageError(f"{env_id!r}: obs_mask names an index twice ({mask})")
    perm = params.get("action_perm")
    if perm is not None:
        parts = str(perm).split(",")
        perm = tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None
        if perm is None or sorted(perm) != list(range(len(perm))):
            raise UsageError(f"{env_id!r}: action_perm is a permutation of the action indices 0..A-1 joined by "
                             f"',' (action_perm=1,0), got {params['action_perm']!r}")
    sign = params.get("action_sign")
    if sign is not None:
        parts = [p.strip() for p in str(sign).split(",")]
        if not all(p in ("1", "-1", "1.0", "-1.0") for p in parts):
            raise UsageError(f"{env_id!r}: action_sign is one factor per continuous action dimension, each 1 or -1, "
                             f"joined by ',' (action_sign=1,-1), got {params['action_sign']!r}")
        sign = tuple(float(p) for p in parts)
    stack = params.get("frame_stack", 1)
    if isinstance(stack, bool) or not isinstance(stack, int) or not 1 <= stack <= MAX_FRAME_STACK:
        raise UsageError(f"{env_id!r}: frame_stack is the number of observations joined, an integer from 1 to "
                         f"{MAX_FRAME_STACK}, got {stack!r}")
    seats = params.get("seats_as_agents", 0)
    if seats not in (0, 1) or isinstance(seats, float):
        raise UsageError(f"{env_id!r}: seats_as_agents is 1 (a turn-based game's seats as agents of one world) or 0, "
                         f"got {seats!r}")
    if seats and (mask is not None or stack > 1 or perm is not None or sign is not None):
        raise UsageError(f"{env_id!r}: seats_as_agents takes neither obs_mask, frame_stack, action_perm nor "
                         "action_sign (each seat's observation and actions are the game's own)")
    return base, Wrapping(mask, stack, bool(seats), perm, sign), own


_with_params: dict[tuple, type] = {}


def _typed(value: Any, default: Any) -> Any:
    """An id's text value in the type of the parameter's default (``"0.4,1.25"`` for a tuple of numbers)."""
    if isinstance(default, tuple):
        parts = str(value).split(",")
        try:
            return tuple(int(p) if isinstance(d, int) and not isinstance(d, bool) else float(p)
                         for p, d in zip(parts, default)) if len(parts) == len(default) else None
        except ValueError:
            return None
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def with_params(cls: type, env_id: str, params: dict[str, Any]) -> type:
    """The subclass of ``cls`` built with ``params`` (fields of its ``params_type``, written in the id: a
    checkpoint's id rebuilds the same task) unless given otherwise; the same class for the same request. An unknown
    name or a value of the wrong form is a one-line :class:`~rl_gpu.core.errors.UsageError` naming what it takes."""
    ptype = getattr(cls, "params_type", None)
    defaults = {f.name: f.default for f in dataclasses.fields(ptype)} if ptype is not None else {}
    for name, value in params.items():
        if name not in defaults:
            takes = ", ".join(defaults) if defaults else "no parameters of its own"
            raise UsageError(f"{env_id!r}: unknown id parameter {name!r}; {getattr(cls, '__name__', cls)} takes "
                             f"{takes}, and the wrappers {' and '.join(WRAPPER_PARAMETERS)}")
        typed = _typed(value, defaults[name])
        if typed is None:
            raise UsageError(f"{env_id!r}: {name} takes {len(defaults[name])} numbers joined by ',' "
                             f"(as {','.join(map(str, defaults[name]))}), got {value!r}")
        params[name] = typed
    key = (cls, tuple(sorted(params.items())))
    if key not in _with_params:
        bound = dict(params)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            cls.__init__(self, *args, **{**bound, **kwargs})

        _with_params[key] = type(cls.__name__, (cls,), {"__init__": __init__, "__module__": cls.__module__,
                                                        "__qualname__": cls.__qualname__, "id_params": bound})
    return _with_params[key]


def refuse_wrappers(env_id: str) -> None:
    """A one-line :class:`~rl_gpu.core.errors.UsageError` when a prefixed id (``gym:``, ``vmas:``,
    ``pettingzoo:``: stepped by another library) asks for an observation wrapper."""
    keys = {part.partition("=")[0] for part in env_id.partition("?")[2].split("&")}
    asked = [name for name in WRAPPER_PARAMETERS if name in keys]
    if asked:
        raise UsageError(f"{env_id!r}: {asked[0]} wraps tensor environments (registered ids, package.module:Class "
                         "ids); gym:, vmas: and pettingzoo: ids are stepped by another library and take neither "
                         f"{' nor '.join(WRAPPER_PARAMETERS)}")


_classes: dict[tuple[type, Wrapping], type] = {}
_stacked_types: dict[type, type] = {}


def wrapped_class(cls: type, env_id: str, wrapping: Wrapping) -> type:
    """The subclass of ``cls`` that ``wrapping`` describes (the same class for the same request), or a one-line
    :class:`~rl_gpu.core.errors.UsageError` when ``cls`` cannot be wrapped so."""
    from rl_gpu.envs.base import TensorEnv

    if not (isinstance(cls, type) and issubclass(cls, TensorEnv)):
        raise UsageError(f"{env_id!r}: obs_mask and frame_stack wrap tensor environments (TensorEnv subclasses); "
                         f"{getattr(cls, '__name__', cls)} is stepped elsewhere")
    size = tuple(cls.obs_shape)[-1] if tuple(cls.obs_shape) else 1
    if wrapping.obs_mask is not None and max(wrapping.obs_mask) >= size:
        raise UsageError(f"{env_id!r}: obs_mask index {max(wrapping.obs_mask)} is out of range: the last axis of "
                         f"{cls.__name__}'s observation {tuple(cls.obs_shape)} has entries 0 to {size - 1}")
    if wrapping.action_perm is not None and (cls.num_actions != len(wrapping.action_perm) or cls.action_shape
                                             or cls.num_agents > 1):
        raise UsageError(f"{env_id!r}: action_perm permutes the discrete actions of one agent; {cls.__name__} has "
                         + (f"{cls.num_actions} discrete actions, not {len(wrapping.action_perm)}"
                            if not cls.action_shape and cls.num_agents == 1
                            else "continuous actions or several agents"))
    sign = wrapping.action_sign
    if sign is not None:
        if tuple(cls.action_shape) != (len(sign),) or cls.num_agents > 1:
            raise UsageError(f"{env_id!r}: action_sign gives one factor per continuous action dimension of one agent; "
                             f"{cls.__name__} has " + (f"{cls.action_shape[0]} dimensions, not {len(sign)}"
                                                       if len(cls.action_shape) == 1 and cls.num_agents == 1
                                                       else "discrete actions or several agents"))
        low, high = tuple(cls.action_low), tuple(cls.action_high)
        uneven = [d for d, f in enumerate(sign) if f < 0 and not (low and high and low[d] == -high[d])]
        if uneven:
            raise UsageError(f"{env_id!r}: action_sign reverses dimension {uneven[0]}, whose bounds are not symmetric "
                             f"about 0 (low {low[uneven[0]] if low else None}, high "
                             f"{high[uneven[0]] if high else None})")
    if wrapping.frame_stack > 1 and cls.num_players > 1:
        raise UsageError(f"{env_id!r}: frame_stack joins one player's observations in time, and {cls.__name__} "
                         "is a turn-based game whose observation changes hands every step")
    key = (cls, wrapping)
    if key not in _classes:
        suffix = ("Masked" if wrapping.obs_mask is not None else "") + (
            f"Stack{wrapping.frame_stack}" if wrapping.frame_stack > 1 else "") + (
            "Permuted" if wrapping.action_perm is not None else "") + (
            "Signed" if wrapping.action_sign is not None else "")
        name = f"{cls.__name__}{suffix}"
        # mirror: None, since the observation's layout is no longer the one the task's symmetry was declared on.
        namespace = {"wrapping": wrapping, "mirror": None, "__module__": __name__, "__qualname__": name,
                     "__doc__": f"{cls.__name__} seen through {wrapping} (:mod:`rl_gpu.envs.wrappers`)."}
        # A hook the environment leaves to the base class stays the base class's (it ignores the inner state's
        # fields, and the spec tells "has legal actions" by it).
        for hook in ("_observe_critic", "_legal_actions", "_acting", "_current_player"):
            if getattr(cls, hook) is getattr(TensorEnv, hook):  # (all legal stays all legal when permuted)
                namespace[hook] = getattr(TensorEnv, hook)
        _classes[key] = type(name, (ObservationWrapper, cls), namespace)
    return _classes[key]


def _stacked_type(base: type) -> type:
    """The inner-state type of a stacked environment: ``base``'s fields, then ``previous_frames`` (the K - 1
    observations before the current one, oldest first, joined along the last axis)."""
    if base not in _stacked_types:
        fields = [(f, Tensor) for f in base._fields] + [("previous_frames", Tensor)]
        stacked = NamedTuple(f"{base.__name__}Stacked", fields)
        stacked.__module__ = __name__
        stacked.base_type = base
        _stacked_types[base] = stacked
    return _stacked_types[base]


class ObservationWrapper:
    """Placed before a :class:`~rl_gpu.envs.base.TensorEnv` subclass in a class built by :func:`wrapped_class`."""

    wrapping: Wrapping

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._mask_index: dict[torch.device, Tensor] = {}
        self._perm_index: dict[torch.device, Tensor] = {}
        self._sign: dict[tuple[torch.device, torch.dtype], Tensor] = {}
        super().__init__(*args, **kwargs)
        raw = tuple(self.obs_shape)
        self.frame_shape = (*raw[:-1], len(self.wrapping.obs_mask)) if self.wrapping.obs_mask else raw
        """One observation's shape before stacking."""
        self.obs_shape = (*self.frame_shape[:-1], self.frame_shape[-1] * self.wrapping.frame_stack)
        self.obs_low, self.obs_high = self._bounds(self.obs_low, raw), self._bounds(self.obs_high, raw)

    def _bounds(self, flat: tuple[float, ...] | None, raw: tuple[int, ...]) -> tuple[float, ...] | None:
        if flat is None:
            return None
        t = torch.tensor(flat, dtype=torch.float64).view(raw)
        if self.wrapping.obs_mask is not None:
            t = t[..., list(self.wrapping.obs_mask)]
        t = torch.cat([t] * self.wrapping.frame_stack, -1)
        return tuple(t.flatten().tolist())

    def _frame(self, inner: Any) -> Tensor:
        """The environment's observation of its own ``inner``, masked."""
        obs = super()._observe(inner)
        mask = self.wrapping.obs_mask
        if mask is None:
            return obs
        index = self._mask_index.get(obs.device)
        if index is None:
            index = self._mask_index[obs.device] = torch.tensor(mask, device=obs.device)
        return obs.index_select(-1, index)

    def _own(self, inner: Any) -> Any:
        """The environment's own inner state (without the stacked frames)."""
        base = getattr(type(inner), "base_type", None)
        return inner if base is None else base(*inner[:-1])

    def newest_frame(self, obs: Tensor) -> Tensor:
        """The last observation of a stacked one (``[..., K C]`` -> ``[..., C]``)."""
        return obs[..., obs.shape[-1] - self.frame_shape[-1]:]

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> Any:
        inner = super()._sample_initial_state(num_envs, generator)
        k = self.wrapping.frame_stack
        if k == 1:
            return inner
        return _stacked_type(type(inner))(*inner, torch.cat([self._frame(inner)] * (k - 1), -1))

    def _permutation(self, device: torch.device) -> Tensor:
        index = self._perm_index.get(device)
        if index is None:
            index = self._perm_index[device] = torch.tensor(self.wrapping.action_perm, device=device)
        return index

    def _transition(self, inner: Any, action: Tensor) -> tuple[Any, Tensor, Tensor]:
        own = self._own(inner)
        if self.wrapping.action_perm is not None:
            action = self._permutation(action.device)[action]
        if self.wrapping.action_sign is not None:
            key = (action.device, action.dtype)
            if key not in self._sign:
                self._sign[key] = torch.tensor(self.wrapping.action_sign, device=action.device, dtype=action.dtype)
            action = action * self._sign[key]
        nxt, reward, terminated = super()._transition(own, action)
        if self.wrapping.frame_stack == 1:
            return nxt, reward, terminated
        # The window moves by the observation of the state stepped from (one the environment could be asked for;
        # the state stepped to may be a finished row's leftover that it never observes).
        frame = self._frame(own)
        previous = torch.cat([inner.previous_frames[..., frame.shape[-1]:], frame], -1)
        return _stacked_type(type(nxt))(*nxt, previous), reward, terminated

    def _observe(self, inner: Any) -> Tensor:
        if self.wrapping.frame_stack == 1:
            return self._frame(inner)
        return torch.cat([inner.previous_frames, self._frame(self._own(inner))], -1)

    def _observe_critic(self, inner: Any) -> Tensor:
        return super()._observe_critic(self._own(inner))

    def _legal_actions(self, inner: Any) -> Tensor:
        legal = super()._legal_actions(self._own(inner))
        if self.wrapping.action_perm is None:
            return legal
        # The agent's action a is the environment's P[a]: legal exactly when P[a] is.
        return legal.index_select(-1, self._permutation(legal.device))

    def _acting(self, inner: Any) -> Tensor | None:
        return super()._acting(self._own(inner))

    def _current_player(self, inner: Any) -> Tensor:
        return super()._current_player(self._own(inner))
