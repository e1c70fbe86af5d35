"""Meta-World (``pip install metaworld``, 3.x): its Sawyer-arm tasks as a batch, ``make("metaworld:MT10", N)``.

``metaworld:MT10`` (or ``MT25``, ``MT50``) splits the N rows over the benchmark's tasks in equal blocks (as
``multitask:`` does); each row is Meta-World's own environment of its task, built as Meta-World's benchmark builds
it (``Meta-World/MT1`` with the task one-hot, its time limit of 500 steps, a task parameter drawn from the
benchmark's 50 per task at each reset), stepped on the host through Gymnasium's vector API
(:class:`~rl_gpu.envs.gymnasium_env.GymnasiumEnv`). ``metaworld:reach-v3`` is one task (no one-hot);
``metaworld:reach-v3|push-v3@0|...`` tasks of one's choosing with the one-hot, weighted as ``multitask:`` weighs
them (the phases of a task sequence, :mod:`rl_gpu.training.continual`).

Success is Meta-World's ``info["success"]``: an episode succeeds when it is reached at any step (Meta-World's
evaluation counts the same). It is a reward term of the batch (``reward/success`` in every log, the success rate of
every evaluation) and, per task, :meth:`MetaWorldEnv.task_stats` (``task/K/success``); evaluations also report each
task's return (:attr:`MetaWorldEnv.row_tasks`).

Meta-World 3.1 pins MuJoCo 3.3.0 and does not run on the MuJoCo this project's own robots use (4.x: its equality
constraints changed size), so it lives in an environment of its own (benchmarks/README.md, "Meta-World").
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rl_gpu.core.errors import UsageError
from rl_gpu.envs.dependency_warnings import warnings_once
from rl_gpu.envs.gymnasium_env import GymnasiumEnv
from rl_gpu.envs.multitask import parse_tasks, split_rows

BENCHMARKS = {"MT10": 10, "MT25": 25, "MT50": 50}


def _import():
    try:
        import gymnasium
        import metaworld
    except ImportError as e:
        raise UsageError(f"metaworld: ids need Meta-World 3.x (pip install metaworld, in an environment with MuJoCo "
                         f"3.3: Meta-World pins it): {e}") from None
    return gymnasium, metaworld


def task_names(name: str, seed: int | None) -> list[tuple[str, float]]:
    """The tasks of ``name`` with their row weights: a benchmark's, in its order, or tasks joined by ``|`` with
    optional weights (``reach-v3|push-v3@0``, as :func:`rl_gpu.envs.multitask.parse_tasks` reads them)."""
    _, metaworld = _import()
    if name in BENCHMARKS:
        return [(t, 1.0) for t in getattr(metaworld, name)(seed=seed).train_classes]
    tasks = parse_tasks(name)
    for task, _ in tasks:
        if task not in metaworld.ALL_V3_ENVIRONMENTS:
            raise UsageError(f"metaworld:{task}: not a Meta-World benchmark or task; benchmarks: "
                             f"{', '.join(BENCHMARKS)}; tasks such as reach-v3, push-v3 "
                             "(metaworld.ALL_V3_ENVIRONMENTS), joined by '|' with optional row weights "
                             "(reach-v3|push-v3@0)")
    return tasks


def _row_env(gymnasium, task: str, seed: int, row: int, max_episode_steps: int | None, **kwargs: Any):
    """One row: Meta-World's environment of ``task`` with the benchmark's task variations of ``seed``, its own
    random stream seeded by ``seed + row`` (Meta-World seeds every copy alike, so rows of one task would otherwise
    draw the same variation at their first reset and play identical episodes)."""
    env = gymnasium.make("Meta-World/MT1", env_name=task, seed=seed, max_episode_steps=max_episode_steps, **kwargs)
    env.unwrapped.seed((seed + row) % 2**32)
    return env


class MetaWorldEnv(GymnasiumEnv):
    """Meta-World tasks in the rows of one batch (see the module docstring)."""

    def __init__(self, name: str, num_envs: int = 1, device: str | torch.device = "cpu", seed: int | None = None,
                 *, max_episode_steps: int | None = None, validate_actions: bool = True) -> None:
        gymnasium, _ = _import()
        if "?" in name:
            raise UsageError(f"metaworld:{name}: takes no settings after '?'")
        # Meta-World seeds numpy's legacy generator with it: 32 bits.
        base = 0 if seed is None else int(seed) % 2**32
        weighted = task_names(name, base)
        tasks = [t for t, _ in weighted]
        k = len(tasks)
        rows = split_rows(num_envs, [w for _, w in weighted])
        extra = {"use_one_hot": True, "num_tasks": k} if k > 1 else {}
        makers = []
        for task_index, (task, count) in enumerate(zip(tasks, rows)):
            for _ in range(count):
                # Meta-World's benchmark seed draws each task's parameters; each row's own reset stream is seeded
                # by the first reset (seed + row), as Gymnasium does.
                makers.append(partial(_row_env, gymnasium, task, base, len(makers), max_episode_steps,
                                      env_id=task_index, **extra))
        with warnings_once(python=True):  # Meta-World's space warnings: once per process, not per row and evaluation
            vec = gymnasium.vector.SyncVectorEnv(makers, autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)
        self.task_ids = tuple(tasks)
        self.task_rows = tuple(rows)
        self.row_tasks = torch.repeat_interleave(torch.arange(k), torch.tensor(rows))
        """``[N]`` int64 (on the CPU): each row's task."""
        self.reward_terms = ("success",)
        n = len(makers)
        self._succeeded = np.zeros(n, dtype=bool)
        self._last_success = np.zeros(n, dtype=bool)
        self._finished = np.zeros((2, k), dtype=np.float64)  # successes, episodes (per task) since the last read
        self._last_rate = np.zeros(k, dtype=np.float64)
        self._batch = np.zeros(2)  # successes, episodes (the whole batch) since the last read
        self._row_task = self.row_tasks.numpy()
        super().__init__(vec, device=device, seed=base, validate_actions=validate_actions)
        self.env_id = f"metaworld:{name}"
        self._label = self.env_id
        # Meta-World's time limit (500 steps), unless given: the sub-environments' TimeLimit.
        self.max_episode_steps = max_episode_steps or vec.envs[0].unwrapped.max_path_length

    @property
    def spec(self):
        import dataclasses

        k = len(self.task_ids)
        return dataclasses.replace(super().spec, reward_terms=self.reward_terms, num_tasks=k if k > 1 else 0)

    def _read_info(self, infos: dict, done: np.ndarray) -> None:
        now = np.asarray(infos.get("success", np.zeros(self.num_envs)), dtype=bool)
        if done.any():
            final = infos.get("final_info", {})
            last = np.asarray(final.get("success", np.zeros(self.num_envs)), dtype=bool)
            now = np.where(done, last, now)
        self._succeeded |= now
        if done.any():
            np.add.at(self._finished[0], self._row_task[done], self._succeeded[done].astype(np.float64))
            np.add.at(self._finished[1], self._row_task[done], 1.0)
            self._batch += (float(self._succeeded[done].sum()), float(done.sum()))
            self._last_success[done] = self._succeeded[done]
            self._succeeded[done] = False

    def reset(self, seed: int | None = None):
        self._succeeded[:] = False
        return super().reset(seed)

    def reset_rows(self, rows: Tensor):
        self._succeeded[rows.detach().cpu().numpy().astype(bool)] = False
        return super().reset_rows(rows)

    def row_success(self) -> Tensor:
        """``[N]`` bool (CPU): whether each row's last finished episode succeeded (an evaluation's rows play one
        episode each: their successes, for per-task rates)."""
        return torch.from_numpy(self._last_success.copy())

    def reward_term_totals(self) -> tuple[dict[str, Tensor], Tensor]:
        """``({"success": episodes that succeeded}, episodes)``, 0-dim, finished since the last call."""
        successes, episodes = self._batch
        self._batch = np.zeros(2)
        return ({"success": torch.tensor(successes, dtype=torch.float64)}, torch.tensor(episodes, dtype=torch.float64))

    def reward_term_stats(self) -> dict[str, Tensor]:
        """``{"success": rate}`` of the episodes finished since the last call (NaN when none)."""
        sums, episodes = self.reward_term_totals()
        return {"success": sums["success"] / episodes}

    def task_stats(self) -> dict[str, Tensor]:
        """``{"K/success": rate}`` per task: the success rate of its episodes finished since the last call (the last
        rate when none finished: a quiet update is not a missing value); the counts restart."""
        successes, episodes = self._finished
        self._last_rate = np.where(episodes > 0, successes / np.maximum(episodes, 1), self._last_rate)
        self._finished[:] = 0.0
        return {f"{i}/success": torch.tensor(float(r)) for i, r in enumerate(self._last_rate)}
