"""The replay buffer of off-policy algorithms: a ring of transitions on the environments' device.

Shape legend: C = capacity in transitions, L = C / N rows, N = environments, T = steps added at once,
O = observation shape, D = action dimensions, B = batch rows, K = ``n_step``.

Every field is a ``[C, ...]`` tensor whose slot ``row * N + env`` holds the transition environment ``env`` took
at ring row ``row``: one vector step of the N environments fills one row, so a row's successor in time is the
next row (modulo L) of the same environment, which is what n-step returns walk along. The write position and
the number of filled rows are 0-dim device tensors: adding and sampling read nothing back to the host, so both
run inside compiled code and CUDA graphs. The host keeps its own count of rows written (:attr:`rows_written`),
which it knows without reading the device, for checkpoints and for deciding when learning starts.

Each transition keeps ``terminated`` apart from ``truncated`` and the true next observation (the environment's
``final_obs``: the observation the transition reached, before any auto-reset), so a target bootstraps through a
time limit and not through a terminal state.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor


class ReplayBatch(NamedTuple):
    """B sampled transitions, their n-step returns and where to bootstrap from."""

    obs: Tensor
    """``[B, *O]`` observation the action was taken in."""
    action: Tensor
    """``[B, D]`` the action the environment received."""
    reward: Tensor
    """``[B]`` the discounted reward sum over the k <= K steps taken from ``obs`` (k = 1 for ``n_step`` 1)."""
    next_obs: Tensor
    """``[B, *O]`` the observation reached after those k steps (before any auto-reset)."""
    discount: Tensor
    """``[B]`` ``gamma^k``, or 0 when the last of the k steps terminated: ``target = reward + discount * V``."""
    index: Tensor
    """``[B]`` int64 slots sampled (slot ``row * N + env``)."""


class ReplayBuffer:
    """A ring of ``capacity`` transitions (rounded down to whole rows of ``num_envs``) on ``device``.

    Args:
        capacity: C, at least ``num_envs``.
        num_envs: N, environments stepped together (transitions per row).
        obs_shape: O.
        action_shape: ``(D,)``.
        device: where the tensors live.
        n_step: K, steps summed into each sampled return (1: one-step TD targets).
        gamma: discount of the n-step returns.
    """

    FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")

    def __init__(self, capacity: int, num_envs: int, obs_shape: tuple[int, ...], action_shape: tuple[int, ...],
                 device: torch.device | str, n_step: int = 1, gamma: float = 0.99,
                 obs_dtype: torch.dtype = torch.float32) -> None:
        if num_envs <= 0 or capacity < num_envs:
            raise ValueError(f"a replay buffer of {capacity} transitions cannot hold one step of {num_envs} "
                             "environments: raise --buffer-size to at least --num-envs")
        if n_step < 1:
            raise ValueError(f"n_step must be at least 1, got {n_step}")
        self.num_envs = num_envs
        self.num_rows = capacity // num_envs
        self.capacity = self.num_rows * num_envs
        self.n_step = n_step
        self.gamma = float(gamma)
        self.device = torch.device(device)
        c = self.capacity
        # Zeros, not uninitialised memory: the trainer's finiteness check reads the whole state.
        self.obs = torch.zeros(c, *obs_shape, dtype=obs_dtype, device=self.device)
        self.next_obs = torch.zeros(c, *obs_shape, dtype=obs_dtype, device=self.device)
        self.action = torch.zeros(c, *action_shape, device=self.device)
        self.reward = torch.zeros(c, device=self.device)
        self.terminated = torch.zeros(c, dtype=torch.bool, device=self.device)
        self.truncated = torch.zeros(c, dtype=torch.bool, device=self.device)
        self.pos = torch.zeros((), dtype=torch.long, device=self.device)
        """0-dim int64: the ring row the next step is written to."""
        self.rows = torch.zeros((), dtype=torch.long, device=self.device)
        """0-dim int64: rows holding transitions (at most L)."""
        self.rows_written = 0
        """Rows written since the buffer was created or emptied (host count: every ``add`` of T steps adds T)."""

    def __len__(self) -> int:
        """Transitions held (a host count: no device read)."""
        return min(self.rows_written, self.num_rows) * self.num_envs

    def _rows(self, field: Tensor) -> Tensor:
        return field.view(self.num_rows, self.num_envs, *field.shape[1:])

    def add(self, obs: Tensor, action: Tensor, reward: Tensor, next_obs: Tensor, terminated: Tensor,
            truncated: Tensor) -> None:
        """:meth:`write` then :meth:`count`: T steps of the N environments (every argument ``[T, N, ...]``)."""
        self.write(obs, action, reward, next_obs, terminated, truncated)
        self.count(reward.shape[0])

    def count(self, steps: int) -> None:
        """Advance the host count of rows written by ``steps`` (after a :meth:`write` of that many, which a
        CUDA graph may replay without running Python)."""
        self.rows_written += steps

    def write(self, obs: Tensor, action: Tensor, reward: Tensor, next_obs: Tensor, terminated: Tensor,
              truncated: Tensor) -> None:
        """Write T steps of the N environments (every argument ``[T, N, ...]``) at the ring position on the
        device; the oldest rows are overwritten once the ring is full. The host count is :meth:`count`'s. No
        host synchronisation."""
        steps = reward.shape[0]
        if steps > self.num_rows:
            raise ValueError(f"{steps} steps at once do not fit in a ring of {self.num_rows} rows: raise "
                             "--buffer-size or lower --num-steps")
        rows = (self.pos + torch.arange(steps, device=self.device)) % self.num_rows
        for name, value in zip(self.FIELDS, (obs, action, reward, next_obs, terminated, truncated)):
            self._rows(getattr(self, name)).index_copy_(0, rows, value.to(getattr(self, name).dtype))
        self.pos.copy_((self.pos + steps) % self.num_rows)
        self.rows.copy_((self.rows + steps).clamp(max=self.num_rows))

    def sample(self, bits: Tensor) -> ReplayBatch:
        """B transitions drawn uniformly (with replacement) from those held, from ``bits`` (``[B]`` int64
        uniform in ``[0, 2**62)``, drawn outside: compiled code and CUDA graphs hold no random-number
        generation). With ``n_step`` K > 1 each return walks up to K steps along its environment's row
        sequence, stopping at the end of an episode or at the newest row. No host synchronisation; call it
        only once the buffer holds a transition."""
        n, rows = self.num_envs, self.num_rows
        # Modulo of 62 random bits: its bias (at most C / 2**62) is far below float32 resolution.
        index = bits % (self.rows * n)
        row, env = index // n, index % n
        reward = self.reward[index]
        terminated = self.terminated[index]
        if self.n_step == 1:
            discount = torch.where(terminated, 0.0, self.gamma)
            return ReplayBatch(self.obs[index], self.action[index], reward, self.next_obs[index], discount, index)
        done = terminated | self.truncated[index]
        # Steps written after this one in its environment's sequence (0 for the newest row).
        newer = (self.pos - 1 - row) % rows
        last, power = index, torch.full_like(reward, self.gamma)
        ongoing = ~done
        for k in range(1, self.n_step):
            take = ongoing & (newer >= k)
            slot = ((row + k) % rows) * n + env
            reward = reward + torch.where(take, self.reward[slot] * self.gamma**k, 0.0)
            last = torch.where(take, slot, last)
            terminated = torch.where(take, self.terminated[slot], terminated)
            power = torch.where(take, self.gamma ** (k + 1), power)
            ongoing = take & ~(self.terminated[slot] | self.truncated[slot])
        discount = torch.where(terminated, 0.0, power)
        return ReplayBatch(self.obs[index], self.action[index], reward, self.next_obs[last], discount, index)

    def clear(self) -> None:
        """Forget every transition (the memory stays allocated)."""
        self.pos.zero_()
        self.rows.zero_()
        self.rows_written = 0

    def state_dict(self) -> dict[str, Any]:
        """The filled rows of every field and the ring's position, as tensors and plain values (only rows
        that hold transitions: an early checkpoint stays small). A partly filled field is a copy: ``torch.save``
        writes a view's whole storage, the empty capacity included."""
        filled = min(self.rows_written, self.num_rows) * self.num_envs
        state: dict[str, Any] = {}
        for name in self.FIELDS:
            field = getattr(self, name)
            state[name] = field if filled == self.capacity else field[:filled].clone()
        state.update(pos=self.pos, rows=self.rows, rows_written=self.rows_written, capacity=self.capacity,
                     num_envs=self.num_envs)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output into this buffer's own tensors (compiled code and CUDA graphs keep
        reading them). Raises ``ValueError`` for a buffer of another capacity or number of environments."""
        if state["capacity"] != self.capacity or state["num_envs"] != self.num_envs:
            raise ValueError(f"the saved replay buffer holds {state['capacity']} transitions of "
                             f"{state['num_envs']} environments, this one {self.capacity} of {self.num_envs}")
        for name in self.FIELDS:
            saved = state[name]
            getattr(self, name)[: saved.shape[0]].copy_(saved)
        self.pos.copy_(state["pos"])
        self.rows.copy_(state["rows"])
        self.rows_written = int(state["rows_written"])
