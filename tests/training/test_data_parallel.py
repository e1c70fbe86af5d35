"""Data-parallel training under a real two-process gloo group (forked processes on the loopback interface, no GPU):
one update of 2 ranks x N/2 rows equals one update of one process on the N rows, parameters stay identical
across ranks (PPO and SAC), running statistics merge exactly, a paused run resumes every rank exactly through the
runner, and killing one process of a CLI launch ends the other with a clear message instead of a hang."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib.util
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch._dynamo  # (imported before forking: Adam imports it, seconds per child otherwise)
import torch.distributed as dist
import torch.multiprocessing as mp

from rl_gpu.algos.base import Setup
from rl_gpu.algos.mappo.config import MAPPOConfig
from rl_gpu.algos.ppo.algorithm import PPO
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.algos.registry import make_algorithm
from rl_gpu.algos.sac.config import SACConfig
from rl_gpu.cli.train import main as train_main
from rl_gpu.core.errors import UsageError
from rl_gpu.core.seeding import derive_seed
from rl_gpu.data.rollout import Rollout
from rl_gpu.envs.registry import make
from rl_gpu.nn.actor_critic import policy_for_env
from rl_gpu.nn.normalization import RunningMeanStd
from rl_gpu.runtime import distributed as D
from rl_gpu.runtime.checkpoint import load_checkpoint
from rl_gpu.training import ranks
from rl_gpu.training.config import TrainConfig
from rl_gpu.training.runner import VOLATILE_METRICS, resume, train

with contextlib.suppress(ImportError):
    import torch.utils.tensorboard  # (rank 0's logger imports it: once here, not per child)

WORLD = 2
N, T = 8, 6
"""Rows of the single-process rollout (each rank holds N / 2 of them) and its steps."""
ROW_FIELDS = ("bootstrap_value", "learner_seat")
"""Rollout fields shaped ``[N]`` (the others are ``[T, N, ...]``)."""

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with the gloo backend is not available")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun_env(rank: int, port: int) -> dict[str, str]:
    """What torchrun sets in each process it starts."""
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(WORLD), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"}


def _start_method() -> str:
    # Children forked from a fork server that has imported torch skip re-importing it, and inherit nothing of this
    # process: a child forked from a test process that other tests left with autograd's worker threads (or CUDA)
    # could not run a backward pass ("Unable to handle autograd's threading in combination with fork-based
    # multiprocessing").
    if "forkserver" in multiprocessing.get_all_start_methods():
        multiprocessing.get_context("forkserver").set_forkserver_preload(["torch", "torch._dynamo", "rl_gpu.algos.ppo"])
        return "forkserver"
    return "spawn"


def _run_ranks(fn, *args, timeout: float = 120) -> None:
    """Run ``fn(rank, port, *args)`` in two processes; a failure in either is raised here with its traceback."""
    context = mp.start_processes(fn, args=(_free_port(), *args), nprocs=WORLD, join=False,
                                 start_method=_start_method())
    deadline = time.monotonic() + timeout
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"the two ranks did not finish within {timeout} s")


def _join(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    os.environ.update(_torchrun_env(rank, port))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))


# --- one update: 2 ranks x N/2 rows against 1 process x N rows -------------------------------------------------

PPO_CONFIGS = {
    # Per-minibatch advantage normalisation uses each rank's own minibatch (as rsl_rl and rl_games do), so the
    # exact equivalence holds with it off; the KL early stop (a tiny target stops after the first epoch) and the
    # reward normaliser's statistics are reduced over the ranks.
    "plain": PPOConfig(update_epochs=3, num_minibatches=2, norm_adv=False, norm_reward=True),
    "kl-stop": PPOConfig(update_epochs=3, num_minibatches=2, norm_adv=False, target_kl=1e-9),
}


def _fresh_ppo(spec, policy_state: dict, config: PPOConfig) -> PPO:
    policy = policy_for_env(spec, (16, 16), True, 0.0)
    policy.load_state_dict(policy_state)
    return PPO(policy, config, 3e-3, seed=5)


def _rows(rollout: Rollout, rows: slice) -> Rollout:
    """The rollout of environment rows ``rows`` only."""
    out = {}
    for f in dataclasses.fields(rollout):
        v = getattr(rollout, f.name)
        out[f.name] = v if not isinstance(v, torch.Tensor) else (v[rows] if f.name in ROW_FIELDS else v[:, rows])
    return Rollout(**out)


def _rank_permutations(epochs: int) -> list[torch.Tensor]:
    """Each rank's ``[E, T * N/2]`` shuffles (drawn from a fixed stream, the same in every process)."""
    g = torch.Generator().manual_seed(0)
    return [torch.stack([torch.randperm(T * N // WORLD, generator=g) for _ in range(epochs)]) for _ in range(WORLD)]


def _single_permutations(per_rank: list[torch.Tensor], minibatches: int) -> torch.Tensor:
    """The one-process shuffle whose minibatch j is the union of every rank's minibatch j: rank r's slot
    ``t * N/2 + n`` is slot ``t * N + r * N/2 + n`` of the whole rollout."""
    half = N // WORLD
    size = T * half // minibatches
    epochs = []
    for e in range(per_rank[0].shape[0]):
        parts = []
        for j in range(minibatches):
            for r, perm in enumerate(per_rank):
                s = perm[e, j * size:(j + 1) * size]
                parts.append((s // half) * N + r * half + s % half)
        epochs.append(torch.cat(parts))
    return torch.stack(epochs)


def _reference(path: Path) -> None:
    """Collect one CartPole rollout and update one process on all of it, per configuration; saved to ``path``."""
    env = make("CartPole-v1", num_envs=N, device="cpu", seed=3)
    torch.manual_seed(1)
    policy = policy_for_env(env.spec, (16, 16), True, 0.0)
    initial = {k: v.clone() for k, v in policy.state_dict().items()}
    rollout = PPO(policy, PPO_CONFIGS["plain"], 3e-3, seed=5, env=env, num_steps=T).collect().clone()
    out = {"rollout": rollout, "initial": initial, "spec_env": "CartPole-v1", "after": {}}
    for name, config in PPO_CONFIGS.items():
        ppo = _fresh_ppo(env.spec, initial, config)
        per_rank = _rank_permutations(config.update_epochs)
        ppo._update_body(rollout, _single_permutations(per_rank, config.num_minibatches), weighted=False)
        out["after"][name] = {k: v.clone() for k, v in ppo.policy.state_dict().items()}
        if ppo.reward_normalizer is not None:
            out["after"][name]["return_var"] = ppo.reward_normalizer.return_rms.var.clone()
    torch.save(out, path)


def _update_worker(rank: int, port: int, tmp: str) -> None:
    _join(rank, port)
    try:
        ref = torch.load(Path(tmp) / "reference.pt", weights_only=False)
        spec = make(ref["spec_env"], num_envs=1, device="cpu", seed=0).spec
        mine = _rows(ref["rollout"], slice(rank * N // WORLD, (rank + 1) * N // WORLD))
        diffs = {}
        for name, config in PPO_CONFIGS.items():
            ppo = _fresh_ppo(spec, ref["initial"], config)
            per_rank = _rank_permutations(config.update_epochs)
            ppo._update_body(mine, per_rank[rank], weighted=False)
            state = dict(ppo.policy.state_dict())
            if ppo.reward_normalizer is not None:
                state["return_var"] = ppo.reward_normalizer.return_rms.var
            expected = ref["after"][name]
            assert state.keys() == expected.keys()
            diffs[name] = max((state[k].double() - expected[k].double()).abs().max().item() for k in expected)
            # The update moved the parameters (the comparison is not of two untouched copies).
            assert any(not torch.equal(state[k], v) for k, v in ref["initial"].items() if k.endswith("weight"))
        if rank == 0:
            (Path(tmp) / "diffs.json").write_text(json.dumps(diffs))
        for name, diff in diffs.items():
            assert diff < 1e-5, (name, diff)
    finally:
        dist.destroy_process_group()


def test_one_update_of_two_ranks_equals_one_process_on_all_rows(tmp_path):
    _reference(tmp_path / "reference.pt")
    _run_ranks(_update_worker, str(tmp_path))
    diffs = json.loads((tmp_path / "diffs.json").read_text())
    print(f"max |2 ranks - 1 process| after one update: {diffs}")


# --- parameters stay identical; statistics merge exactly -------------------------------------------------------

def _gathered(tensors) -> torch.Tensor:
    """Every rank's flattened ``tensors``: ``[K, P]``."""
    flat = torch.cat([t.detach().reshape(-1).double() for t in tensors])
    parts = [torch.empty_like(flat) for _ in range(WORLD)]
    dist.all_gather(parts, flat)
    return torch.stack(parts)


def _algorithm(name: str, env_id: str, seed: int, config) -> object:
    rank = D.rank()
    torch.manual_seed(100 + rank)  # a different initialisation on every rank: the broadcast must fix it
    env = make(env_id, num_envs=4, device="cpu", seed=derive_seed(seed, "train-env", rank))
    setup = Setup(env=env, seed=ranks.algorithm_seed(seed), learning_rate=3e-3, num_steps=8,
                  hidden_sizes=(16, 16), normalize_obs=True)
    algo = make_algorithm(name, setup, config)
    ranks.broadcast_algorithm(algo)
    return algo


def _identical_worker(rank: int, port: int) -> None:
    _join(rank, port)
    try:
        runs = [("ppo", "CartPole-v1", PPOConfig(update_epochs=2, num_minibatches=2, norm_reward=True)),
                ("sac", "Pendulum-v1", SACConfig(learning_starts=16, batch_size=16, buffer_size=256))]
        if importlib.util.find_spec("vmas") is not None:
            # Worlds of two agents: the agent rows' update and the value normaliser's statistics.
            runs.append(("mappo", "vmas:navigation?n_agents=2",
                         MAPPOConfig(update_epochs=2, num_minibatches=2, norm_reward=True)))
        for name, env_id, config in runs:
            algo = _algorithm(name, env_id, 7, config)
            before = _gathered(algo.policy.parameters())
            assert torch.equal(before[0], before[1]), f"{name}: not identical after the broadcast"
            for _ in range(4):
                algo.iterate()
            # Every network and statistic the algorithm holds; its random streams are its own on each rank.
            state = algo.state_dict()
            nets = [t for key in ("policy", "critic", "target_critic", "log_alpha", "value_normalizer") if key in state
                    for t in state[key].values() if t.is_floating_point()]
            after = _gathered(nets)
            assert torch.equal(after[0], after[1]), f"{name}: ranks diverged: {(after[0] - after[1]).abs().max()}"
            assert not torch.equal(after[0][:before.shape[1]], before[0]), f"{name}: nothing was learned"
            rngs = [k for k in state if k.endswith("_rng")]
            streams = _gathered([state[rngs[0]].double()])
            assert not torch.equal(streams[0], streams[1]), f"{name}: ranks share a random stream"
    finally:
        dist.destroy_process_group()


def test_parameters_stay_identical_across_ranks():
    _run_ranks(_identical_worker)


def _moments_worker(rank: int, port: int) -> None:
    _join(rank, port)
    try:
        g = torch.Generator().manual_seed(3)
        # Different amounts per rank, weights that leave rows out, two successive updates.
        data = [torch.randn(5, 3, generator=g) * 2 + 1, torch.randn(9, 3, generator=g) - 4]
        weights = [torch.tensor([1.0, 0, 1, 1, 1]), torch.ones(9)]
        later = [torch.randn(4, 3, generator=g), torch.randn(2, 3, generator=g) * 5]
        rms = RunningMeanStd(3)
        rms.update(data[rank], weights[rank])
        rms.update(later[rank])
        everything = torch.cat([data[0][weights[0] > 0], data[1], *later]).double()
        torch.testing.assert_close(rms.count, torch.tensor(float(everything.shape[0]), dtype=torch.float64))
        torch.testing.assert_close(rms.mean, everything.mean(0), rtol=0, atol=1e-12)
        torch.testing.assert_close(rms.var, everything.var(0, unbiased=False), rtol=0, atol=1e-12)
        n, m, v = D.merge_moments(torch.tensor(0.0, dtype=torch.float64), torch.zeros(3, dtype=torch.float64),
                                  torch.ones(3, dtype=torch.float64))
        assert n.item() == 0 and torch.isfinite(m).all() and torch.isfinite(v).all()  # nothing anywhere
    finally:
        dist.destroy_process_group()


def test_observation_statistics_merge_to_those_of_the_concatenated_data():
    _run_ranks(_moments_worker)


# --- the runner: rank 0 writes, a paused run resumes every rank exactly -----------------------------------------

def _config(output: Path, **kw) -> TrainConfig:
    # A two-player game of at most 10 moves: evaluations are short, and finished games leave padded slots, so
    # the ranks' transition counts must be summed, not assumed.
    return TrainConfig(**{"env": "RussianRoulette-v0", "output": output, "seeds": (11,), "num_envs": 8,
                          "max_updates": 4, "min_updates": 4, "eval_every": 2, "eval_episodes": 6,
                          "final_eval_episodes": 6, "checkpoint_every": 1, "device": "cpu", "log_every": 1,
                          "quiet": True, "overwrite": True, **kw})


def _runner_worker(rank: int, port: int, tmp: str) -> None:
    _join(rank, port)
    try:
        tmp_path = Path(tmp)
        # What several processes cannot run is refused alike on every rank, before anything is written.
        for bad, words in (({"seeds": (1, 2)}, "one torchrun per seed"), ({"eval_episodes": 1}, "at least 2")):
            with pytest.raises(UsageError, match=words):
                train(_config(tmp_path / "refused", **bad), log=lambda m: None, display="off")
        assert not (tmp_path / "refused").exists()
        whole = train(_config(tmp_path / "whole"), log=lambda m: None, display="off")[0]
        paused = train(_config(tmp_path / "paused"), log=lambda m: None, stop_after=2, display="off")[0]
        assert paused.status == "paused", paused.reason
        resumed = resume(paused.run_dir, _config(tmp_path / "paused"), log=lambda m: None, display="off")
        assert whole.status == resumed.status == "goal_not_met"
        assert whole.summary["best_update"] == resumed.summary["best_update"]
    finally:
        dist.destroy_process_group()


def _assert_same(a, b, where: str = "") -> None:
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _lines(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        out.append({k: v for k, v in record.items() if k not in VOLATILE_METRICS})
    return out


def test_rank_zero_writes_and_a_paused_run_resumes_every_rank_exactly(tmp_path):
    _run_ranks(_runner_worker, str(tmp_path))
    whole, paused = tmp_path / "whole" / "seed-11", tmp_path / "paused" / "seed-11"
    a, b = load_checkpoint(whole / "last.pt"), load_checkpoint(paused / "last.pt")
    assert a["world_size"] == b["world_size"] == WORLD and len(a["rank_trainers"]) == WORLD - 1
    # Every rank's whole state (networks, optimiser, environments, random streams, counters) as if never paused.
    for state_a, state_b in zip([a["trainer"], *a["rank_trainers"]], [b["trainer"], *b["rank_trainers"]]):
        _assert_same({k: v for k, v in state_a.items() if k != "train_seconds"},
                     {k: v for k, v in state_b.items() if k != "train_seconds"})
    # The two ranks' environments are different streams.
    assert not torch.equal(a["trainer"]["algorithm"]["policy_rng"], a["rank_trainers"][0]["algorithm"]["policy_rng"])
    lines_a, lines_b = _lines(whole / "metrics.jsonl"), _lines(paused / "metrics.jsonl")
    assert lines_a == lines_b
    updates = [r["update"] for r in lines_a if "transitions" in r]
    assert updates == sorted(set(updates)) == [1, 2, 3, 4]  # one line per update: only rank 0 writes
    assert all(r["transitions"] > 8 for r in lines_a if "transitions" in r)  # more than one rank's rows
    summary, config = (json.loads((whole / name).read_text()) for name in ("summary.json", "config.json"))
    assert summary["status"] == "goal_not_met"
    # the run's files say it ran on WORLD processes, and how many environments that made
    assert summary["world_size"] == config["run_environment"]["world_size"] == WORLD
    assert summary["total_envs"] == config["run_environment"]["total_envs"] == WORLD * config["num_envs"]


# --- a lost process ---------------------------------------------------------------------------------------------

def _cli_worker(rank: int, port: int, output: str, stderr_path: str) -> None:
    os.environ.update(_torchrun_env(rank, port))
    os.environ[D.TIMEOUT_ENV] = "20"
    torch.set_num_threads(1)
    with open(stderr_path, "w") as err:
        os.dup2(err.fileno(), 2)
        sys.stderr = err
        code = train_main(["--env", "CartPole-v1", "--device", "cpu", "--output", output, "--num-envs", "8",
                     "--num-steps", "16", "--max-updates", "100000", "--eval-every", "1000", "--log-every", "1",
                     "--quiet"])
        err.flush()
    os._exit(code)


def _start_cli(tmp_path: Path) -> list:
    """Two processes of ``rl-gpu train`` (a long CartPole run), once rank 0 has logged update 2."""
    ctx = multiprocessing.get_context(_start_method())
    port = _free_port()
    processes = [ctx.Process(target=_cli_worker, args=(r, port, str(tmp_path / "run"), str(tmp_path / f"err{r}")))
                 for r in range(WORLD)]
    for p in processes:
        p.start()
    metrics = tmp_path / "run" / "seed-11" / "metrics.jsonl"
    deadline = time.monotonic() + 90
    while not (metrics.exists() and '"update": 2' in metrics.read_text()):
        if time.monotonic() > deadline or not all(p.is_alive() for p in processes):
            for p in processes:
                p.kill()
            pytest.fail(f"training did not start within 90 s (exit codes {[p.exitcode for p in processes]})")
        time.sleep(0.2)
    return processes


def _wait(processes: list, seconds: float) -> None:
    try:
        for p in processes:
            p.join(timeout=seconds)
        assert not any(p.is_alive() for p in processes), f"still running {seconds} s after the signal"
    finally:
        for p in processes:
            if p.is_alive():
                p.kill()


def test_killing_one_process_ends_the_other_with_a_clear_message(tmp_path):
    processes = _start_cli(tmp_path)
    os.kill(processes[1].pid, signal.SIGKILL)
    _wait(processes[:1], 60)
    assert processes[0].exitcode == 4
    message = (tmp_path / "err0").read_text()
    assert "lost contact with the others" in message and "--resume" in message, message
    assert (tmp_path / "run" / "seed-11" / "last.pt").exists()


def test_a_stop_signal_to_one_process_stops_both_at_the_same_update(tmp_path):
    processes = _start_cli(tmp_path)
    os.kill(processes[1].pid, signal.SIGTERM)
    _wait(processes, 60)
    assert [p.exitcode for p in processes] == [128 + signal.SIGTERM] * WORLD
    message = (tmp_path / "err0").read_text()
    assert "SIGTERM received: stopped after update" in message, message
    assert (tmp_path / "err1").read_text() == ""  # rank 1 reports nothing
    payload = load_checkpoint(tmp_path / "run" / "seed-11" / "last.pt")
    stopped = int(message.split("stopped after update ")[1].split(",")[0])
    assert payload["update"] == stopped and payload["world_size"] == WORLD


# --- through torchrun itself ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_torchrun_two_processes_solve_cartpole(tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed next to this interpreter")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "rl_gpu", "train",
                           "--env", "CartPole-v1", "--device", "cpu", "--output", str(tmp_path / "ddp"), "--quiet"],
                          capture_output=True, text=True, timeout=600, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "ddp" / "seed-11" / "summary.json").read_text())
    assert summary["status"] == "success" and summary["final_evaluation"]["best"]["mean_return"] >= 475
    assert proc.stdout.count("SUCCESS") == 1  # only rank 0 reports
