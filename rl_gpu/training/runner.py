"""The training loop: iterate -> log -> validate -> checkpoint, one run per seed, for any algorithm.

The runner talks to the algorithm only through :class:`~rl_gpu.algos.base.Algorithm` (``iterate``, whose typed
:class:`~rl_gpu.algos.iteration.Iteration` says how each statistic is logged and combined over processes,
``set_progress``, ``policy``, ``state_dict``), to the environment through
:class:`~rl_gpu.core.types.VecEnv`, and asks a goal (:mod:`rl_gpu.training.goals`) what success means.

A run can stop at any moment and continue exactly: ``last.pt`` holds everything the next iteration depends on
(:mod:`rl_gpu.training.checkpointing`; written from update 0, and only with finite parameters), files are
replaced atomically, and a resumed run produces the same parameters and metrics, bit for bit on the CPU, as one
that never stopped. A stop signal ends an evaluation at once (it writes nothing); a finished run is not trained
again (:mod:`rl_gpu.training.lifecycle`).
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch import Tensor

from rl_gpu.algos.base import Setup
from rl_gpu.algos.iteration import Collected, Iteration, MetricLayout
from rl_gpu.algos.registry import algorithm_spec, make_algorithm
from rl_gpu.core.device import resolve_device
from rl_gpu.core.errors import UsageError
from rl_gpu.core.seeding import derive_seed
from rl_gpu.core.types import VecEnv
from rl_gpu.envs.registry import make
from rl_gpu.envs.seat_agents import seat_game
from rl_gpu.runtime.allocator import collector_spares_startup
from rl_gpu.runtime.checkpoint import atomic_write_json, load_checkpoint
from rl_gpu.runtime.compile import resolve_compile
from rl_gpu.runtime.distributed import all_agree, is_main_process, rank, world_size
from rl_gpu.runtime.hardware import run_environment
from rl_gpu.runtime.run_files import RunLocks, check_run_folder
from rl_gpu.training import ranks
from rl_gpu.training.budget import Budget
from rl_gpu.training.checkpointing import CheckpointMixin, check_trainer_payload
from rl_gpu.training.config import TrainConfig
from rl_gpu.training.evaluation import EvalResult, evaluate_policy
from rl_gpu.training.events import CallbackLike, Events, IterationDone, RunEnded, RunStarted, check_callbacks
from rl_gpu.training.final_eval import final_evaluation
from rl_gpu.training import validation
from rl_gpu.training.goals import goal_for
from rl_gpu.training.league import League, LeagueSettings, SelfPlay
from rl_gpu.training.lifecycle import FINAL_STATUSES, check_checkpoint_belongs, check_resumable, resume_args
from rl_gpu.training.lifecycle import check_config_record
from rl_gpu.training.outcome import (  # noqa: F401 (the names callers import from the runner)
    COUNTS,
    EXIT_GOAL_NOT_MET,
    EXIT_NUMERICAL,
    EXIT_SUCCESS,
    EXIT_USAGE,
    VOLATILE_METRICS,
    MetricsLine,
    PendingUpdate,
    RunResult,
    report_result,
)
from rl_gpu.training.preflight import check_agents, check_env_id, check_env_and_memory, env_fault, prepare  # noqa: F401
from rl_gpu.training.run_dir import check_run_dirs, discarded_unless_started, prepare_run_dir
from rl_gpu.training.run_logger import RunLogger
from rl_gpu.training.run_state import RunState
from rl_gpu.training.seed_summary import describe as describe_seeds, seed_summary
from rl_gpu.training.signals import Stopped, StopRequest


class Trainer(CheckpointMixin):
    """One seed's run of an algorithm on one environment id.

    Args:
        config: the resolved configuration.
        seed: this run's seed (every random stream of the run is derived from it).
        run_dir: where config, metrics, checkpoints and the summary go.
        log: where the trainer's messages go (``print`` routes them through the progress view).
        display: the progress view: ``auto`` (live on a terminal, else plain lines), ``plain`` or ``off``.
        measure: ``measure(policy)`` -> the policy's exact exploitability (an object with ``value``, ``unit``
            and ``describe()``), logged at each validation; None where the game has none.
    """

    def __init__(self, config: TrainConfig, seed: int, run_dir: Path, log: Callable[[str], None] = print,
                 display: str = "auto", measure: Callable | None = None,
                 callbacks: Iterable[CallbackLike] = ()) -> None:
        self.config = config
        self.measure = measure
        self.seed = seed
        self.run_dir = run_dir
        self.log = log
        self.display = display
        self.device = resolve_device(config.device)
        torch.manual_seed(derive_seed(seed, "torch"))
        self.env: VecEnv = self.make_env(config.num_envs, derive_seed(seed, "train-env", rank()))
        check_agents(self.env, config)
        self.goal = goal_for(self.env.spec, config.env, config.solve_threshold, config.success_z,
                             budget=config.total_timesteps is not None, self_play_by=config.self_play_flag,
                             seat_world=seat_game(self.env) is not None)
        try:
            setup = Setup(
                env=self.env, make_env=self.make_env, seed=ranks.algorithm_seed(seed),
                learning_rate=config.learning_rate,
                anneal_lr=config.schedule_kind == "linear", lr_schedule=config.lr_schedule_spec(),
                precision=config.precision,
                num_steps=config.num_steps, hidden_sizes=tuple(config.hidden_sizes),
                normalize_obs=config.normalize_obs, init_log_std=config.init_log_std, policy=config.policy,
                memory_size=config.memory_size if config.uses_memory else 0, lstm=config.memory == "lstm",
                compile=self._compile_mode(config),
                opponent=self.league_of if config.self_play else None, async_collect=config.async_collect,
                double_buffer=config.double_buffer,
            )
            self.league: League | None = None
            if config.self_play and world_size() > 1:
                raise ValueError("--self-play runs in one process (each process would rate its own games): "
                                 "start it without torchrun")
            self.algo = make_algorithm(config.algo, setup, config.algo_config())
            if self.league is not None:
                self.algo = SelfPlay(self.algo, self.league)
        except (ValueError, TypeError) as e:
            raise UsageError(str(e)) from None
        ranks.share_start(self.algo, seed)
        self.num_steps = self.algo.num_steps
        self.reward_terms = tuple(self.env.spec.reward_terms)
        self.layout: MetricLayout | None = None
        """What one update logs, in the order its values travel (set by the first iteration): the algorithm's
        metrics, then each reward term's sum per finished episode."""
        self.initial_policy = self.algo.initial_policy()
        self.state = RunState()
        """Counters and judgements (:mod:`rl_gpu.training.run_state`); checkpointed with the algorithm."""
        self.held_line: dict | None = None
        """That update's metrics.jsonl line, held back on resume until its validation is written with it."""
        self.resumed = False
        self.activity = ""
        """What the run is doing, for the message of a stop that cuts an evaluation short."""
        self.stop = StopRequest()
        self.budget = Budget(config, self.goal, config.num_envs * self.num_steps * world_size())
        self.events = Events(callbacks if is_main_process() else ())
        """The run's callbacks (:mod:`rl_gpu.training.events`; rank 0's only under torchrun)."""
        self.steps_taken: Tensor | None = None
        """``global_step`` kept on the device by :meth:`train_one_update` (with a step budget), for the schedules."""

    def _compile_mode(self, config: TrainConfig) -> str:
        """The loop's compile mode on this device. ``auto``: eager with memory or for an algorithm whose ``auto``
        is eager (compiled and captured modes, taken when asked for, unmeasured on a GPU); Inductor with
        ``--async``/``--double-buffer`` on CUDA (one CUDA graph cannot be replayed by two threads at once)."""
        if config.compile == "auto" and (config.uses_memory or not algorithm_spec(config.algo).compile_auto):
            return "off"
        mode = resolve_compile(ranks.resolve_compile(config.compile, self.device), self.device)
        threaded = config.async_collect or config.double_buffer
        return "inductor" if mode == "cudagraphs" and config.compile == "auto" and threaded else mode

    def league_of(self, policy) -> object:
        """Setup's opponent slot under ``--self-play``: a league of ``policy``'s snapshots; its members play."""
        c = self.config
        self.league = League(policy, c.num_envs, LeagueSettings(c.snapshot_every, c.pool_size, c.pfsp, c.latest_share,
                             c.baseline_share), derive_seed(self.seed, "league"), agents=self.env.spec.num_agents)
        return self.league.members

    def make_env(self, num_envs: int, seed: int, env_id: str | None = None) -> VecEnv:
        try:
            return make(env_id or self.config.env, num_envs=num_envs, device=self.device, seed=seed, validate_actions=False)
        except ImportError as e:
            raise UsageError(str(e)) from None

    def evaluate(self, policy, episodes: int, purpose: str) -> EvalResult:
        """An evaluation that a stop signal cuts short (:class:`Stopped`): it writes nothing."""
        with self.stop.abortable():
            return evaluate_policy(
                policy, lambda n, seed: self.make_env(n, seed, self.config.eval_env), ranks.split_episodes(episodes), derive_seed(self.seed, purpose, rank()),
                deterministic=self.config.deterministic_eval, gather=ranks.gather_episodes,
            )

    def run(self, stop: StopRequest | None = None, stop_after: int | None = None) -> RunResult:
        """Train until success, the limit (``max_updates``, or ``total_timesteps`` steps), a numerical fault,
        a stop signal or ``stop_after`` updates of this call (a pause: checkpoint and return); then, for a
        final status, evaluate best.pt and write summary.json."""
        cfg = self.config
        self.stop = stop if stop is not None else StopRequest()
        self.events.emit(RunStarted(self.seed, self.run_dir, self.state.copy(), self.resumed))
        if is_main_process() and (self.resumed or not (self.run_dir / "config.json").exists()):
            atomic_write_json(self.run_dir / "config.json", {
                **cfg.to_dict(), "seed": self.seed, "num_steps_resolved": self.num_steps,
                "run_environment": {**run_environment(self.device), "world_size": world_size(),
                                    "total_envs": cfg.num_envs * world_size()},
            })
        if not self.resumed:
            self.save("last.pt")  # update 0: from here on a stopped run can always be resumed
        self.activity = "the initial validation"
        try:
            fresh = self.state.baseline is None
            if fresh:
                self.state.baseline = self.evaluate(self.initial_policy, cfg.eval_episodes, "validation")
            shape = getattr(self.algo, "describe_shape", None) or f"N={cfg.num_envs} envs x T={self.num_steps} steps"
            if world_size() > 1:
                shape += f" per process, {world_size()} processes ({cfg.num_envs * world_size()} envs in all)"
            self.log(f"[seed {self.seed}] {cfg.env}: {shape} on "
                     f"{self.device}; " + (f"resumed at update {self.state.update}; " if self.resumed else "")
                     + f"initial policy: {self.goal.describe(self.state.baseline)}")
            status, reason, signum = self.train_loop(fresh, stop_after)
            summary: dict = {}
            if status in FINAL_STATUSES:
                self.activity = "the final evaluation"
                summary = self.final_evaluation(status, reason)
        except Stopped as stopped:
            status, signum, summary = "interrupted", stopped.signum, {}
            reason = (f"{signal.Signals(signum).name} received during {self.activity}: stopped; "
                      f"{self.run_dir / 'last.pt'} (update {self.checkpointed_update()}) is intact; continue with "
                      f"{resume_args(self.config, self.run_dir)}")
        result = RunResult(self.seed, self.run_dir, status, reason, summary, signum)
        self.events.emit(RunEnded(result, self.state.copy()))
        return result

    def train_loop(self, fresh_baseline: bool, stop_after: int | None) -> tuple[str, str, int | None]:
        """The updates of :meth:`run`: returns ``(status, reason, signum)``."""
        cfg, goal, stop = self.config, self.goal, self.stop
        status, reason, signum = "", "", None
        updates_this_call = 0
        original_log = self.log
        with self.run_logger() as logger, collector_spares_startup() as spare_startup_objects:
            if original_log is print:
                self.log = logger.print
            if fresh_baseline:
                score, extra, note = self.measured(self.initial_policy, goal.score(self.state.baseline))
                if note:
                    self.log(f"[seed {self.seed}] initial policy:{note}")
                logger.log_validation(0, 0, {"score": score, "passed": False, "streak": 0, **extra})
                self.save("last.pt")  # now with the baseline
            try:
                if self.state.validation_due:  # a stop came before this update's validation: it goes first
                    self.activity = f"the validation at update {self.state.update}"
                    self.validate_held_update(logger)
                    self.state.validation_due = False
                    self.save("last.pt")
                if self.state.streak >= cfg.consecutive_passes and self.state.update >= cfg.min_updates:
                    status, reason = self.budget.success_status(self.state)  # before a stop cut the final evaluation
                elif self.budget.reached(self.state):
                    status, reason = self.budget.limit_status(self.state)
                pending: list[PendingUpdate] = []
                self._read_seconds = self.state.train_seconds
                self.budget.plan_read(self.state)
                if not status and all_agree(self.events.stop_by is not None):  # asked by a RunStarted callback
                    status, reason = "paused", self.paused_reason(True)
                while not status:
                    step_start = time.perf_counter()
                    values = self.train_one_update(logger)
                    spare_startup_objects()  # after the first update's compiles (once)
                    stop.agree()  # under torchrun: a signal on any process stops every one here
                    self.state.train_seconds += time.perf_counter() - step_start
                    pending.append(PendingUpdate(self.state.update, self.state.train_seconds, logger.take_phases(),
                                                 values))
                    updates_this_call += 1
                    limit_possible = self.budget.may_be_reached(self.state)
                    validate = self.state.update % cfg.eval_every == 0
                    checkpoint = self.state.update % cfg.checkpoint_every == 0
                    pause = stop_after is not None and updates_this_call >= stop_after
                    # The metrics stay on the device until something needs them: a log line, a validation, a
                    # checkpoint (never written after a non-finite update), the limit or a stop. One host read.
                    if not (validate or checkpoint or pause or limit_possible or stop.signum is not None
                            or self.state.update == 1 or self.state.update % cfg.log_every == 0):
                        continue
                    *earlier, last = self.read_metrics(pending)
                    pending.clear()
                    for line in (*earlier, last) if self.events.callbacks else ():  # no copies for nobody
                        self.events.emit(IterationDone(self.seed, self.run_dir, line.update, line.global_step,
                                                       dict(line.record)))
                    by_callback = all_agree(self.events.stop_by is not None)
                    pause = pause or by_callback
                    for line in earlier:
                        logger.log_update(line.update, line.global_step, line.record, phases=line.phases)
                    at_limit = self.budget.reached(self.state)
                    if not at_limit:
                        self.budget.plan_read(self.state)
                    validate = validate or at_limit
                    bad = next((line.update for line in (*earlier, last) if not line.finite), None)
                    # Parameters can turn non-finite before any loss does (a huge step): checked, once for all
                    # tensors, whenever the state is about to be validated or saved.
                    saving = validate or checkpoint or at_limit or pause or stop.signum is not None
                    bad_state = all_agree(bad is None and saving and not self.state_is_finite())
                    if bad is None and not bad_state and validate:
                        self.activity = f"the validation at update {self.state.update}"
                        try:
                            logger.log_validation(self.state.update, self.state.global_step, self.validate())
                        except Stopped as stopped:
                            self.state.validation_due = True
                            logger.log_update(last.update, last.global_step, last.record, phases=last.phases)
                            self.save("last.pt")
                            signum = stopped.signum
                            status, reason = "interrupted", (
                                f"{signal.Signals(signum).name} received during the validation at update "
                                f"{self.state.update}: stopped, saved {self.run_dir / 'last.pt'}; continue with "
                                f"{resume_args(cfg, self.run_dir)} (the validation runs first)")
                            break
                        if self.state.streak >= cfg.consecutive_passes:
                            status, reason = self.budget.success_status(self.state)
                        by_callback = all_agree(self.events.stop_by is not None)  # a ValidationDone's answer
                        pause = pause or by_callback
                    logger.log_update(last.update, last.global_step, last.record, phases=last.phases)
                    if bad is not None or bad_state:
                        what = (f"non-finite loss or gradient at update {bad}" if bad is not None else
                                f"non-finite parameters or optimiser state after update {self.state.update}")
                        fault = env_fault(self.env)
                        if fault is not None:
                            what += f", after {cfg.env} returned a non-finite {fault}"
                        return "numerical_error", (f"{what}; training stopped. {self.run_dir / 'last.pt'} holds "
                                                   f"the last finite state (update {self.checkpointed_update()})"
                                                   ), None
                    if not status and at_limit:
                        status, reason = self.budget.limit_status(self.state)
                    if status or checkpoint:
                        self.save("last.pt")
                    if status:
                        break
                    if stop.signum is not None:
                        self.save("last.pt")
                        signum = stop.signum
                        status, reason = "interrupted", (
                            f"{signal.Signals(signum).name} received: stopped after update {self.state.update}, saved "
                            f"{self.run_dir / 'last.pt'}; continue with {resume_args(cfg, self.run_dir)}")
                        break
                    if pause:
                        self.save("last.pt")
                        status, reason = "paused", self.paused_reason(by_callback)
                        break
            finally:
                self.log = original_log
        return status, reason, signum

    def paused_reason(self, by_callback: bool) -> str:
        why = f" at the request of callback {self.events.stop_by}" if by_callback and self.events.stop_by else ""
        return f"paused after update {self.state.update}{why}; continue with {resume_args(self.config, self.run_dir)}"

    def run_logger(self) -> RunLogger:
        """The run's metrics.jsonl + TensorBoard + progress view; trainer messages print through it."""
        cfg = self.config
        if not is_main_process():
            return ranks.QuietLogger()  # type: ignore[return-value]
        return RunLogger(
            self.run_dir, label=f"seed {self.seed}",
            total_updates=None if cfg.total_timesteps else cfg.max_updates, total_steps=cfg.total_timesteps,
            headline=(self.goal.headline,), log_every=cfg.log_every, display=self.display, quiet=cfg.quiet,
            device=self.device, start_update=self.state.update - (self.held_line is not None),
            start_step=self.state.global_step,
            start_time=self.state.train_seconds,
        )

    def train_one_update(self, logger: RunLogger) -> Tensor:
        """One iteration of the algorithm, without reading anything back: returns its metrics stacked on the
        device (``[len(self.layout.names)]``), for :meth:`read_metrics`."""
        budget = self.config.total_timesteps
        # Progress over a budget is the steps actually taken (a turn-based game pads finished games, so an
        # update can take fewer than step_bound), counted on the device: no read-back, and the same in a
        # resumed run, which starts the count from its checkpoint's exact global_step.
        if budget and self.steps_taken is None:
            self.steps_taken = torch.tensor(float(self.state.global_step), dtype=torch.float64, device=self.device)
        self.algo.set_progress((self.steps_taken / budget).clamp(max=1.0) if budget
                               else self.state.update / self.config.max_updates)
        result = Iteration.of(self.algo.iterate(phase=logger.phase))
        if self.reward_terms:
            result = result.adding(per_episode={f"reward/{k}": v for k, v in self.env.reward_term_stats().items()})
        if callable(getattr(self.env, "task_stats", None)):  # the task's own state (a terrain curriculum's levels)
            result = result.adding(learner={f"task/{k}": v for k, v in self.env.task_stats().items()})
        if self.layout is None:
            self.layout = result.layout()
        values = ranks.reduce_metrics(result.stacked(self.layout), self.layout)
        if budget:
            self.steps_taken += values[self.layout.names.index("transitions")]
        self.state.update += 1
        return values

    def read_metrics(self, pending: list[PendingUpdate]) -> list[MetricsLine]:
        """The lines of the pending updates, read from the device in one transfer; ``global_step`` advances.

        ``time`` is the training time at the end of each update (waiting for the device, on CUDA, counts
        towards the last one) and ``steps_per_second`` the mean over the updates read together.
        """
        start = time.perf_counter()
        rows = torch.stack([p.values for p in pending]).cpu().tolist()
        self.state.train_seconds += time.perf_counter() - start
        seconds, self._read_seconds = self.state.train_seconds - self._read_seconds, self.state.train_seconds
        layout = self.layout
        at = layout.names.index("transitions")
        rate = sum(row[at] for row in rows) / max(seconds, 1e-9)
        terms_named = [f"reward/{t}" for t in self.reward_terms]
        # The algorithm's own means over finished episodes: they mean nothing in an update where none ended.
        own_means = [n for n, mean in zip(layout.names, layout.per_episode)
                     if mean and n not in Collected._fields and n not in terms_named]
        lines = []
        for i, (p, row) in enumerate(zip(pending, rows)):
            values = dict(zip(layout.names, row))
            collected = Collected(*(values.pop(k) for k in Collected._fields))
            episodes, transitions = collected.episodes, collected.transitions
            # A term's mean is NaN in an update where no episode finished: left out, not a numerical fault.
            terms = {name: value for name in terms_named if math.isfinite(value := values.pop(name))}
            if episodes == 0:
                for name in own_means:
                    del values[name]
            self.state.global_step += int(transitions)
            record = {"episodes": int(episodes), "transitions": int(transitions), **values,
                      "time": self.state.train_seconds if i == len(pending) - 1 else p.train_seconds,
                      "steps_per_second": rate}
            if episodes > 0:
                record[self.goal.headline] = getattr(collected, self.goal.source)
            record.update(terms)
            finite = all(math.isfinite(v) for v in values.values())
            lines.append(MetricsLine(p.update, self.state.global_step, record, p.phases, finite))
        return lines

    def validate(self) -> dict:
        """Evaluate on the validation stream, update the streak, keep best.pt; returns the record to log."""
        return validation.validate(self)

    def validate_held_update(self, logger: RunLogger) -> None:
        validation.validate_held_update(self, logger)

    def measured(self, policy, score: float) -> tuple[float, dict, str]:
        return validation.measured(self, policy, score)

    def final_evaluation(self, status: str, reason: str) -> dict:
        """Re-evaluate best.pt, the initial policy and a uniform-random player on fresh seeds; write
        summary.json (:func:`rl_gpu.training.final_eval.final_evaluation`)."""
        return final_evaluation(self, status, reason)


def train(config: TrainConfig, log: Callable[[str], None] = print, stop_after: int | None = None,
          display: str = "auto", measure: Callable | None = None, callbacks: Iterable[CallbackLike] = (),
          prepare_trainer: Callable[[Trainer], None] | None = None) -> list[RunResult]:
    """Run every seed of ``config``; each writes ``OUTPUT/seed-N/``, and a run of several seeds that all finish
    writes ``OUTPUT/summary.json`` (:mod:`rl_gpu.training.seed_summary`). Input errors raise :class:`UsageError`
    before anything is written. A stop signal or ``stop_after`` ends the call after the current seed's checkpoint
    (a stop between two seeds: an ``interrupted`` result for the next seed, with no directory). ``callbacks``
    answer each seed's events (:mod:`rl_gpu.training.events`; one that asks to stop pauses the run like
    ``stop_after``); ``prepare_trainer(trainer)`` is called before each seed runs (a task sequence's phase)."""
    log = ranks.rank_log(log)
    callbacks = check_callbacks(callbacks)
    with ranks.agreed_errors(config):  # under torchrun: every process checks before rank 0 writes anything
        device = prepare(config)
        run_dirs = [config.output / f"seed-{seed}" for seed in config.seeds]
        check_run_dirs(run_dirs, config.overwrite)
        summary_path = config.output / "summary.json"
        several = len(config.seeds) > 1
        if several and not config.overwrite and os.path.lexists(summary_path):
            raise UsageError(f"{summary_path} already exists (the summary of earlier seeds); pass --overwrite to "
                             "replace it, or choose another --output")
        check_env_and_memory(config, device)
        # One process per run folder, for the whole run: a second train, --resume or --overwrite refuses.
        locks = RunLocks(run_dirs if is_main_process() else [], log)
    results: list[RunResult] = []
    multi_player = False
    with ranks.stop_request() as stop, locks:
        for seed, run_dir in zip(config.seeds, run_dirs):
            if stop.signum is not None:
                results.append(RunResult(seed, run_dir, "interrupted", f"{signal.Signals(stop.signum).name} "
                                         f"received before seed {seed} started", {}, stop.signum))
                break
            trainer = Trainer(config, seed, run_dir, log, display, measure, callbacks)
            if prepare_trainer is not None:
                prepare_trainer(trainer)
            multi_player = trainer.goal.multi_player
            if is_main_process():
                prepare_run_dir(run_dir, config.overwrite)
            with discarded_unless_started(run_dir, lambda: trainer.state.update > 0 or not is_main_process()):
                results.append(report_result(trainer.run(stop, stop_after), log))
            if not results[-1].finished:
                break
    if several and len(results) == len(config.seeds) and all(r.finished for r in results):
        across = seed_summary([r.summary for r in results], multi_player)
        atomic_write_json(summary_path, {"env": config.env, "output": str(config.output), **across})
        log(describe_seeds(across) + f"\nsummary of all seeds: {summary_path}")
    return results


def resume(run_dir: Path, config: TrainConfig, log: Callable[[str], None] = print,
           stop_after: int | None = None, display: str = "auto", measure: Callable | None = None,
           callbacks: Iterable[CallbackLike] = ()) -> RunResult:
    """Continue the run in ``run_dir`` from its ``last.pt`` with ``config`` (the saved one, possibly with a
    larger ``max_updates`` or ``total_timesteps``). A last.pt that belongs to another run, or a finished run
    whose limit was not raised, is refused before anything is written."""
    log = ranks.rank_log(log)
    callbacks = check_callbacks(callbacks)
    with ranks.agreed_errors(config):  # under torchrun: every process reads the run directory (a shared one)
        device = prepare(config)
        run_dir = Path(run_dir)
        payload = load_checkpoint(run_dir / "last.pt", device)
        seed = check_trainer_payload(run_dir / "last.pt", payload, config.env)
        check_checkpoint_belongs(run_dir, payload)
        check_run_folder(run_dir)
        check_config_record(run_dir, payload)
        check_resumable(run_dir, payload, config)
        check_env_and_memory(config, device)
        locks = RunLocks([run_dir] if is_main_process() else [], log)
    with locks:
        trainer = Trainer(config, seed, run_dir, log, display, measure, callbacks)
        trainer.resume_from(run_dir / "last.pt", payload)
        with ranks.stop_request() as stop:
            return report_result(trainer.run(stop, stop_after), log)
