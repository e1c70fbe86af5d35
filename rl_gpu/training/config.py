"""Typed training configuration: field docstrings become ``--help``. Per-environment defaults are in
:mod:`rl_gpu.cli.presets`.

Every way a configuration arrives (flags, ``--config FILE``, a run's saved configuration, Python code) goes
through :class:`TrainConfig`'s own checks: types by :mod:`rl_gpu.core.schema` (ints are not bools, every float is
finite, unknown keys are refused), then the ranges below. Limits that depend on the machine (threads, memory)
are checked by :func:`check_machine_limits` and :mod:`rl_gpu.training.resources` when a run starts, so a
configuration saved on a larger machine can still be read, and resumed with smaller settings, elsewhere.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rl_gpu.algos.registry import algorithm_names, algorithm_spec
from rl_gpu.core.device import check_threads
from rl_gpu.core.errors import UsageError
from rl_gpu.core.schema import check_bounds, check_fields, flag_name, from_dict
from rl_gpu.nn.kinds import policy_kind_names

DEFAULT_ENV = "RussianRoulette-v0"

MAX_UPDATES = 10**9
"""Upper bound of the update counts (--max-updates, --min-updates, --eval-every, ...)."""
MAX_NUM_STEPS = 10**6
"""Upper bound of --num-steps."""
MAX_EPISODES = 10**8
"""Upper bound of --eval-episodes and --final-eval-episodes."""
MAX_TIMESTEPS = 10**15
"""Upper bound of --total-timesteps."""
MAX_SEED = 2**63 - 1
"""Seeds are stored as signed 64-bit integers by the tools that read the run files."""

SAVED_EXTRA_KEYS = frozenset({"seed", "num_steps_resolved", "run_environment"})
"""Keys a run's config.json records besides the settings; reading it back accepts exactly these."""


@dataclass(frozen=True)
class TrainConfig:
    """Train a policy: one run per seed, validated, with the best checkpoint kept and re-evaluated."""

    env: str = DEFAULT_ENV
    """environment id; an unknown id is refused with the list of known ones"""
    eval_env: str | None = None
    """the environment validations and the final evaluation play, with --env's observation and actions (a text
    task's held-out problems: Addition-v0?split=valid); None: --env"""
    algo: str = "ppo"
    """algorithm (rl_gpu.algos.registry); its hyper-parameters are the flags of its own section (PPO: --gamma,
    --clip-coef, ...; SAC and TD3: --gamma, --tau, --buffer-size, ...; NeuRD: --logit-threshold, --average,
    ...), which `--algo ALGO --help` lists; presets are per environment and algorithm. neurd: self-play of a
    two-player zero-sum game small enough to enumerate (LeducHoldem-v0), every chance outcome and action sequence
    evaluated exactly at each iteration instead of sampled games; it trains for --max-updates iterations and
    keeps the least exploitable validation"""
    output: Path = Path("artifacts/run")
    """output directory; each seed writes OUTPUT/seed-N/"""
    seeds: tuple[int, ...] = (11,)
    """one independent run per seed"""
    parallel: bool = False
    """PPO, MAPPO, IPPO: train every seed at once in one process, each layer of the seeds' networks run as one
    batched call over K x --num-envs rows; each seed keeps its own rows, random streams, optimiser, validations,
    early stop and OUTPUT/seed-N/ files, equal to its lone run up to rounding (MAPPO and IPPO: in distribution,
    the worlds being drawn from the shared batch; a seed's last.pt resumes alone)"""
    pbt: bool = False
    """with --parallel and at least 4 seeds: population-based training; the seeds start from learning rates,
    ent_coef and clip_coef spread log-uniformly over [x/2, 2x] around the configured x, and every --pbt-interval
    updates the bottom quarter by recent return copies the weights and optimiser state of a top-quarter seed and
    takes its values, each times 0.8 or 1.2 (lineage in OUTPUT/pbt.json)"""
    pbt_interval: int = 10
    """--pbt: updates between two exploit-and-explore rounds"""
    num_envs: int = 4096
    """N, environments stepped together; under torchrun, per process (K processes step K x N, and each update
    learns from all of them)"""
    num_steps: int | None = None
    """T, steps per rollout (SAC, TD3: vector steps per iteration, each followed by its updates), at most
    1,000,000; None: the longest game for turn-based games, else 128 (SAC, TD3: 1)"""
    learning_rate: float = 1e-3
    """Adam learning rate"""
    anneal_lr: bool = False
    """decay the learning rate linearly to 0 over --max-updates (over --total-timesteps when given): the same as
    --lr-schedule linear"""
    precision: Literal["fp32", "bf16", "fp16", "auto"] = "fp32"
    """the update's networks under autocast (PPO, MAPPO, IPPO): bf16, or fp16 with a loss scaler kept on the device;
    weights, optimiser, normalisers, advantages and losses stay fp32; auto: bf16 for a policy with convolutions on a
    CUDA device that has it, else fp32"""
    async_collect: bool = False
    """learn while collecting (PPO, APPO, IMPALA; --async for short): a second thread collects the next rollout
    with a copy of the policy while the learner updates on the last one, so stepping and learning overlap; the
    data is one update old (lags logged in optimizer steps, bounded by --max-policy-lag; APPO and IMPALA correct
    for it with V-trace)"""
    double_buffer: bool = False
    """collect in two halves of the rows (PPO, APPO, IMPALA on a single-player tensor env stepped on the CPU, e.g.
    MuJoCo): a worker thread steps one half while the policy acts on the other; the same rollouts as without it"""
    lr_schedule: Literal["constant", "linear", "cosine", "step", "adaptive-kl"] = "constant"
    """how the learning rate moves over --max-updates (over --total-timesteps when given): linear or cosine to 0;
    step: times --lr-step-gamma every --lr-step-every of training; adaptive-kl (PPO, MAPPO, IPPO): rsl_rl's rule,
    divided by 1.5 when a minibatch's KL exceeds twice --desired-kl and times 1.5 below half of it (within
    [1e-5, 1e-2]); constant: as --anneal-lr says"""
    lr_step_every: float = 0.25
    """--lr-schedule step: the fraction of training between two drops"""
    lr_step_gamma: float = 0.5
    """--lr-schedule step: the factor of each drop"""
    desired_kl: float = 0.01
    """--lr-schedule adaptive-kl: the KL per minibatch the learning rate is steered toward"""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """hidden layer widths of the actor and of the critic (of each critic, for SAC and TD3)"""
    policy: str = "auto"
    """policy kind (rl_gpu.nn.kinds): auto = the algorithm's own for the environment's actions; or a registered
    kind, such as one of your own (PPO: categorical, gaussian, tanh_gaussian, composed, multihead, transformer, or
    yours)"""
    memory: Literal["none", "gru", "lstm"] = "none"
    """a policy with memory (PPO): a GRU or an LSTM after each encoder of the composed policy (rl_gpu.nn.composed),
    its state carried through rollouts and reset where episodes end; minibatches become whole environments'
    sequences (--num-envs divisible by --num-minibatches); trains eagerly (--compile off or auto)"""
    memory_size: int = 64
    """units of the --memory GRU or LSTM"""
    normalize_obs: bool = False
    """normalise observations by running mean and variance (statistics saved with the policy)"""
    init_log_std: float = 0.0
    """continuous actions: initial log standard deviation of PPO's Gaussian policy"""
    min_updates: int = 150
    """no success is declared before this many updates (a preset's value above a given --max-updates is lowered
    to it, with a note; both given with --min-updates above --max-updates is refused)"""
    max_updates: int = 1000
    """give up (exit code 1) after this many updates without success (at most 10**9); with --total-timesteps
    too, the run stops at whichever limit comes first (the schedules run over the step budget); self-play
    (--self-play, --algo neurd) has no goal to meet, so these updates are its budget (exit code 0, status
    budget_spent)"""
    total_timesteps: int | None = None
    """step budget: train for this many environment steps (under torchrun, every process's together), then
    stop (exit code 0, status budget_spent); the learning-rate schedule runs over it and a success goal is
    optional (--solve-threshold, or a turn-based game's --success-z, still ends the run early when met). At most
    10**15 (1e6 is read as 1000000); None: train by --max-updates"""
    eval_every: int = 25
    """validate every this many updates"""
    eval_episodes: int = 16384
    """episodes per validation (at most 10**8)"""
    final_eval_episodes: int = 24576
    """episodes of the final evaluation of best.pt on fresh seeds (at most 10**8)"""
    consecutive_passes: int = 3
    """validations in a row (at or after --min-updates) that must pass"""
    success_z: float = 3.0
    """turn-based games: a validation passes when the win rate beats the initial policy's by this many
    standard errors (3.0: one-sided p < 0.0014)"""
    solve_threshold: float | None = None
    """single-player tasks: a validation passes when the mean episode return reaches this (required unless
    --total-timesteps is given)"""
    deterministic_eval: bool = False
    """evaluate with the most probable action instead of sampling"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: CUDA when available, else CPU"""
    threads: int = 1
    """torch intra-op CPU threads, from 1 to 4 x the CPU count (1: on small machines more threads stalled
    whenever another core was busy)"""
    compile: Literal["auto", "off", "inductor", "cudagraphs"] = "auto"
    """hot loop: off = eager; inductor = torch.compile the rollout step, GAE and minibatch loss (SAC, TD3: the
    collection step and the update's loss; first update pays the compile time); cudagraphs = inductor + each
    whole iteration (rollout and update) replayed as one CUDA graph (CUDA only); auto = cudagraphs on CUDA, off
    on CPU (why: benchmarks/README.md)"""
    overwrite: bool = False
    """replace an existing run directory instead of refusing (never saved: a repeated run refuses again)"""
    config: Path | None = None
    """start from the settings in this JSON file (a run's config.json, so any run can be repeated exactly);
    flags given as well override it; unknown keys are refused"""
    resume: Path | None = None
    """continue the run in this directory (OUTPUT/seed-N) from its last.pt; other settings keep their saved
    values, except --max-updates, --total-timesteps, --device, --threads, --compile, --log-every,
    --checkpoint-every, --final-eval-episodes, --quiet; a finished run is refused unless --max-updates (or
    --total-timesteps) is raised"""
    checkpoint_every: int = 10
    """write last.pt every this many updates (a crash loses at most this many)"""
    log_every: int = 5
    """plain progress: print a line every this many updates"""
    quiet: bool = False
    """plain progress lines instead of the live view (also when stdout is not a terminal)"""
    track: tuple[Literal["wandb", "mlflow"], ...] = ()
    """experiment trackers that receive the run too (several allowed): its settings, every metrics line,
    validations, videos, the final evaluation, best.pt and last.pt; one tracker run per seed, continued by
    --resume. wandb (rl-gpu[wandb]; WANDB_MODE=offline keeps it in OUTPUT/seed-N/wandb), mlflow (rl-gpu[mlflow])"""
    track_project: str = "rl_gpu"
    """--track: the W&B project and the MLflow experiment"""
    track_name: str | None = None
    """--track: the run's name, each seed's NAME-seed-N; None: the output folder's name"""
    track_tags: tuple[str, ...] = ()
    """--track: the run's tags"""
    mlflow_uri: str | None = None
    """--track mlflow: the tracking store: sqlite:///PATH.db, a PATH.db, a folder to hold mlflow.db, or a server's
    address; default $MLFLOW_TRACKING_URI, else OUTPUT/mlflow.db (artifacts beside the database, in mlartifacts/)"""
    video_every: int = 0
    """film one episode of the policy every this many validations into OUTPUT/seed-N/videos/ and the trackers
    (MuJoCo tasks, VMAS scenarios, MinAtar games; 0: never)"""
    self_play: bool = False
    """two-player games: the learner plays both seats against a league (its latest self, past snapshots, the
    uniform-random baseline; rl_gpu.training.league) instead of a uniform-random opponent; Elo ratings go to
    metrics.jsonl and ratings.json; PPO, and MAPPO/IPPO on a game's seats as agents (ID?seats_as_agents=1)"""
    snapshot_every: int = 10
    """--self-play: a snapshot of the learner joins the pool every this many updates"""
    pool_size: int = 8
    """--self-play: most snapshots in the pool (the oldest is replaced)"""
    pfsp: Literal["hard", "variance", "uniform"] = "variance"
    """--self-play: how snapshots are picked, by the learner's expected score x against each: hard (1-x)^2,
    variance x(1-x), uniform"""
    latest_share: float = 0.5
    """--self-play: share of games against the learner's latest self (with no snapshot yet, also the
    snapshots' share)"""
    baseline_share: float = 0.1
    """--self-play: share of games against the uniform-random baseline (the rest: snapshots, by --pfsp)"""
    algo_params: Any = None
    """the hyper-parameters of ``algo``: an instance of its registered config class (None: its defaults). Saved
    in config.json under the algorithm's name (``"ppo": {...}``); on the command line, its fields are flags
    without a prefix"""

    def __post_init__(self) -> None:
        # Obvious spellings from Python code: a list for a tuple, a string for a path.
        for name in ("seeds", "hidden_sizes"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("output", "config", "resume"):
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, Path(getattr(self, name)))
        check_fields(self, label=flag_name)
        bounded = {"num_envs": None, "min_updates": MAX_UPDATES, "max_updates": MAX_UPDATES,
                   "eval_every": MAX_UPDATES, "eval_episodes": MAX_EPISODES, "final_eval_episodes": MAX_EPISODES,
                   "consecutive_passes": MAX_UPDATES, "threads": None, "log_every": MAX_UPDATES,
                   "checkpoint_every": MAX_UPDATES, "num_steps": MAX_NUM_STEPS, "total_timesteps": MAX_TIMESTEPS}
        check_bounds(self, bounded, label=flag_name)
        check_bounds(self, {"pbt_interval": MAX_UPDATES}, label=flag_name)
        check_tracking(self)
        if self.pbt and not self.parallel:
            raise UsageError("--pbt trains a population: give --parallel too (and at least 4 --seeds)")
        if not self.seeds:
            raise UsageError("--seeds needs at least one seed")
        if len(set(self.seeds)) != len(self.seeds):
            raise UsageError(f"--seeds has duplicates: {list(self.seeds)}")
        if any(not 0 <= s <= MAX_SEED for s in self.seeds):
            raise UsageError(f"--seeds must be between 0 and 2**63 - 1, got {list(self.seeds)}")
        if self.min_updates > self.max_updates:
            raise UsageError(f"--min-updates ({self.min_updates}) exceeds --max-updates ({self.max_updates}): pass "
                             f"--min-updates {self.max_updates} or lower, or a larger --max-updates")
        if not self.learning_rate > 0:
            raise UsageError(f"--learning-rate must be positive, got {self.learning_rate!r}")
        if not self.hidden_sizes or any(h <= 0 for h in self.hidden_sizes):
            raise UsageError(f"--hidden-sizes must be positive widths, got {list(self.hidden_sizes)}")
        check_bounds(self, {"snapshot_every": MAX_UPDATES, "pool_size": 1024}, label=flag_name)
        shares = (self.latest_share, self.baseline_share)
        if not all(0.0 <= v <= 1.0 for v in shares) or sum(shares) > 1.0:
            raise UsageError(f"--latest-share and --baseline-share must each be in [0, 1] and sum to at most 1, "
                             f"got {self.latest_share!r} and {self.baseline_share!r}")
        if not -20.0 <= self.init_log_std <= 20.0:
            # exp(log std) must stay a usable float32 standard deviation.
            raise UsageError(f"--init-log-std must be between -20 and 20, got {self.init_log_std!r}")
        try:
            self.lr_schedule_spec()
        except ValueError as e:
            raise UsageError(str(e)) from None
        if self.memory not in ("none", "gru", "lstm"):
            raise UsageError(f"--memory must be none, gru or lstm, got {self.memory!r}")
        if isinstance(self.memory_size, bool) or not isinstance(self.memory_size, int) \
                or not 1 <= self.memory_size <= MAX_MEMORY_SIZE:
            raise UsageError(f"--memory-size must be a whole number from 1 to {MAX_MEMORY_SIZE}, got "
                             f"{self.memory_size!r}")
        if self.uses_memory and self.policy not in ("auto", "composed"):
            raise UsageError(f"--memory builds the composed policy (rl_gpu.nn.composed), not --policy {self.policy} "
                             "(given, or the environment's preset): pass --policy composed")
        if self.policy != "auto" and self.policy not in policy_kind_names():
            raise UsageError(f"--policy {self.policy!r} is not a registered policy kind; known: auto, "
                             f"{', '.join(policy_kind_names())}")
        spec = algorithm_spec(self.algo)
        params_class = spec.config_class()
        if self.algo_params is None:
            object.__setattr__(self, "algo_params", params_class())
        elif type(self.algo_params) is not params_class:
            raise UsageError(f"algo_params must be a {params_class.__name__} (the hyper-parameters of --algo "
                             f"{self.algo}), got {type(self.algo_params).__name__}")
        spec.check_run(self)

    @property
    def schedule_kind(self) -> str:
        """The learning-rate schedule in force: --lr-schedule, or linear when it is constant and --anneal-lr is
        on (presets say --anneal-lr)."""
        return "linear" if self.lr_schedule == "constant" and self.anneal_lr else self.lr_schedule

    @property
    def steps_lr(self) -> bool:
        return self.schedule_kind == "step"

    @property
    def adapts_lr(self) -> bool:
        return self.schedule_kind == "adaptive-kl"

    def lr_schedule_spec(self):
        """The schedule as the algorithms take it (:class:`~rl_gpu.algos.schedules.LRSchedule`)."""
        from rl_gpu.algos.schedules import LRSchedule

        return LRSchedule(self.schedule_kind, self.lr_step_every, self.lr_step_gamma, self.desired_kl)

    @property
    def tracks_mlflow(self) -> bool:
        return "mlflow" in self.track

    @property
    def uses_memory(self) -> bool:
        """The policy has memory (``--memory`` other than none)."""
        return self.memory != "none"

    @property
    def self_play_flag(self) -> str | None:
        """The setting that makes this run self-play (``--self-play``: PPO's league; an algorithm that is
        self-play by itself, such as ``--algo neurd``), or None."""
        if algorithm_spec(self.algo).self_play_only:
            return f"--algo {self.algo}"
        return "--self-play" if self.self_play else None

    def algo_config(self):
        """The hyper-parameters of the chosen algorithm."""
        return self.algo_params

    def to_dict(self) -> dict:
        """Plain JSON-able values (paths as strings)."""
        def plain(v):
            if isinstance(v, Path):
                return str(v)
            if isinstance(v, tuple):
                return list(v)
            if dataclasses.is_dataclass(v):
                return {k: plain(x) for k, x in dataclasses.asdict(v).items()}
            return v
        values = {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "algo_params"}
        values[self.algo] = plain(self.algo_params)
        # A saved configuration never replaces a run: repeating it (--config RUN/config.json) must refuse an
        # existing run directory unless --overwrite is given again.
        values["overwrite"] = False
        return values


MAX_MEMORY_SIZE = 4096
"""The largest ``--memory-size``: two cells of 4096 units hold about 400 MB of weights; 65536 would ask for 100 GB
(refused here rather than failing in the allocator)."""

RESUMABLE_CHANGES = frozenset(
    {"max_updates", "total_timesteps", "device", "threads", "compile", "log_every", "checkpoint_every",
     "final_eval_episodes", "resume", "overwrite", "output", "seeds", "config", "quiet", "parallel", "track",
     "track_project", "track_name", "track_tags", "mlflow_uri", "video_every"}
)
"""Fields that may differ from the saved configuration when a run is resumed."""


def config_from_dict(data: dict) -> TrainConfig:
    """Rebuild a :class:`TrainConfig` from :meth:`TrainConfig.to_dict` output (a ``--config`` file, a run's
    config.json, a checkpoint's configuration), checked as strictly as flags.

    Accepts the settings, the chosen algorithm's section (under its name) and :data:`SAVED_EXTRA_KEYS`;
    ``overwrite`` is ignored (a file never replaces a run), and so are the sections of other registered algorithms
    (files written before a configuration held only its own algorithm's section have them all).

    Raises:
        UsageError: an unknown key (naming the nearest known one), a value of the wrong type or out of range.
    """
    if not isinstance(data, dict):
        raise UsageError(f"the configuration must be a JSON object, got {type(data).__name__}")
    algo = data.get("algo", TrainConfig.algo)
    spec = algorithm_spec(algo)  # an unknown name is refused naming the known ones
    sections = set(algorithm_names())
    rest = {k: v for k, v in data.items() if k not in sections}
    if "algo_params" in rest:
        raise UsageError(f"unknown key 'algo_params'; an algorithm's hyper-parameters are saved under its name "
                         f"('{algo}')")
    config = from_dict(TrainConfig, rest, extra=SAVED_EXTRA_KEYS, ignore=("overwrite",))
    if algo not in data:
        return config
    params = from_dict(spec.config_class(), data[algo], where=f"{algo}.")
    return dataclasses.replace(config, algo_params=params)


def check_machine_limits(config: TrainConfig) -> None:
    """Limits that depend on this machine (checked when a run starts, not when a configuration is read)."""
    check_threads(config.threads)


def check_tracking(config: TrainConfig) -> None:
    """The tracking and video settings, each refused in one line (an empty or repeated name, a negative count)."""
    if len(set(config.track)) != len(config.track):
        raise UsageError(f"--track names a tracker twice: {list(config.track)}")
    for flag, value in (("--track-project", config.track_project), ("--track-name", config.track_name),
                        ("--mlflow-uri", config.mlflow_uri), *(("--track-tags", t) for t in config.track_tags)):
        if value is not None and (not value.strip() or len(value) > 256 or not value.isprintable()):
            raise UsageError(f"{flag} must be printable text of 1 to 256 characters, got {value!r}")
    if isinstance(config.video_every, bool) or not isinstance(config.video_every, int) \
            or not 0 <= config.video_every <= MAX_UPDATES:
        raise UsageError(f"--video-every must be a whole number from 0 (never) to {MAX_UPDATES}, got "
                         f"{config.video_every!r}")


def lowered_min_updates(base: TrainConfig, max_updates: object) -> int | None:
    """The preset's (or file's) ``min_updates`` lowered to a smaller ``max_updates`` given without a
    ``min_updates`` (a run may not be asked to stop before its minimum); None when it stands."""
    if isinstance(max_updates, int) and 0 < max_updates < base.min_updates:
        return max_updates
    return None

