"""The checkpointed side of a :class:`~rl_gpu.training.runner.Trainer`: what ``last.pt`` and ``best.pt`` hold,
writing them only with finite parameters, and loading a ``last.pt`` back (only after checking that it belongs to
the run directory it sits in).

``last.pt`` holds everything the next iteration depends on: the algorithm's state, the environments' state where
the engine allows it, every random stream, counters, the validation streak and whether a validation is still due.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import torch
from torch import Tensor

from rl_gpu.runtime.checkpoint import CheckpointError, atomic_write_bytes, load_checkpoint, save_checkpoint
from rl_gpu.runtime.distributed import is_main_process
from rl_gpu.training.evaluation import EvalResult
from rl_gpu.training.events import CheckpointSaved
from rl_gpu.training.lifecycle import check_checkpoint_belongs
from rl_gpu.training.ranks import gather_payload, rank_trainer_state, read_on_main
from rl_gpu.training.run_state import RunState

RUN_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(RunState))


def check_trainer_payload(path: Path, payload: dict, env_id: str) -> int:
    """The seed of a loaded ``last.pt``; refuses one that holds no training state of an ``env_id`` run this version
    can continue (one line). Called before anything of the run is built."""
    seed = payload.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise CheckpointError(f"{path}: not a resumable checkpoint (it records no seed)")
    if payload.get("env_id") != env_id or "trainer" not in payload:
        raise CheckpointError(f"{path}: not a resumable checkpoint of a {env_id} run")
    if "env" not in payload["trainer"]:
        raise CheckpointError(f"{path}: written by rl_gpu before 0.2, whose training state this version cannot "
                              "continue; evaluate and export still read it, or start a new run")
    return seed


class CheckpointMixin:
    """State and checkpoints of a trainer (the attributes are :class:`~rl_gpu.training.runner.Trainer`'s)."""

    def state_dict(self) -> dict:
        """Everything the next update depends on, as tensors and plain values (``weights_only``-loadable)."""
        return {
            "algorithm": self.algo.state_dict(),
            "initial_policy": self.initial_policy.state_dict(),
            "env": self.env.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            **self.state.to_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        run_state = RunState.from_dict({k: state[k] for k in RUN_STATE_FIELDS if k in state})  # checked first
        self.algo.load_state_dict(state["algorithm"])
        self.initial_policy.load_state_dict(state["initial_policy"])
        self.env.load_state_dict(state["env"])
        if not self.env.spec.exact_resume:
            self.log(f"[seed {self.seed}] note: {self.config.env} keeps its state outside tensors; the "
                     "environments restart with a fresh reset, so this resume is not bit-exact")
        for note in self.algo.resume_notes:
            self.log(f"[seed {self.seed}] note: {note}")
        torch.set_rng_state(state["torch_rng"].cpu())
        if torch.cuda.is_available() and state["cuda_rng"]:
            torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
        self.state = run_state
        self.steps_taken = None  # counted again from global_step

    def checkpoint_payload(self, validation: EvalResult | None = None, resumable: bool = True) -> dict:
        """What a checkpoint file holds; without ``resumable``, no training state (no optimiser, environments,
        random streams or replay buffer): only what evaluation, export and ``rl_gpu.load`` read."""
        payload = {
            "env_id": self.config.env,
            "algo": self.config.algo,
            "policy_config": self.algo.policy.config(),
            "update": self.state.update,
            "global_step": self.state.global_step,
            "seed": self.seed,
            "config": self.config.to_dict(),
            "validation": validation.to_dict() if validation is not None else None,
            # Kept at the top level too: evaluate/export read the policy without the trainer state.
            "algorithm": {"policy": self.algo.policy.state_dict()},
        }
        if resumable:
            payload["trainer"] = self.state_dict()
        return payload

    def save(self, name: str, validation: EvalResult | None = None) -> None:
        """Write ``name``; under torchrun every process calls this together. ``last.pt`` is what a run resumes
        from: rank 0 writes every rank's state into the one file (:func:`rl_gpu.training.ranks.gather_payload`).
        ``best.pt`` holds the policy and its validation only (a replay buffer of millions of transitions has no
        business in it)."""
        if name == "last.pt":
            payload = gather_payload(self.checkpoint_payload(validation))
        else:
            payload = self.checkpoint_payload(validation, resumable=False) if is_main_process() else None
        if payload is not None:
            save_checkpoint(self.run_dir / name, payload)
            self.events.emit(CheckpointSaved(self.seed, self.run_dir, name, self.run_dir / name, self.state.update))

    def state_is_finite(self) -> bool:
        """Whether every floating-point tensor of the algorithm's state (parameters, optimiser moments,
        normalisers) is finite: one reduction per tensor and one host read for all, at checkpoint time only."""
        def tensors(value):
            if isinstance(value, Tensor):
                yield value
            elif isinstance(value, dict):
                for v in value.values():
                    yield from tensors(v)
            elif isinstance(value, (list, tuple)):
                for v in value:
                    yield from tensors(v)

        flags = [t.isfinite().all() for t in tensors(self.algo.state_dict()) if t.is_floating_point()]
        return bool(torch.stack(flags).all()) if flags else True

    def resume_from(self, path: Path, payload: dict | None = None) -> None:
        """Load ``path`` (a ``last.pt``; ``payload`` if already loaded), check that it is this directory's run,
        and only then drop metric lines written after it, so the run continues as if it had never stopped."""
        if payload is None:  # else read and checked by the caller (training.runner.resume) before the run was built
            payload = load_checkpoint(path, self.device)
            check_trainer_payload(path, payload, self.config.env)
        check_checkpoint_belongs(self.run_dir, payload)
        try:
            self.load_state_dict(rank_trainer_state(payload, path))
        except (KeyError, RuntimeError, ValueError, TypeError, AttributeError) as e:
            raise CheckpointError(f"{path}: checkpoint does not match this run ({str(e).splitlines()[0][:160]})")
        self.resumed = True
        best = self.run_dir / "best.pt"
        if self.state.best_score > -math.inf and not read_on_main(lambda: os.path.isfile(best)):
            self.log(f"[seed {self.seed}] note: {best} (the best validation, update {self.state.best_update}) is "
                     "missing: the best is chosen again from the validations to come")
            self.state.best_score, self.state.best_update = -math.inf, 0
        metrics = self.run_dir / "metrics.jsonl"
        if metrics.exists() and is_main_process():
            # A checkpoint without a baseline was written before the initial validation: its line goes too.
            last = self.state.update if self.state.baseline is not None else -1
            kept = []
            for line in metrics.read_text(errors="replace").splitlines():
                try:
                    record = json.loads(line)
                except (json.JSONDecodeError, ValueError, RecursionError):
                    continue  # a line cut short by a crash, or not one the run wrote
                if isinstance(record, dict) and isinstance(record.get("update", 0), int) \
                        and record.get("update", 0) <= last:
                    kept.append(line)
            # A stop during this update's validation left its line without the validation: it is held back and
            # written again with the validation the resumed run makes first, so the record has one line per
            # update, as an uninterrupted run's.
            tail = json.loads(kept[-1]) if kept else None
            if self.state.validation_due and self.state.update > 0 and isinstance(tail, dict) \
                    and tail.get("update") == self.state.update and "validation" not in tail:
                self.held_line = tail
                kept.pop()
            atomic_write_bytes(metrics, "".join(line + "\n" for line in kept).encode())

    def checkpointed_update(self) -> int:
        """The update stored in last.pt (0 if none)."""
        path = self.run_dir / "last.pt"
        return int(load_checkpoint(path)["update"]) if path.exists() else 0
