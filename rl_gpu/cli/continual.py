"""``rl-gpu continual``: one policy trained on a sequence of tasks, with forgetting measured.

Each phase is an ``rl-gpu train`` run of ``--steps-per-task`` steps on one task (``OUTPUT/phase-I/seed-S/``) that
starts from the policy the previous phase ended with; after each phase every task is evaluated. Writes
``OUTPUT/continual-seed-S.json`` (the task x phase performance matrix, average performance, forgetting, forward
transfer), ``OUTPUT/continual.json`` (each measure's mean and interval over the seeds) and ``OUTPUT/matrix.png``
(:mod:`rl_gpu.training.continual`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from rl_gpu.cli.parsing import run_command, settings_of
from rl_gpu.core.errors import UsageError

PROG = "rl-gpu continual"


@dataclasses.dataclass(frozen=True)
class ContinualConfig:
    """Train one policy on tasks in turn (a task sequence) and measure what it forgets: each task is evaluated after
    every phase, by the share of episodes that succeed (or its normalised return)."""

    tasks: tuple[str, ...] = ()
    """the tasks in the order trained, environment ids of one observation and action space (parameter variants of
    one environment, wrappers: CartPole-v1 'CartPole-v1?action_perm=1,0' 'CartPole-v1?length=1.0')"""
    steps_per_task: int = 200_000
    """environment steps of each phase"""
    method: Literal["finetune", "l2", "ewc", "rehearsal", "replay"] = "finetune"
    """finetune: nothing held; l2 / ewc: a penalty toward the parameters that ended the previous task (EWC weighs
    each by the Fisher information of the earlier tasks); rehearsal: --rehearsal-share of every batch's rows play
    the earlier tasks; replay (sac, td3): the replay buffer goes on from task to task, the earlier tasks'
    transitions sampled with the current one's (all of them while --fixed buffer_size=... holds every phase)"""
    anchor_coef: float = 1.0
    """the l2 / ewc penalty's coefficient"""
    rehearsal_share: float = 0.25
    """rehearsal: the share of rows on the earlier tasks (split equally among them)"""
    task_id: bool = True
    """the policy sees the one-hot of the task (--no-task-id: it must tell the tasks apart itself)"""
    success_return: float | None = None
    """an episode succeeds when its return reaches this; None: the first task's preset goal (CartPole: 475), or the
    task's own success (Meta-World's metaworld:TASK ids, all of one sequence)"""
    measure: Literal["success", "return"] = "success"
    """a task's performance: success, the share of episodes whose return reaches --success-return; return, the mean
    return normalised between the untrained policy's (0) and --success-return (1)"""
    eval_episodes: int = 200
    """episodes per task in each evaluation of the sequence"""
    transfer_reference: bool = False
    """also train each task alone from a fresh policy (OUTPUT/alone-J/seed-S/) and report Continual World's forward
    transfer, (AUC - AUC alone) / (1 - AUC alone) of each task's normalised validation curve (--measure return)"""
    fisher_states: int = 512
    """ewc: states of each task at which the Fisher information is estimated"""
    algo: str = "ppo"
    """the training algorithm (l2 and ewc hold PPO's, SAC's or TD3's actor)"""
    seeds: tuple[int, ...] = (1,)
    """one sequence per seed; several give each measure's interval"""
    output: Path = Path("artifacts/continual")
    """folder of the runs (phase-I/seed-S/), the records and the matrix plot"""
    overwrite: bool = False
    """replace existing phase runs and records"""
    fixed: tuple[str, ...] = ()
    """training settings of every phase, over the first task's preset, as NAME=VALUE (rl-gpu train's flags with
    underscores: --fixed num_envs=64 learning_rate=0.001)"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: CUDA when available, else CPU"""
    threads: int = 1
    """torch intra-op CPU threads"""


def _sequence(cfg: ContinualConfig):
    from rl_gpu.training.continual import Sequence

    if not 1 <= cfg.steps_per_task <= 10**12:
        raise UsageError(f"--steps-per-task must be between 1 and 10**12, got {cfg.steps_per_task}")
    if not 1 <= cfg.eval_episodes <= 10**6 or not 1 <= cfg.fisher_states <= 10**6:
        raise UsageError("--eval-episodes and --fisher-states must be between 1 and 10**6")
    if not cfg.seeds or len(set(cfg.seeds)) != len(cfg.seeds) or not all(0 <= s < 2**63 for s in cfg.seeds):
        raise UsageError(f"--seeds: distinct seeds from 0 to 2**63 - 1, got {cfg.seeds}")
    return Sequence(cfg.tasks, cfg.steps_per_task, cfg.method, cfg.anchor_coef, cfg.rehearsal_share, cfg.task_id,
                    cfg.success_return, cfg.eval_episodes, cfg.fisher_states, cfg.measure, cfg.transfer_reference)


def run(cfg: ContinualConfig) -> int:
    from rl_gpu.cli.api import build_config
    from rl_gpu.runtime.files import atomic_write_json
    from rl_gpu.training import continual
    from rl_gpu.training.runner import train

    seq = _sequence(cfg)
    if seq.method in ("l2", "ewc") and cfg.algo not in ("ppo", "sac", "td3"):
        raise UsageError(f"--method {seq.method} holds the actor of --algo ppo, sac or td3, not --algo {cfg.algo}")
    if seq.method == "replay" and cfg.algo not in ("sac", "td3"):
        raise UsageError(f"--method replay keeps the replay buffer of --algo sac or td3, not --algo {cfg.algo} "
                         "(on-policy: --method rehearsal)")
    fixed = settings_of(cfg.fixed, "--fixed")
    for name in ("total_timesteps", "seeds", "seed", "output", "env", "algo"):
        if name in fixed:
            raise UsageError(f"--fixed {name}: the sequence sets it (--steps-per-task, --seeds, --output, --tasks)")

    def build(env_id: str, output: Path, seed: int):
        return build_config(env_id, cfg.algo, cfg.steps_per_task, output=output, seed=seed, device=cfg.device,
                            threads=cfg.threads, quiet=True, overwrite=cfg.overwrite, **fixed)

    from rl_gpu.envs.registry import named_ids_only

    # The tasks were typed here: they (and the batches made of them) may import the modules they name.
    named = [*seq.tasks, *(seq.phase_id(i) for i in range(len(seq.tasks))),
             *(seq.task_only(j) for j in range(len(seq.tasks)))]
    with named_ids_only(named):
        from rl_gpu.envs.registry import make

        # Every task is checked (one batch of all of them: the same spaces) before anything is written.
        make(seq.task_only(0), num_envs=len(seq.tasks), device="cpu").close()
        records = [continual.run_sequence(seq, build, cfg.output, seed, train) for seed in cfg.seeds]
    summary = continual.across_seeds(records)
    atomic_write_json(cfg.output / "continual.json", {"tasks": list(seq.tasks), "method": seq.method,
                                                      "seeds": list(cfg.seeds), **summary})
    plotted = continual.write_plot(records, cfg.output / "matrix.png", seq.tasks)
    print(f"{seq.method} over {len(records)} seed(s): {continual.describe(summary)}")
    print(f"records: {cfg.output / 'continual.json'}" + (f", plot: {cfg.output / 'matrix.png'}" if plotted else ""))
    return 0


def main(argv=None) -> int:
    return run_command(ContinualConfig, PROG, argv, run,
                       lambda cfg: f"interrupted; finished phases are kept in {cfg.output}")
