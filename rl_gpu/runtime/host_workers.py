"""Host simulators in worker processes: N Gymnasium environments stepped by K processes, each owning a slice of the
rows, for environments whose step holds the GIL (written in Python).

Shape legend: N rows, K workers, O one observation's shape, D one action's shape.

Each worker builds ``gymnasium.make_vec(id, rows of its slice, "sync", same-step auto-reset)`` and waits for
commands on a pipe. Actions, observations, rewards, flags and final observations pass through shared memory: a
step writes the actions, sends every worker a one-byte command and waits for each one's one-byte answer; nothing
is pickled per step. Worker k seeds its sub-environments ``seed + lo_k, ...``, as one ``SyncVectorEnv`` of N seeds
``seed, seed + 1, ...``: the batch equals Gymnasium's own synchronous one step for step.

A worker that dies (a crash in the simulator, a kill) does not end the run: the step restarts it with fresh
environments for its slice (seeded apart), and reports that slice's episodes as cut there (``truncated``, the final
observation the last one seen, reward 0): the transition the crash lost is dropped, not invented.
:attr:`SlicedVectorEnv.restarts` counts them and each one is reported as a ``RuntimeWarning``.
"""

from __future__ import annotations

import multiprocessing as mp
import warnings
import weakref
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from rl_gpu.core.errors import UsageError

WAIT_SECONDS = 300.0
"""How long a step waits for a worker's answer before taking it for dead."""


def _views(names: dict[str, str], layout: dict[str, tuple[tuple[int, ...], str]]) -> tuple[list, dict]:
    blocks = {k: shared_memory.SharedMemory(name=names[k]) for k in layout}
    arrays = {k: np.ndarray(shape, dtype=np.dtype(dtype), buffer=blocks[k].buf) for k, (shape, dtype) in layout.items()}
    return list(blocks.values()), arrays


def _worker(env_id: str, kwargs: dict, lo: int, hi: int, names: dict, layout: dict, pipe: Any) -> None:
    import gymnasium
    from gymnasium.vector import AutoresetMode

    blocks, a = _views(names, layout)
    vec = gymnasium.make_vec(env_id, hi - lo, vectorization_mode="sync",
                             vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}, **kwargs)
    try:
        while True:
            command, seed = pipe.recv()
            if command == "close":
                break
            if command == "reset":
                obs, _ = vec.reset(seed=seed)
                a["obs"][lo:hi] = obs
            else:
                obs, reward, terminated, truncated, infos = vec.step(a["action"][lo:hi])
                a["obs"][lo:hi], a["reward"][lo:hi] = obs, reward
                a["terminated"][lo:hi], a["truncated"][lo:hi] = terminated, truncated
                finished = np.asarray(infos.get("_final_obs", np.zeros(hi - lo, dtype=bool)), dtype=bool)
                a["has_final"][lo:hi] = finished
                for i in np.flatnonzero(finished):
                    a["final_obs"][lo + i] = infos["final_obs"][i]
            pipe.send(b"k")
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        vec.close()
        for block in blocks:
            block.close()


class SlicedVectorEnv:
    """A Gymnasium vector environment (same-step auto-reset) of ``num_envs`` copies of ``env_id`` stepped by
    ``workers`` processes; what :class:`~rl_gpu.envs.gymnasium_env.GymnasiumEnv` builds for ``gym:ID?workers=K``.

    Args:
        env_id: a Gymnasium id.
        num_envs: N.
        workers: K (at most N), each stepping about N / K rows.
        env_kwargs: the environments' constructor arguments.
    """

    def __init__(self, env_id: str, num_envs: int, workers: int, env_kwargs: dict | None = None) -> None:
        import gymnasium
        from gymnasium.vector import AutoresetMode

        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= num_envs:
            raise UsageError(f"gym:{env_id}: workers must be an integer from 1 to num_envs ({num_envs}), got "
                             f"{workers!r}")
        self.env_id, self.num_envs, self.kwargs = env_id, num_envs, dict(env_kwargs or {})
        probe = gymnasium.make(env_id, **self.kwargs)
        self.single_observation_space, self.single_action_space = probe.observation_space, probe.action_space
        self.spec = probe.spec
        probe.close()
        obs, act = self.single_observation_space, self.single_action_space
        if obs.shape is None or act.shape is None:
            raise UsageError(f"gym:{env_id}?workers: observation and action spaces of fixed shape are needed, got "
                             f"{obs} and {act}")
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        n = num_envs
        self._layout = {"obs": ((n, *obs.shape), obs.dtype.str), "final_obs": ((n, *obs.shape), obs.dtype.str),
                        "action": ((n, *act.shape), act.dtype.str), "reward": ((n,), "<f8"),
                        "terminated": ((n,), "|b1"), "truncated": ((n,), "|b1"), "has_final": ((n,), "|b1")}
        self._blocks = {k: shared_memory.SharedMemory(create=True, size=max(1, int(np.prod(shape)) *
                                                                             np.dtype(dtype).itemsize))
                        for k, (shape, dtype) in self._layout.items()}
        self._a = {k: np.ndarray(shape, dtype=np.dtype(dtype), buffer=self._blocks[k].buf)
                   for k, (shape, dtype) in self._layout.items()}
        bounds = np.linspace(0, n, workers + 1).astype(int)
        self.slices = list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))
        # fork, as torch's DataLoader workers on Linux: a spawned child would re-run an unguarded main script, and
        # the worker touches only Gymnasium and numpy (never torch's thread pools or a GPU) after the fork.
        self._context = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        self._procs: list[Any] = [None] * workers
        self._pipes: list[Any] = [None] * workers
        self.restarts = 0
        """Workers restarted after dying (each one's slice cut its episodes at that step)."""
        self._seed = 0
        # Workers and shared memory go with the object even when nobody calls close().
        self._finalizer = weakref.finalize(self, _release, self._procs, self._pipes, self._blocks)
        for k in range(workers):
            self._start(k)

    @property
    def unwrapped(self) -> SlicedVectorEnv:
        return self

    def _start(self, k: int) -> None:
        lo, hi = self.slices[k]
        ours, theirs = self._context.Pipe()
        names = {key: block.name for key, block in self._blocks.items()}
        proc = self._context.Process(target=_worker, args=(self.env_id, self.kwargs, lo, hi, names, self._layout,
                                                           theirs), daemon=True, name=f"rl_gpu-host-{k}")
        proc.start()
        theirs.close()
        self._procs[k], self._pipes[k] = proc, ours

    def _answered(self, k: int) -> bool:
        """Wait for worker k's answer; False when it died instead."""
        pipe = self._pipes[k]
        try:
            if pipe.poll(WAIT_SECONDS):
                pipe.recv()
                return True
        except (EOFError, OSError):
            pass
        return False

    def _restart(self, k: int) -> None:
        """Replace dead worker k: fresh environments for its slice, seeded apart from every earlier start."""
        self.restarts += 1
        lo, hi = self.slices[k]
        warnings.warn(f"gym:{self.env_id}: host worker {k} (rows {lo}-{hi - 1}) died; restarted with fresh "
                      f"environments, its episodes cut at this step ({self.restarts} restart(s) so far)",
                      RuntimeWarning, stacklevel=3)
        proc = self._procs[k]
        if proc is not None and proc.is_alive():
            proc.kill()
        self._pipes[k].close()
        self._start(k)
        self._pipes[k].send(("reset", self._seed + lo + 1_000_003 * self.restarts))
        if not self._answered(k):
            raise RuntimeError(f"gym:{self.env_id}: host worker {k} died again while resetting")

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        self._seed = 0 if seed is None else int(seed)
        for k, (lo, _) in enumerate(self.slices):
            try:
                self._pipes[k].send(("reset", None if seed is None else self._seed + lo))
            except (OSError, ValueError):
                self._restart(k)
                continue
            if not self._answered(k):
                self._restart(k)
        return self._a["obs"].copy(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        a = self._a
        last = a["obs"].copy()
        a["action"][:] = np.asarray(action).reshape(a["action"].shape)
        sent = []
        for pipe in self._pipes:
            try:
                pipe.send(("step", None))
                sent.append(True)
            except (OSError, ValueError):  # the worker is gone already
                sent.append(False)
        lost = [k for k in range(len(self.slices)) if not (sent[k] and self._answered(k))]
        for k in lost:
            lo, hi = self.slices[k]
            self._restart(k)
            a["final_obs"][lo:hi], a["has_final"][lo:hi] = last[lo:hi], True
            a["reward"][lo:hi], a["terminated"][lo:hi], a["truncated"][lo:hi] = 0.0, False, True
        finished = a["has_final"].copy()
        infos = {"final_obs": a["final_obs"].copy(), "_final_obs": finished}
        return a["obs"].copy(), a["reward"].copy(), a["terminated"].copy(), a["truncated"].copy(), infos

    def close(self) -> None:
        self._finalizer()


def _release(procs: list, pipes: list, blocks: dict) -> None:
    """Stop the workers (a close command, then a kill for any still running) and free the shared memory."""
    for pipe in pipes:
        try:
            pipe.send(("close", None))
        except (OSError, ValueError, AttributeError):
            pass
    for proc in procs:
        if proc is not None:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
    for block in blocks.values():
        block.close()
        block.unlink()
    blocks.clear()
