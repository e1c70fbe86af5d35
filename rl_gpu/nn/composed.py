"""A policy composed of parts: an encoder chosen from the observation's shape, optional memory, an action head,
and a critic of its own (encoder, memory, value layer): the ``composed`` policy kind.

Shape legend: T = steps, N = rows, O = observation shape, F = features, H = memory size, A = discrete actions,
D = continuous action dimensions.

- Encoder (:mod:`rl_gpu.nn.encoders`): ``[H, W, C]`` frames with ``channels`` given -> a CNN; anything else ->
  an MLP over the flattened observation. bool/uint8 observations stay so in storage and become float32 here.
- Memory (``memory_size`` H > 0): a GRU cell (or, with ``lstm``, an LSTM cell) after each encoder; the state is
  explicit, ``[N, 2, S]`` (the actor's and the critic's; S = H for a GRU, 2H for an LSTM's hidden and cell
  states side by side), an input and an output of every step (:mod:`rl_gpu.nn.memory`'s protocol).
- Head (:mod:`rl_gpu.nn.heads`): masked categorical or diagonal Gaussian.
- Asymmetric critic (``critic_obs_dim`` C > 0, an environment with a ``critic`` group; MLP encoders only): the
  critic's encoder reads ``concat(flattened obs, critic_obs)`` (``[N, O + C]``), the actor ``obs`` alone; with
  ``normalize_obs`` the privileged part has running statistics of its own. Called without ``critic_obs`` (exports,
  players) it still acts, reports zero values and holds the critic's memory.

Without memory it is a feed-forward actor-critic with the interface every algorithm uses (``act``, ``evaluate``,
``value``, ``update_normalizer``, ``config``, ``export_module``); with memory it also offers ``initial_state``,
``act_with_state``, ``value_with_state`` and :meth:`ComposedActorCritic.evaluate_sequence`, which replays a
rollout's ``[T, N]`` steps from its recorded starting state, resetting the state where episodes restarted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from rl_gpu.core.types import EnvSpec, PolicyOutput
from rl_gpu.nn.deploy import DeployedActor, DeployedRecurrentActor
from rl_gpu.nn.encoders import encode_pair, leading_dims, make_encoder
from rl_gpu.nn.heads import make_head
from rl_gpu.nn.layers import layer_init
from rl_gpu.nn.normalization import RunningMeanStd, to_float
from rl_gpu.nn.pieces import Pieces, first_states, run_pieces, split_pieces


class ComposedActorCritic(nn.Module):
    """encoder -> [memory] -> head, and encoder -> [memory] -> value (see the module docstring).

    Args:
        obs_shape: O.
        num_actions: A (discrete actions) or 0.
        action_dim: D (continuous actions) or 0.
        hidden_sizes: the encoders' layer widths (after the convolutions, for a CNN).
        channels: a CNN's 3x3 convolutions (``[H, W, C]`` frames only); empty: an MLP encoder.
        memory_size: H, the memory's hidden state in each branch; 0: no memory.
        lstm: the memory is an LSTM cell rather than a GRU cell.
        normalize_obs: running observation statistics (flattened) in front of both encoders.
        init_log_std: a Gaussian head's initial log standard deviation.
        critic_obs_dim: C, privileged observations the critic reads besides ``obs`` (0: none).
    """

    def __init__(self, obs_shape: Sequence[int], num_actions: int = 0, action_dim: int = 0,
                 hidden_sizes: Sequence[int] = (64, 64), channels: Sequence[int] = (), memory_size: int = 0,
                 normalize_obs: bool = False, init_log_std: float = 0.0, lstm: bool = False,
                 critic_obs_dim: int = 0) -> None:
        super().__init__()
        self.obs_shape = tuple(int(s) for s in obs_shape)
        if not self.obs_shape or any(s <= 0 for s in self.obs_shape) or any(h <= 0 for h in hidden_sizes) \
                or memory_size < 0:
            raise ValueError(f"obs_shape and hidden sizes must be positive and memory_size >= 0, got "
                             f"{self.obs_shape}, {tuple(hidden_sizes)}, {memory_size}")
        if critic_obs_dim < 0 or (critic_obs_dim and channels):
            raise ValueError(f"critic_obs_dim must be >= 0, and 0 with a CNN encoder; got {critic_obs_dim} with "
                             f"channels {tuple(channels)}")
        self.obs_dim = math.prod(self.obs_shape)
        self.num_actions, self.action_dim = int(num_actions), int(action_dim)
        self.hidden_sizes, self.channels = tuple(hidden_sizes), tuple(channels)
        self.memory_size, self.normalize_obs, self.init_log_std = memory_size, normalize_obs, init_log_std
        self.obs_rms = RunningMeanStd(self.obs_dim) if normalize_obs else None
        self.critic_obs_dim = int(critic_obs_dim)
        self.critic_obs_rms = RunningMeanStd(self.critic_obs_dim) if normalize_obs and critic_obs_dim else None
        self.actor_encoder = make_encoder(self.obs_shape, hidden_sizes, channels)
        critic_shape = (self.obs_dim + self.critic_obs_dim,) if critic_obs_dim else self.obs_shape
        self.critic_encoder = make_encoder(critic_shape, hidden_sizes, channels)
        features = self.actor_encoder.out_size
        self.lstm = bool(lstm) and memory_size > 0
        cell = nn.LSTMCell if self.lstm else nn.GRUCell
        self.actor_memory = cell(features, memory_size) if memory_size else None
        self.critic_memory = cell(features, memory_size) if memory_size else None
        out = memory_size or features
        self.head = make_head(out, num_actions, action_dim, init_log_std)
        self.value_layer = layer_init(nn.Linear(out, 1), gain=1.0)
        self.is_continuous = self.head.is_continuous

    @property
    def is_recurrent(self) -> bool:
        return self.memory_size > 0

    # --- the parts, row by row --------------------------------------------------------------------------

    def takes_bool_frames(self) -> bool:
        """Boolean observations reach both encoders as they are (the encoders' first layers then sum the weights
        of the set cells, :mod:`rl_gpu.nn.frame_kernels`): MLP encoders that take them, no normaliser, no
        privileged critic group."""
        return (self.obs_rms is None and not self.critic_obs_dim
                and all(getattr(e, "takes_bool_frames", lambda: False)()
                        for e in (self.actor_encoder, self.critic_encoder)))

    def preprocess(self, obs: Tensor) -> Tensor:
        """``obs`` as float32, normalised by the running statistics when enabled (flattened, then reshaped);
        boolean frames stay boolean for encoders that take them (:meth:`takes_bool_frames`)."""
        if obs.dtype == torch.bool and self.takes_bool_frames():
            return obs
        x = to_float(obs)
        if self.obs_rms is None:
            return x
        return self.obs_rms(x.reshape(*leading_dims(x, self.obs_shape), self.obs_dim))

    def _encode(self, x: Tensor, critic_obs: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """The encoders' outputs for preprocessed ``x`` (``[..., *O]``); the critic's is None where it reads a
        ``critic`` group that was not given."""
        if not self.critic_obs_dim and (both := encode_pair(self.actor_encoder, self.critic_encoder, x)) is not None:
            return both
        return self.actor_encoder(x), self._encode_critic(x, critic_obs)

    def _encode_critic(self, x: Tensor, critic_obs: Tensor | None) -> Tensor | None:
        """The critic encoder's output for preprocessed ``x`` (None: it reads a ``critic`` group not given)."""
        if not self.critic_obs_dim:
            return self.critic_encoder(x)
        if critic_obs is None:
            return None
        privileged = to_float(critic_obs)
        if self.critic_obs_rms is not None:
            privileged = self.critic_obs_rms(privileged)
        flat = x.reshape(*leading_dims(x, self.obs_shape), self.obs_dim)
        return self.critic_encoder(torch.cat([flat, privileged], dim=-1))

    def _check_state(self, state: Tensor | None) -> None:
        if self.memory_size and state is None:
            raise ValueError("this policy has memory: call act_with_state / value_with_state with its state "
                             "(initial_state(n) for fresh episodes)")

    def _features(self, obs: Tensor, state: Tensor | None,
                  critic_obs: Tensor | None = None) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """``(actor features, critic features, next state)`` for ``[N, *O]`` observations."""
        a, c = self._encode(self.preprocess(obs), critic_obs)
        if self.memory_size == 0:
            return a, c, None
        self._check_state(state)
        a, a_state = self._remember(self.actor_memory, a, state[:, 0])
        c_state = state[:, 1]  # held where the critic has no input
        if c is not None:
            c, c_state = self._remember(self.critic_memory, c, c_state)
        return a, c, torch.stack([a_state, c_state], dim=1)

    def _value(self, c: Tensor | None, rows: int, device: torch.device) -> Tensor:
        """``[N]`` values from critic features; zeros where the critic had no input (no ``critic_obs``)."""
        return torch.zeros(rows, device=device) if c is None else self.value_layer(c).squeeze(-1)

    def _remember(self, cell: nn.Module, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """``(output [N, H], next state [N, S])`` of one memory cell."""
        if not self.lstm:
            h = cell(x, state)
            return h, h
        h, c = cell(x, state.chunk(2, dim=-1))
        return h, torch.cat([h, c], dim=-1)

    def _no_memory(self, what: str) -> None:
        if self.memory_size:
            raise ValueError(f"this policy has memory: use {what}_with_state")

    # --- the feed-forward interface ---------------------------------------------------------------------

    def act(self, obs: Tensor, action_mask: Tensor | None = None, generator: torch.Generator | None = None,
            deterministic: bool = False, noise: Tensor | None = None, critic_obs: Tensor | None = None
            ) -> PolicyOutput:
        """One action per row of ``[N, *O]`` observations (sampled from ``noise`` when given)."""
        self._no_memory("act")
        out, _ = self.act_with_state(obs, None, action_mask, generator, deterministic, noise, critic_obs)
        return out

    def evaluate(self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None,
                 critic_obs: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_prob [N], entropy [N], value [N])`` of given actions (feed-forward policies; with memory,
        :meth:`evaluate_sequence`)."""
        self._no_memory("evaluate_sequence: evaluate")
        a, c, _ = self._features(obs, None, critic_obs)
        return (*self.head.log_prob_entropy(a, action, action_mask), self._value(c, a.shape[0], a.device))

    def value(self, obs: Tensor, critic_obs: Tensor | None = None) -> Tensor:
        self._no_memory("value")
        return self.value_with_state(obs, None, critic_obs)

    def update_normalizer(self, obs: Tensor, weight: Tensor | None = None, critic_obs: Tensor | None = None) -> None:
        """Merge observations (``[..., *O]``, rows weighted by ``weight``; ``critic_obs`` ``[..., C]`` too, into
        their own statistics) into the running statistics."""
        if self.obs_rms is not None:
            x = to_float(obs)
            self.obs_rms.update(x.reshape(*leading_dims(x, self.obs_shape), self.obs_dim), weight)
        if self.critic_obs_rms is not None and critic_obs is not None:
            self.critic_obs_rms.update(to_float(critic_obs), weight)

    # --- memory -------------------------------------------------------------------------------------------

    def initial_state(self, num_envs: int) -> Tensor:
        """``[N, 2, S]`` zeros: the state of fresh episodes."""
        size = self.memory_size * (2 if self.lstm else 1)
        return torch.zeros(num_envs, 2, size, device=self.value_layer.weight.device)

    def act_with_state(self, obs: Tensor, state: Tensor | None, action_mask: Tensor | None = None,
                       generator: torch.Generator | None = None, deterministic: bool = False,
                       noise: Tensor | None = None, critic_obs: Tensor | None = None) -> tuple[PolicyOutput, Tensor]:
        """One decision, and the state after ``obs`` was seen (None without memory)."""
        a, c, after = self._features(obs, state, critic_obs)
        action, log_prob = self.head.act(a, action_mask, generator, deterministic, noise)
        return PolicyOutput(action, log_prob, self._value(c, a.shape[0], a.device)), after

    def value_with_state(self, obs: Tensor, state: Tensor | None, critic_obs: Tensor | None = None) -> Tensor:
        """``[N]`` V(obs) for a policy in ``state`` (the state before ``obs``): the critic's branch alone (the
        collectors ask this of every step's final observation)."""
        self._check_state(state)
        x = self.preprocess(obs)
        c = self._encode_critic(x, critic_obs)
        if self.memory_size and c is not None:
            c, _ = self._remember(self.critic_memory, c, state[:, 1])
        return self._value(c, x.shape[0], x.device)

    def sequence_step(self, a_in: Tensor, c_in: Tensor, state: Tensor, start: Tensor,
                      initial: Tensor, hold: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """One step of :meth:`evaluate_sequence`'s memory: ``(actor output [n, H], critic output [n, H], next state
        [n, 2, S])`` from the encoders' ``[n, E]`` outputs and the state before the step, reset to ``initial``
        where ``start`` (``[n]`` bool); where ``hold`` (``[n]`` bool: not the learner's turn) the state does not
        advance, as the collector kept it. A pure function of tensors: the unit a compiled update compiles once
        and calls T times."""
        state = torch.where(start[:, None, None], initial, state)
        a, a_state = self._remember(self.actor_memory, a_in, state[:, 0])
        c, c_state = self._remember(self.critic_memory, c_in, state[:, 1])
        after = torch.stack([a_state, c_state], dim=1)
        return a, c, after if hold is None else torch.where(hold[:, None, None], state, after)

    def evaluate_sequence(self, obs: Tensor, action: Tensor, action_mask: Tensor | None, state0: Tensor,
                          starts: Tensor, step=None, hold: Tensor | None = None,
                          critic_obs: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_prob, entropy, value)``, each ``[T, N]``, of a rollout's steps replayed from ``state0``
        (``[N, 2, S]``, the state before step 0); ``starts`` ``[T, N]`` bool: an episode starts at step t (its
        state is the initial one there, as the collector reset it); ``hold`` ``[T, N]`` bool (turn-based games):
        the step is not the learner's, so its state does not advance there. ``step``: :meth:`sequence_step` or a
        compiled form of it. ``critic_obs`` ``[T, N, C]``: the ``critic`` group of an asymmetric critic."""
        # The encoders and the heads see every step at once ([T, n] leading dimensions); only the memory, whose
        # input at t is its own output at t - 1, runs step by step (compiling the T unrolled steps as one graph
        # took minutes: a compiled update compiles the one step instead).
        if self.critic_obs_dim and critic_obs is None:
            raise ValueError(f"this policy's critic reads {self.critic_obs_dim} privileged observations (the "
                             "environment's critic group): pass critic_obs")
        a_in, c_in = self._encode(self.preprocess(obs), critic_obs)
        initial = self.initial_state(obs.shape[1])
        # An LSTM, eager on the CPU (where reading the pieces' lengths costs no device synchronisation), not
        # turn-based, not under autocast: the memory runs over whole episode pieces, one oneDNN LSTM layer call per
        # length bucket and branch with the cells' own weights, instead of T Python steps. (A GRU layer on the CPU
        # has no fused kernel: it beats this loop by little, and buckets add steps.)
        if self.lstm and step is None and hold is None and obs.device.type == "cpu" \
                and not torch.is_autocast_enabled("cpu"):
            a, c = self._replay_pieces(a_in, c_in, state0, starts[0], initial, split_pieces(starts))
            return (*self.head.log_prob_entropy(a, action, action_mask), self.value_layer(c).squeeze(-1))
        step = self.sequence_step if step is None else step
        state, a_out, c_out = state0, [], []
        for t in range(obs.shape[0]):
            held = () if hold is None else (hold[t],)
            a, c, state = step(a_in[t], c_in[t], state, starts[t], initial, *held)
            a_out.append(a)
            c_out.append(c)
        a, c = torch.stack(a_out), torch.stack(c_out)
        return (*self.head.log_prob_entropy(a, action, action_mask), self.value_layer(c).squeeze(-1))

    def _replay_pieces(self, a_in: Tensor, c_in: Tensor, state0: Tensor, starts0: Tensor, initial: Tensor,
                       pieces: Pieces) -> tuple[Tensor, Tensor]:
        """The actor's and the critic's LSTM outputs (``[T, N, H]`` each) for encoder outputs ``[T, N, F]``, each
        branch's cell run by ``torch.lstm`` over the episode pieces (:mod:`rl_gpu.nn.pieces`)."""
        h0 = first_states(state0, initial, starts0, pieces)  # [E, 2, 2H]
        outs = []
        for branch, (cell, x) in enumerate(((self.actor_memory, a_in), (self.critic_memory, c_in))):
            weights = [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]

            def layer(seq: Tensor, h: Tensor, weights=weights) -> Tensor:
                hidden = tuple(part[None].contiguous() for part in h.chunk(2, dim=-1))
                return torch.lstm(seq, hidden, weights, True, 1, 0.0, self.training, False, False)[0]

            outs.append(run_pieces(layer, x, h0[:, branch], pieces))
        return outs[0], outs[1]

    # --- checkpoints and export ---------------------------------------------------------------------------

    def config(self) -> dict:
        """Constructor arguments, enough to rebuild the network from a checkpoint."""
        sizes = {"action_dim": self.action_dim, "init_log_std": self.init_log_std} if self.is_continuous \
            else {"num_actions": self.num_actions}
        # Entries of a part it does not have are left out (a checkpoint's sizes are positive integers).
        parts = {**({"channels": list(self.channels)} if self.channels else {}),
                 **({"memory_size": self.memory_size} if self.memory_size else {}),
                 **({"lstm": True} if self.lstm else {}),
                 **({"critic_obs_dim": self.critic_obs_dim} if self.critic_obs_dim else {})}
        return {"kind": "composed", "obs_shape": list(self.obs_shape), **sizes,
                "hidden_sizes": list(self.hidden_sizes), **parts, "normalize_obs": self.normalize_obs}

    def export_module(self) -> DeployedActor:
        """The deterministic action from flat ``[N, prod(O)]`` observations as plain PyTorch, the normaliser
        folded in; with memory a :class:`~rl_gpu.nn.deploy.DeployedRecurrentActor` (the actor's state in and
        out)."""
        sizes = {"action_dim": self.action_dim} if self.is_continuous else {"num_actions": self.num_actions}
        if self.memory_size:
            return DeployedRecurrentActor(self.actor_encoder.deploy_layers(), self.actor_memory,
                                          self.head.deploy_layers(), self.obs_dim, lstm=self.lstm,
                                          obs_rms=self.obs_rms, **sizes)
        actor = nn.Sequential(self.actor_encoder.deploy_layers(), self.head.deploy_layers())
        return DeployedActor(actor, self.obs_dim, obs_rms=self.obs_rms, **sizes)


def composed_for_env(spec: EnvSpec, hidden_sizes: Sequence[int], normalize_obs: bool,
                     init_log_std: float, memory_size: int = 0, lstm: bool = False,
                     cnn: bool = True) -> ComposedActorCritic:
    """``--policy composed``: MinAtar's CNN (one 3x3 convolution of 16 channels) for ``[H, W, C]`` frames, an
    MLP otherwise; the hidden sizes are the run's; a GRU (``lstm``: an LSTM) of ``memory_size`` units after each
    encoder (``--memory gru`` or ``lstm``); with a ``critic`` observation group the critic also reads it.
    ``cnn=False``: MLPs over flattened frames too."""
    frames = len(spec.obs_shape) == 3 and cnn
    if "critic" in spec.obs_groups and frames:
        raise ValueError("policy kind 'composed' reads a critic observation group beside vector observations only, "
                         "not frames: use an environment without one")
    sizes = {"action_dim": spec.action_size, "init_log_std": init_log_std} if spec.is_continuous \
        else {"num_actions": spec.num_actions}
    return ComposedActorCritic(spec.obs_shape, hidden_sizes=hidden_sizes, channels=(16,) if frames else (),
                               memory_size=memory_size, lstm=lstm, normalize_obs=normalize_obs,
                               critic_obs_dim=spec.critic_obs_size if "critic" in spec.obs_groups else 0, **sizes)
