"""The validation handler of a run: evaluate the policy on the validation stream, judge it against the goal,
keep the streak and best.pt, and tell the callbacks (``trainer``: a :class:`~rl_gpu.training.runner.Trainer`)."""

from __future__ import annotations

from rl_gpu.runtime.checkpoint import atomic_write_json
from rl_gpu.runtime.distributed import is_main_process
from rl_gpu.training.events import ValidationDone
from rl_gpu.training.goals import SelfPlayLeague


def validate(trainer) -> dict:
    """Evaluate on the validation stream, update the streak, keep best.pt; returns the record to log."""
    cfg, goal, state = trainer.config, trainer.goal, trainer.state
    result = trainer.evaluate(trainer.algo.policy, cfg.eval_episodes, "validation")
    ok, why = goal.passes(result, state.baseline)
    state.streak = state.streak + 1 if ok and state.update >= cfg.min_updates else 0
    score, extra, note = measured(trainer, trainer.algo.policy, goal.score(result))
    if trainer.league is not None and is_main_process():
        atomic_write_json(trainer.run_dir / "ratings.json", {"update": state.update,
                                                             **trainer.league.ratings_table()})
    best = score > state.best_score
    if best:
        state.best_score, state.best_update = score, state.update
        trainer.save("best.pt", result)
    streak = f"  {'PASS' if ok else 'fail'} streak {state.streak}/{cfg.consecutive_passes}" if goal.can_pass else ""
    trainer.log(f"[seed {trainer.seed}] validation @ {state.update}: {goal.describe(result)}{note}  {why}{streak}")
    record = {"score": score, "passed": ok, "streak": state.streak, **extra}
    trainer.events.emit(ValidationDone(trainer.seed, trainer.run_dir, state.update, state.global_step, score, ok,
                                       state.streak, best, dict(record), trainer.algo.policy))
    return record


def validate_held_update(trainer, logger) -> None:
    """The validation a stop cut short, first thing in a resumed run; the update's line held back from
    metrics.jsonl (``Trainer.resume_from``) is written again with it, or without it when a stop cuts this one
    short too (then the next resume holds it back again)."""
    held, trainer.held_line = trainer.held_line, None
    try:
        logger.log_validation(trainer.state.update, trainer.state.global_step, trainer.validate())
    finally:
        if held is not None:
            logger.log_update_again(held)


def measured(trainer, policy, score: float) -> tuple[float, dict, str]:
    """``(score, extra record entries, log note)`` of a validation with the policy's exploitability, when the run
    measures it (self-play scores by it: the least exploitable policy is the best)."""
    if trainer.measure is None:
        return score, {}, ""
    value = trainer.measure(policy)
    if isinstance(trainer.goal, SelfPlayLeague):
        score = -value.value
    return score, {"exploitability": value.value}, f"  exploitability {value.describe()}"
