"""Several tasks in one batch: the rows of one :class:`~rl_gpu.envs.base.TensorEnv` split among tasks.

``"multitask:CartPole-v1|CartPole-v1?length=1.0|CartPole-v1?action_perm=1,0"`` builds one batch whose rows hold
the three tasks in contiguous blocks (equal shares; ``ID@W`` weighs a task's share, ``@0`` keeps its slot with no
rows). Each task is any tensor-env id (parameters and wrappers included); they must agree on what the policy sees
and does (observation shape and dtype, actions, time limit) and on the layout of their state (parameter variants
of one environment always do), so the batch steps each block with its own task's pure transition and joins the
results: one task's cost per row, whatever the number of tasks. The observation ends with the one-hot of the row's
task (``multitask-noid:`` leaves the observation as the tasks give it: the policy must tell them apart itself).

Per-task statistics: :meth:`MultiTaskEnv.task_stats` gives each task's mean return over the episodes finished
since the last call (kept in the state, so compiled and graph-captured collection count them too), logged by the
trainer as ``task/K/return``; evaluations report each task's own mean return (:attr:`MultiTaskEnv.row_tasks`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import torch
from torch import Tensor

from rl_gpu.core.errors import UsageError
from rl_gpu.core.device import check_device
from rl_gpu.envs.base import TensorEnv

PREFIX, BLIND_PREFIX = "multitask:", "multitask-noid:"
MAX_TASKS = 1024

_state_types: dict[type, type] = {}
COUNTERS = ("finished_return", "finished")
"""The fields the batch adds before the tasks' own: the sum and number of each row's episodes finished since
statistics were last read."""


def _state_type(inner_type: type) -> type:
    if inner_type not in _state_types:
        fields = [(f, Tensor) for f in COUNTERS] + [(f, Tensor) for f in inner_type._fields]
        made = NamedTuple(f"MultiTask{inner_type.__name__}", fields)
        made.__module__ = __name__
        made.inner_type = inner_type
        _state_types[inner_type] = made
    return _state_types[inner_type]


def parse_tasks(text: str) -> list[tuple[str, float]]:
    """``"A|B@2|C@0"`` -> ``[("A", 1.0), ("B", 2.0), ("C", 0.0)]``; a malformed list is a one-line UsageError."""
    tasks = []
    for part in text.split("|"):
        task, at, weight = part.rpartition("@") if "@" in part else (part, "", "1")
        try:
            w = float(weight)
        except ValueError:
            w = math.nan
        if not task.strip() or task != task.strip() or not (math.isfinite(w) and 0 <= w <= 1e6):
            raise UsageError(f"multitask: {part!r} is not a task: write ID or ID@W (W a share of the rows from 0 to "
                             f"1e6), tasks joined by '|' (multitask:CartPole-v1|CartPole-v1?length=1.0@2)")
        tasks.append((task, w))
    if not 1 <= len(tasks) <= MAX_TASKS or not any(w > 0 for _, w in tasks):
        raise UsageError(f"multitask: {len(tasks)} tasks, {sum(w > 0 for _, w in tasks)} with rows: give 1 to "
                         f"{MAX_TASKS} tasks, at least one of weight above 0")
    return tasks


def split_rows(num_envs: int, weights: list[float]) -> list[int]:
    """Rows per task in proportion to ``weights`` (largest remainders, ties to the first task), every task of
    positive weight at least one row; fewer rows than such tasks (a probe of one row): one each to the first."""
    live = [i for i, w in enumerate(weights) if w > 0]
    if num_envs < len(live):
        return [1 if i in live[:num_envs] else 0 for i in range(len(weights))]
    shares = [num_envs * w / sum(weights) for w in weights]
    rows = [int(x) for x in shares]
    for i in sorted(live, key=lambda i: (-(shares[i] - rows[i]), i))[:num_envs - sum(rows)]:
        rows[i] += 1
    for i in live:  # a task too light for a row of its own takes one from the largest
        if rows[i] == 0:
            rows[max(range(len(rows)), key=lambda j: rows[j])] -= 1
            rows[i] = 1
    return rows


def _layout(env: TensorEnv) -> tuple:
    inner = env.state.inner
    return type(inner), tuple((t.dtype, tuple(t.shape[1:])) for t in inner)


class MultiTaskEnv(TensorEnv):
    """Rows of several tensor-env tasks in one batch (see the module docstring).

    Args:
        tasks: ``"A|B@2|..."`` or a list of ids (equal shares) or ``(id, weight)`` pairs.
        num_envs: rows in all, split among the tasks in proportion to their weights.
        task_id: end the observation with the one-hot of the row's task.
    """

    def __init__(self, tasks: str | list, num_envs: int, device: str | torch.device = "cpu",
                 seed: int | None = None, *, max_episode_steps: int | None = None, task_id: bool = True,
                 autoreset: bool = True, validate_actions: bool = True, fuse: bool = True) -> None:
        from rl_gpu.envs.registry import env_class, make, named_ids_only

        parsed = parse_tasks(tasks) if isinstance(tasks, str) else [
            (t, 1.0) if isinstance(t, str) else (str(t[0]), float(t[1])) for t in tasks]
        self.task_ids = tuple(t for t, _ in parsed)
        self.task_weights = tuple(w for _, w in parsed)
        self.task_rows = tuple(split_rows(num_envs, list(self.task_weights)))
        self.task_id = task_id
        children = []
        with named_ids_only(self.task_ids):  # the whole id was allowed: so are its tasks
            for task, rows in zip(self.task_ids, self.task_rows):
                if task.startswith((PREFIX, BLIND_PREFIX)):
                    raise UsageError(f"multitask: {task!r}: a task cannot itself be several tasks")
                cls = env_class(task)
                if not (isinstance(cls, type) and issubclass(cls, TensorEnv)):
                    raise UsageError(f"multitask: {task!r} is stepped by another library; the tasks of one batch are "
                                     "tensor environments (registered ids, their parameters and wrappers)")
                children.append(make(task, num_envs=max(rows, 1), device=device, seed=0, validate_actions=False,
                                     autoreset=autoreset))
        self.tasks = children
        first = children[0]
        for task, child in zip(self.task_ids[1:], children[1:]):
            for what, mine, theirs in (
                ("observation shape", child.obs_shape, first.obs_shape), ("observation dtype", child.obs_dtype,
                                                                          first.obs_dtype),
                ("discrete actions", child.num_actions, first.num_actions),
                ("action shape", child.action_shape, first.action_shape),
                ("action bounds", (child.action_low, child.action_high), (first.action_low, first.action_high)),
                ("time limit", child.max_episode_steps, first.max_episode_steps),
                ("critic observation", child.critic_obs_shape, first.critic_obs_shape),
                ("state layout", _layout(child), _layout(first)),
            ):
                if mine != theirs:
                    raise UsageError(f"multitask: {task!r} differs from {self.task_ids[0]!r} in its {what} "
                                     f"({mine} against {theirs}); the tasks of one batch share what the policy sees "
                                     "and does and the layout of their state (parameter variants of one environment "
                                     "do)")
        if first.num_players > 1 or first.num_agents > 1:
            raise UsageError(f"multitask: {self.task_ids[0]!r} has several players or agents; the tasks of one batch "
                             "are single-agent tasks")
        if task_id and (len(first.obs_shape) != 1 or first.obs_dtype != torch.float32):
            raise UsageError(f"multitask: the task one-hot joins flat float32 observations, and {self.task_ids[0]!r} "
                             f"observes {tuple(first.obs_shape)} {first.obs_dtype}; use {BLIND_PREFIX} (no task id in "
                             "the observation)")
        k = len(children) if task_id else 0
        self.obs_shape = (first.obs_shape[0] + k,) if task_id else tuple(first.obs_shape)
        self.obs_dtype = first.obs_dtype
        self.num_actions, self.action_shape = first.num_actions, tuple(first.action_shape)
        self.action_low, self.action_high = tuple(first.action_low), tuple(first.action_high)
        self.max_episode_steps = first.max_episode_steps if max_episode_steps is None else max_episode_steps
        self.critic_obs_shape = first.critic_obs_shape
        self.obs_low, self.obs_high = self._bounds(children, k)
        self._starts = [sum(self.task_rows[:i]) for i in range(len(children))]
        self.row_tasks = torch.repeat_interleave(torch.arange(len(children)), torch.tensor(self.task_rows))
        """``[N]`` int64 (on the CPU): each row's task."""
        self._fused = self._fuse(children, device, autoreset) if fuse else None
        """Parameter variants of one environment that takes a parameter per row (``row_params``): one instance
        whose numeric parameters are ``[N]`` tensors steps every row in one call (tested equal to the blocks)."""
        self._last = None
        self._onehot_rows = self.row_tasks.to(check_device(device))
        # Each row's task is fixed: its one-hot is one constant joined to every observation.
        self._onehot = torch.nn.functional.one_hot(self._onehot_rows, len(children)).float()
        super().__init__(num_envs, device, seed, autoreset=autoreset, validate_actions=validate_actions)
        self._last = torch.zeros(len(children), dtype=torch.float64, device=self.device)

    def _fuse(self, children: list, device, autoreset: bool) -> TensorEnv | None:
        def base(cls: type) -> type:
            while "id_params" in cls.__dict__:  # with_params layers (ids' parameters) above the environment
                cls = cls.__bases__[0]
            return cls

        live = [c for c, n in zip(children, self.task_rows) if n]
        kinds = {base(type(c)) for c in live}
        cls = kinds.pop()
        # row_params is the class's own declaration, not inherited: a subclass may cache what its parameters give.
        own = cls.__dict__.get("row_params", False)
        if len(live) < 2 or kinds or not own or cls.params_type is None or hasattr(cls, "wrapping"):
            return None
        rows = torch.tensor([n for n in self.task_rows if n])
        values = {}
        for f in dataclasses.fields(cls.params_type):
            given = [getattr(c.params, f.name) for c in live]
            if all(v == given[0] for v in given):
                continue
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in given):
                return None  # a flag or a tuple that differs: each task its own block
            per_task = torch.tensor([float(v) for v in given], dtype=torch.float64)
            values[f.name] = torch.repeat_interleave(per_task, rows).to(live[0].device)
        fused = type(live[0])(1, device=device, seed=0, validate_actions=False, autoreset=autoreset)
        fused.params = dataclasses.replace(live[0].params, **values)
        return fused

    @staticmethod
    def _bounds(children: list, k: int) -> tuple:
        lows, highs = [c.obs_low for c in children], [c.obs_high for c in children]
        if any(b is None for b in lows + highs):
            return None, None
        low = tuple(min(v) for v in zip(*lows)) + (0.0,) * k
        high = tuple(max(v) for v in zip(*highs)) + (1.0,) * k
        return low, high

    @property
    def spec(self):
        return dataclasses.replace(super().spec, has_action_mask=any(c.spec.has_action_mask for c in self.tasks),
                                   mirror=None, num_tasks=len(self.tasks) if self.task_id else 0)

    # --- the blocks ---------------------------------------------------------------------------------------

    def _blocks(self):
        """``(task index, child, rows slice)`` of every task with rows."""
        for i, (child, start, rows) in enumerate(zip(self.tasks, self._starts, self.task_rows)):
            if rows:
                yield i, child, slice(start, start + rows)

    def _own(self, s: Any, rows: slice) -> Any:
        inner_type = type(s).inner_type
        return inner_type(*(t[rows] for t in s[len(COUNTERS):]))

    def _join(self, parts: list) -> Any:
        return type(parts[0])(*(torch.cat(ts) for ts in zip(*parts))) if len(parts) > 1 else parts[0]

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> Any:
        if num_envs != sum(self.task_rows):
            raise ValueError(f"a multitask batch draws starts for its {sum(self.task_rows)} rows, not {num_envs}")
        if self._fused is not None:
            inner = self._fused._sample_initial_state(num_envs, generator)
        else:
            inner = self._join([child._sample_initial_state(self.task_rows[i], generator)
                                for i, child, _ in self._blocks()])
        zeros = torch.zeros(num_envs, dtype=torch.float64, device=self.device)
        return _state_type(type(inner))(zeros, zeros, *inner)

    def _transition(self, s: Any, action: Tensor) -> tuple[Any, Tensor, Tensor]:
        if self._fused is not None:
            nxt, reward, terminated = self._fused._transition(type(s).inner_type(*s[len(COUNTERS):]), action)
            return type(s)(s.finished_return, s.finished, *nxt), reward, terminated
        parts, rewards, ends = [], [], []
        for _, child, rows in self._blocks():
            nxt, reward, terminated = child._transition(self._own(s, rows), action[rows])
            parts.append(nxt)
            rewards.append(reward)
            ends.append(terminated)
        reward = torch.cat(rewards) if len(rewards) > 1 else rewards[0]
        inner = self._join(parts)
        return (type(s)(s.finished_return, s.finished, *inner), reward,
                torch.cat(ends) if len(ends) > 1 else ends[0])

    def _carry(self, finished: Any, fresh: Any) -> Any:
        if self._fused is not None:
            inner = self._fused._carry(type(finished).inner_type(*finished[len(COUNTERS):]),
                                       type(fresh).inner_type(*fresh[len(COUNTERS):]))
        else:
            inner = self._join([child._carry(self._own(finished, rows), self._own(fresh, rows))
                                for _, child, rows in self._blocks()])
        # The tallies go on through a reset (step_state adds the episode that ended).
        return type(finished)(finished.finished_return, finished.finished, *inner)

    def step_state(self, state, action: Tensor, reset_inner: Any):
        new_state, result = super().step_state(state, action, reset_inner)
        done = result.terminated | result.truncated
        s = new_state.inner
        ended = torch.where(done, result.episode_return.double(), 0.0)
        return new_state._replace(inner=s._replace(finished_return=s.finished_return + ended,
                                                   finished=s.finished + done)), result

    def _rows_of(self, method: str, s: Any) -> Tensor:
        if self._fused is not None:
            return getattr(self._fused, method)(type(s).inner_type(*s[len(COUNTERS):]))
        parts = [getattr(child, method)(self._own(s, rows)) for _, child, rows in self._blocks()]
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def _observe(self, s: Any) -> Tensor:
        obs = self._rows_of("_observe", s)
        if not self.task_id:
            return obs
        if obs.shape[0] != self._onehot.shape[0]:  # not the batch's rows (an injected state of other rows)
            raise ValueError(f"a multitask batch observes its {self._onehot.shape[0]} rows, not {obs.shape[0]}")
        return torch.cat([obs, self._onehot], -1)

    def _observe_critic(self, s: Any) -> Tensor:
        return self._rows_of("_observe_critic", s)

    def _legal_actions(self, s: Any) -> Tensor:
        return self._rows_of("_legal_actions", s)

    # --- statistics ---------------------------------------------------------------------------------------

    def task_stats(self) -> dict[str, Tensor]:
        """``{"K/return": 0-dim tensor}`` per task K with rows: the mean return of its episodes finished since the
        last call (the last such mean when none finished: a quiet update is not a missing value); the tallies
        restart."""
        s = self.state.inner
        k = len(self.tasks)
        task = self._onehot_rows
        sums = torch.zeros(k, dtype=torch.float64, device=self.device).index_add_(0, task, s.finished_return)
        counts = torch.zeros(k, dtype=torch.float64, device=self.device).index_add_(0, task, s.finished)
        self._last = torch.where(counts > 0, sums / counts.clamp(min=1), self._last)
        zeros = torch.zeros_like(s.finished)
        self.state = self.state._replace(inner=s._replace(finished_return=zeros, finished=zeros))
        return {f"{i}/return": self._last[i] for i, _, _ in self._blocks()}

    def describe_tasks(self) -> str:
        return ", ".join(f"{i}: {t} ({n} rows)" for i, (t, n) in enumerate(zip(self.task_ids, self.task_rows)))


class BlindMultiTaskEnv(MultiTaskEnv):
    """``multitask-noid:``: :class:`MultiTaskEnv` without the task's one-hot in the observation."""

    def __init__(self, *args: Any, task_id: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, task_id=task_id, **kwargs)
