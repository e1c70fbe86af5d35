"""Task sequences: one policy trained on tasks in turn, every task evaluated after each phase, forgetting measured.

Phase ``i`` trains the policy that ended phase ``i - 1`` on task ``i`` for ``steps_per_task`` steps: an ordinary run
(``OUTPUT/phase-I/seed-S/``, its own checkpoints, metrics and summary) of the batch ``multitask:T0@0|...|Ti@1|...``:
every task keeps its slot in the observation's task one-hot (``task_id``), only task ``i`` has rows (the method
``rehearsal`` keeps a share of the rows on the earlier tasks). After each phase the policy that ended it (not the
phase's best.pt: a sequence goes on from where training stopped) plays every task, deterministically, on fresh
seeds; its **performance** on a task is the share of episodes that succeed (``measure="success"``: the return
reaches the task's success return, or, for a task with a success of its own such as Meta-World's, that success),
or its normalised return ``clip((R - R0) / (G - R0), 0, 1)`` with ``R0`` the untrained policy's mean return on the
task and ``G`` the success return (``measure="return"``: smoother where success is a threshold a nearly solved task
flickers across). Meta-World tasks (``metaworld:reach-v3``) make ``metaworld:`` batches of the same form.

With ``p[i][j]`` the performance on task ``j`` after phase ``i`` (``p[-1]``: before any training), the measures of
Continual World (Wolczyk et al. 2021) and GEM (Lopez-Paz and Ranzato 2017):

- average performance ``A = mean_j p[K-1][j]`` (every task, at the end);
- forgetting ``F_j = p[j][j] - p[K-1][j]`` for ``j < K - 1``, and ``F`` their mean;
- forward transfer ``FT_j = p[j-1][j] - p[-1][j]`` for ``j > 0`` (what the earlier tasks did for task ``j`` before it
  was trained on);
- with ``transfer_reference`` (``measure="return"``), Continual World's own forward transfer: each task also trains
  alone from a fresh policy for the same steps (``OUTPUT/alone-J/seed-S/``), and with ``AUC_j`` the area under task
  ``j``'s validation curve in its phase (normalised as the measure, over the phase's steps, divided by them) and
  ``AUC_j^b`` the same alone, ``FT_j = (AUC_j - AUC_j^b) / (1 - AUC_j^b)``, averaged over every task.

Methods (:data:`rl_gpu.algos.anchor.METHODS`): ``finetune`` (nothing held), ``l2`` and ``ewc`` (a penalty toward
the parameters that ended the previous phase, :mod:`rl_gpu.algos.anchor`; EWC's Fisher summed over the earlier
tasks, estimated at ``fisher_states`` states of each; both also hold SAC's and TD3's actor, in its steps),
``rehearsal`` (a share of every batch's rows plays the earlier tasks: on-policy replay), ``replay`` (SAC, TD3: the
replay buffer goes on from one task to the next, so the earlier tasks' transitions, with their task one-hot, are
sampled with the current task's; all of them while the buffer holds every phase's steps, else the newest: Continual
World's perfect memory, and a first-in-first-out one below it).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from rl_gpu.algos.anchor import METHODS, fisher_diagonal, make_anchor, trainable
from rl_gpu.core.errors import UsageError
from rl_gpu.core.seeding import derive_seed
from rl_gpu.envs.multitask import BLIND_PREFIX, PREFIX

METAWORLD = "metaworld:"
from rl_gpu.envs.registry import make
from rl_gpu.runtime.files import atomic_write_bytes, atomic_write_json
from rl_gpu.training.config import TrainConfig
from rl_gpu.training.evaluation import evaluate_policy, normal_half_width


@dataclass(frozen=True)
class Sequence:
    """What a task sequence runs (the training settings of each phase are a :class:`TrainConfig`)."""

    tasks: tuple[str, ...]
    steps_per_task: int
    method: str = "finetune"
    anchor_coef: float = 1.0
    rehearsal_share: float = 0.25
    task_id: bool = True
    success_return: float | None = None
    eval_episodes: int = 200
    fisher_states: int = 512
    measure: str = "success"
    transfer_reference: bool = False

    def __post_init__(self) -> None:
        if not 2 <= len(self.tasks) <= 64:
            raise UsageError(f"--tasks: give 2 to 64 tasks in order, got {len(self.tasks)}")
        if any("|" in t or "@" in t or not t.strip() for t in self.tasks):
            raise UsageError("--tasks: each task is one environment id (no '|' or '@'; they join tasks in a batch)")
        if self.method not in METHODS:
            raise UsageError(f"--method must be one of {', '.join(METHODS)}, got {self.method!r}")
        for flag, value, low, high in (("--anchor-coef", self.anchor_coef, 0.0, 1e9),
                                       ("--rehearsal-share", self.rehearsal_share, 0.0, 0.9)):
            if not (math.isfinite(value) and low <= value <= high):
                raise UsageError(f"{flag} must be between {low:g} and {high:g}, got {value!r}")
        if self.measure not in ("success", "return"):
            raise UsageError(f"--measure must be success or return, got {self.measure!r}")
        if self.success_return is not None and not math.isfinite(self.success_return):
            raise UsageError(f"--success-return must be a finite return, got {self.success_return!r}")
        if self.transfer_reference and (self.measure != "return" or self.method == "rehearsal"):
            raise UsageError("--transfer-reference reads each phase's validation curve as a normalised return: it "
                             "needs --measure return and a method whose phases validate on their own task (not "
                             "rehearsal)")

    def batch_id(self, weights: list[float]) -> str:
        """The batch of every task with these row weights: ``multitask:`` (tensor environments) or, for Meta-World
        tasks (``metaworld:reach-v3``), ``metaworld:`` (host-stepped, always with the task one-hot)."""
        if all(t.startswith(METAWORLD) for t in self.tasks):
            return METAWORLD + "|".join(f"{t[len(METAWORLD):]}@{w:g}" for t, w in zip(self.tasks, weights))
        prefix = PREFIX if self.task_id else BLIND_PREFIX
        return prefix + "|".join(f"{t}@{w:g}" for t, w in zip(self.tasks, weights))

    def phase_id(self, i: int) -> str:
        """The batch phase ``i`` trains on."""
        weights = [0.0] * len(self.tasks)
        if self.method == "rehearsal" and i > 0:
            weights[:i] = [self.rehearsal_share / i] * i
            weights[i] = 1.0 - self.rehearsal_share
        else:
            weights[i] = 1.0
        return self.batch_id(weights)

    def task_only(self, j: int) -> str:
        """Task ``j`` alone (the same observation as in training)."""
        return self.batch_id([1.0 if k == j else 0.0 for k in range(len(self.tasks))])


def networks(algo) -> dict:
    """What goes on from one task to the next: every network of the algorithm (an off-policy one's critics and
    targets too), not its optimiser's moments or its replay buffer (each phase starts those afresh)."""
    carried = getattr(algo, "networks", None)
    return carried() if callable(carried) else {"policy": algo.policy}


def measures(p: list[list[float]], initial: list[float]) -> dict:
    """Average performance, forgetting and forward transfer of the matrix ``p[i][j]`` (module docstring)."""
    k = len(p)
    forgetting = [p[j][j] - p[k - 1][j] for j in range(k - 1)]
    transfer = [p[j - 1][j] - initial[j] for j in range(1, k)]
    return {"average_performance": statistics.fmean(p[k - 1]), "forgetting": statistics.fmean(forgetting),
            "forgetting_per_task": forgetting, "forward_transfer": statistics.fmean(transfer),
            "forward_transfer_per_task": transfer, "final_task_performance": p[k - 1][k - 1]}


def validation_curve(run_dir: Path) -> list[tuple[int, float]]:
    """``(global step, validation score)`` of every validation in a run's ``metrics.jsonl``, in order."""
    points = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            record = json.loads(line)
            points.append((int(record["global_step"]), float(record["validation"]["score"])))
        except (ValueError, KeyError, TypeError):
            continue  # a training line without a validation
    return points


def curve_area(points: list[tuple[int, float]], span: int, normalise: Callable[[float], float]) -> float:
    """The mean of ``normalise(score)`` over steps 0..``span``: trapezoids between validations, the first value
    held back to step 0 and the last one on to ``span``."""
    if not points or span <= 0:
        return 0.0
    steps = [0, *(min(s, span) for s, _ in points), span]
    values = [normalise(points[0][1]), *(normalise(v) for _, v in points), normalise(points[-1][1])]
    area = sum((steps[i + 1] - steps[i]) * (values[i] + values[i + 1]) / 2 for i in range(len(steps) - 1))
    return area / span


def auc_transfer(auc: list[float], reference: list[float]) -> list[float]:
    """Continual World's forward transfer of each task, ``(AUC - AUC_b) / (1 - AUC_b)`` (0 where ``AUC_b`` = 1)."""
    return [(a - b) / (1.0 - b) if b < 1.0 - 1e-9 else 0.0 for a, b in zip(auc, reference)]


def own_success(env_id: str) -> bool:
    """Whether the task reports a success of its own (a ``success`` reward term: Meta-World, the Panda arm)."""
    env = make(env_id, num_envs=1)
    try:
        return "success" in env.spec.reward_terms
    finally:
        env.close()


def performance(policy, env_id: str, device: torch.device, episodes: int, seed: int,
                threshold: float | None) -> dict:
    """The policy's share of ``episodes`` fresh episodes of ``env_id`` (one task) that succeed (the return reaches
    ``threshold``; None: the task's own success), and its mean return."""
    result = evaluate_policy(policy, lambda n, s: make(env_id, num_envs=n, device=device, seed=s), episodes, seed,
                             deterministic=True, success_return=threshold)
    return {"success": result.successes / result.episodes, "mean_return": result.mean_return}


def _states(policy, env_id: str, device: torch.device, count: int, seed: int):
    """``count`` states the policy visits on ``env_id`` (its own actions, sampled), with their action masks."""
    rows = min(count, 64)
    env = make(env_id, num_envs=rows, device=device, seed=seed)
    generator = torch.Generator(device=device).manual_seed(seed)
    step = env.reset(seed=seed)
    obs, masks = [], []
    with torch.no_grad():
        while sum(o.shape[0] for o in obs) < count:
            obs.append(step.obs)
            masks.append(step.action_mask)
            step = env.step(policy.act(step.obs, step.action_mask, generator).action)
    return torch.cat(obs)[:count], torch.cat(masks)[:count]


def run_sequence(seq: Sequence, build: Callable[[str, Path, int], TrainConfig], output: Path, seed: int,
                 train: Callable, log: Callable[[str], None] = print) -> dict:
    """Train ``seq``'s phases for one seed; ``build(env_id, run_output, seed)`` is a phase's configuration and
    ``train(config, prepare_trainer=...)`` runs it (:func:`rl_gpu.training.runner.train`) in
    ``OUTPUT/phase-I/seed-S/``. Writes ``OUTPUT/continual-seed-S.json`` and returns its record."""
    k = len(seq.tasks)
    state: dict = {"policy": None, "fisher": None, "replay": None}
    matrix: list[list[float]] = []
    returns: list[list[float]] = []
    initial: list[float] = []
    phases = []
    for i in range(k):
        config = build(seq.phase_id(i), output / f"phase-{i}", seed)
        threshold = seq.success_return if seq.success_return is not None else config.solve_threshold
        if threshold is None and (seq.measure == "return" or not own_success(seq.task_only(0))):
            raise UsageError(f"{seq.tasks[0]!r} has no success return in its preset: give --success-return")
        # Every phase takes its whole budget: a goal met early does not end it.
        config = dataclasses.replace(config, solve_threshold=None, max_updates=10**9)
        trainers = []

        def prepare(trainer, i=i) -> None:
            policy = trainer.algo.policy
            if state["policy"] is not None:
                for name, module in networks(trainer.algo).items():
                    module.load_state_dict(state["policy"][name])
                trainer.initial_policy = trainer.algo.initial_policy()
            if seq.method == "replay" and state["replay"] is not None:
                trainer.algo.buffer.load_state_dict(state["replay"])
            if seq.method in ("l2", "ewc") and state["fisher"] is not None:
                # PPO's update units hold the penalty; an off-policy algorithm (SAC, TD3) holds it itself.
                holder = getattr(trainer.algo, "units", trainer.algo)
                holder.anchor = make_anchor(seq.method, policy, seq.anchor_coef, state["fisher"])
            trainers.append(trainer)

        results = train(config, prepare_trainer=prepare)
        if not results or not results[-1].finished:
            raise UsageError(f"phase {i} ({seq.tasks[i]}) did not finish: {results[-1].reason if results else ''}")
        trainer = trainers[-1]
        policy = trainer.algo.policy
        if i == 0:
            first = [performance(trainer.initial_policy, seq.task_only(j), trainer.device, seq.eval_episodes,
                                 derive_seed(seed, f"continual-initial-{j}"), threshold) for j in range(k)]
            zero = [r["mean_return"] for r in first]

            def score(r: dict, j: int) -> float:
                if seq.measure == "success":
                    return r["success"]
                span = threshold - zero[j]
                return min(max((r["mean_return"] - zero[j]) / span, 0.0), 1.0) if span > 0 else float(
                    r["mean_return"] >= threshold)

            initial = [score(r, j) for j, r in enumerate(first)]
        row = [performance(policy, seq.task_only(j), trainer.device, seq.eval_episodes,
                           derive_seed(seed, f"continual-{i}-{j}"), threshold) for j in range(k)]
        matrix.append([score(r, j) for j, r in enumerate(row)])
        returns.append([r["mean_return"] for r in row])
        log(f"[seed {seed}] after phase {i} ({seq.tasks[i]}): {seq.measure} "
            + " ".join(f"{v:.2f}" for v in matrix[-1]) + "  mean return " + " ".join(f"{v:.1f}" for v in returns[-1]))
        state["policy"] = {name: {k: t.detach().clone() for k, t in module.state_dict().items()}
                           for name, module in networks(trainer.algo).items()}
        if seq.method == "replay" and i < k - 1:
            state["replay"] = {key: value.clone() if isinstance(value, torch.Tensor) else value
                               for key, value in trainer.algo.buffer.state_dict().items()}
        if seq.method == "ewc" and i < k - 1:
            obs, masks = _states(policy, seq.task_only(i), trainer.device, seq.fisher_states,
                                 derive_seed(seed, f"fisher-{i}"))
            fisher = fisher_diagonal(policy, obs, masks, torch.Generator(device=trainer.device).manual_seed(seed))
            state["fisher"] = fisher if state["fisher"] is None else [a + b for a, b in zip(state["fisher"], fisher)]
        elif seq.method == "l2" and i < k - 1 and state["fisher"] is None:
            if hasattr(policy, "evaluate"):  # an actor-critic: L2 holds the actor, the Fisher's support
                obs, masks = _states(policy, seq.task_only(i), trainer.device, 8, derive_seed(seed, f"fisher-{i}"))
                state["fisher"] = fisher_diagonal(policy, obs, masks, torch.Generator(device=trainer.device))
            else:  # an off-policy algorithm's policy is its actor alone
                state["fisher"] = [torch.ones_like(p) for p in trainable(policy)]
        phases.append({"phase": i, "task": seq.tasks[i], "env": config.env, "run_dir": str(trainer.run_dir),
                       "train_seconds": trainer.state.train_seconds})
    extra = {}
    if seq.transfer_reference:
        def area(run_dir: Path, j: int) -> float:
            return curve_area(validation_curve(run_dir), seq.steps_per_task, lambda v: score({"mean_return": v}, j))

        alone = []
        for j in range(k):
            config = dataclasses.replace(build(seq.task_only(j), output / f"alone-{j}", seed), solve_threshold=None,
                                         max_updates=10**9)
            runs: list = []
            results = train(config, prepare_trainer=runs.append)
            if not results or not results[-1].finished:
                raise UsageError(f"task {j} ({seq.tasks[j]}) alone did not finish: "
                                 f"{results[-1].reason if results else ''}")
            alone.append(area(runs[-1].run_dir, j))
        auc = [area(Path(p["run_dir"]), j) for j, p in enumerate(phases)]
        transfer = auc_transfer(auc, alone)
        extra = {"auc": auc, "auc_alone": alone, "forward_transfer_auc_per_task": transfer,
                 "forward_transfer_auc": statistics.fmean(transfer)}
        log(f"[seed {seed}] forward transfer (Continual World's, by AUC): "
            + " ".join(f"{v:.2f}" for v in transfer))
    record = {"seed": seed, **asdict(seq), "success_return": threshold, "initial": initial, "performance": matrix,
              "mean_return": returns, "phases": phases, **measures(matrix, initial), **extra}
    atomic_write_json(output / f"continual-seed-{seed}.json", record)
    return record


def across_seeds(records: list[dict]) -> dict:
    """Each measure's mean and 95% interval half-width over seeds (t-free normal approximation, n >= 2)."""
    out = {}
    for name in ("average_performance", "forgetting", "forward_transfer", "forward_transfer_auc",
                 "final_task_performance"):
        if not all(name in r for r in records):
            continue
        values = [r[name] for r in records]
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        out[name] = {"mean": statistics.fmean(values), "ci95": normal_half_width(sd, len(values)), "values": values}
    return out


def describe(summary: dict) -> str:
    return "  ".join(f"{name.replace('_', ' ')} {v['mean']:.3f} ± {v['ci95']:.3f}" for name, v in summary.items())


def write_plot(records: list[dict], path: Path, tasks: tuple[str, ...]) -> bool:
    """The task x phase performance matrix (mean over seeds) as a PNG; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    k = len(tasks)
    mean = [[statistics.fmean(r["performance"][i][j] for r in records) for j in range(k)] for i in range(k)]
    fig, ax = plt.subplots(figsize=(1.6 + 1.1 * k, 1.2 + 0.9 * k))
    ax.imshow(mean, vmin=0, vmax=1, cmap="viridis")
    for i in range(k):
        for j in range(k):
            ax.text(j, i, f"{mean[i][j]:.2f}", ha="center", va="center", color="w" if mean[i][j] < 0.6 else "k")
    ax.set_xticks(range(k), [f"task {j}" for j in range(k)])
    ax.set_yticks(range(k), [f"after {i}" for i in range(k)])
    ax.set_title(f"{records[0]['measure']}, mean of {len(records)} seed(s)")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())  # never through a link or over a non-file
    return True
