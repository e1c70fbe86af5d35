"""The algorithm door: an algorithm written here, against the public protocol only (``Algorithm``, ``Setup``,
``AlgorithmSpec``), registered from the tests, trains through ``rl-gpu train --algo toy`` end to end: its
hyper-parameters are flags, its section alone is saved, its run validates, checkpoints, resumes exactly and is
evaluated and exported like any other, and what it declares it cannot run is refused before anything is written."""

import copy
import dataclasses
import json
from dataclasses import dataclass

import pytest
import torch

from rl_gpu.algos.base import COLLECTION_METRICS, Iteration, Setup, collection_metrics, no_phase
from rl_gpu.algos.registry import (
    AlgorithmSpec,
    algorithm_names,
    algorithm_spec,
    register_algorithm,
    unregister_algorithm,
)
from rl_gpu.collect.reference import collect
from rl_gpu.data.advantages import compute_gae
from rl_gpu.nn.actor_critic import policy_for_env

HERE = __name__


@dataclass(frozen=True)
class ToyConfig:
    """Toy policy gradient hyper-parameters."""

    toy_gamma: float = 0.99
    """discount"""
    baseline: bool = True
    """subtract the critic's value (the critic learns the returns)"""

    def __post_init__(self) -> None:
        if not 0.0 <= self.toy_gamma <= 1.0:
            raise ValueError(f"--toy-gamma must be in [0, 1], got {self.toy_gamma!r}")


class Toy:
    """One rollout (the reference collector), then one Adam step on -log pi(a|s) * advantage + value loss."""

    resume_notes = ()
    setups: list = []

    def __init__(self, setup: Setup, config: ToyConfig) -> None:
        Toy.setups.append(setup)
        self.env, self.config = setup.env, config
        self.num_steps = setup.num_steps or 32
        self._policy = policy_for_env(self.env.spec, setup.hidden_sizes).to(self.env.device)
        self.optimizer = torch.optim.Adam(self._policy.parameters(), lr=setup.learning_rate)
        self.rng = torch.Generator(device=self.env.device).manual_seed(setup.seed)
        self.metric_names = ("loss", "learning_rate", *COLLECTION_METRICS)

    @classmethod
    def from_setup(cls, setup: Setup, config: ToyConfig) -> "Toy":
        return cls(setup, config)

    @property
    def policy(self):
        return self._policy

    def iterate(self, *, phase=no_phase):
        with phase("collect"), torch.no_grad():
            rollout = collect(self._policy, self.env, self.num_steps, self.rng)
        with phase("update"):
            values = rollout.value if self.config.baseline else torch.zeros_like(rollout.value)
            advantage, returns = compute_gae(rollout.reward, values, rollout.terminated, rollout.truncated,
                                             rollout.final_value, rollout.bootstrap_value, self.config.toy_gamma,
                                             1.0)
            log_prob, _, value = self._policy.evaluate(rollout.obs, rollout.action, rollout.action_mask)
            loss = -(log_prob * advantage).mean() + 0.5 * ((value - returns) ** 2).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        lr = torch.tensor(self.optimizer.param_groups[0]["lr"], device=self.env.device)
        return Iteration(collection_metrics(rollout), lr, {"loss": loss.detach()})

    def initial_policy(self):
        return copy.deepcopy(self._policy).requires_grad_(False)

    def set_progress(self, fraction) -> None:
        pass

    def state_dict(self):
        return {"policy": self._policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "rng": self.rng.get_state()}

    def load_state_dict(self, state) -> None:
        self._policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.set_state(state["rng"])


SPEC = AlgorithmSpec(name="toy", config=f"{HERE}:ToyConfig", factory=f"{HERE}:Toy",
                     summary="a policy gradient written in the tests", default_num_steps=32,
                     torchrun=False, compile_modes=("off",))


@pytest.fixture
def toy():
    register_algorithm(SPEC)
    yield SPEC
    unregister_algorithm("toy")


TINY = ["--env", "CartPole-v1", "--algo", "toy", "--num-envs", "8", "--eval-every", "2", "--eval-episodes", "8",
        "--final-eval-episodes", "8", "--solve-threshold", "1e9", "--min-updates", "1", "--device", "cpu",
        "--hidden-sizes", "16", "--checkpoint-every", "2", "--quiet"]


@pytest.fixture
def train(call_main):
    from rl_gpu.cli.train import main

    return lambda *args: call_main(main, *TINY, *args)


def test_a_registered_algorithm_trains_resumes_evaluates_and_exports(toy, tmp_path, train, call_main):
    assert "toy" in algorithm_names()
    code, out, err = train("--toy-gamma", "0.9", "--max-updates", "4", "--output", tmp_path / "one")
    assert code == 1, err  # the goal is out of reach: every file is written, exit 1
    run = tmp_path / "one" / "seed-11"
    saved = json.loads((run / "config.json").read_text())
    assert saved["algo"] == "toy" and saved["toy"] == {"toy_gamma": 0.9, "baseline": True}
    assert not {"ppo", "sac", "td3", "neurd", "algo_params"} & set(saved)  # its own section only
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in lines if "loss" in r] == [1, 2, 3, 4]

    # Resume: two updates, then two more, equals four in one go (parameters bit for bit).
    code, _, err = train("--toy-gamma", "0.9", "--max-updates", "2", "--output", tmp_path / "two")
    assert code == 1, err
    from rl_gpu.cli.train import main

    code, _, err = call_main(main, "--resume", tmp_path / "two" / "seed-11", "--max-updates", "4", "--quiet")
    assert code == 1, err
    from rl_gpu.runtime.checkpoint import load_checkpoint

    whole = load_checkpoint(run / "last.pt")["algorithm"]["policy"]
    parts = load_checkpoint(tmp_path / "two" / "seed-11" / "last.pt")["algorithm"]["policy"]
    assert whole.keys() == parts.keys() and all(torch.equal(whole[k], parts[k]) for k in whole)

    # Its checkpoints are evaluated and exported like any other.
    from rl_gpu.cli.evaluate import main as evaluate
    from rl_gpu.cli.export import main as export

    code, out, err = call_main(evaluate, run / "best.pt", "--episodes", "4", "--device", "cpu")
    assert code == 0 and "mean return" in out, err
    code, out, err = call_main(export, run / "best.pt", "--output", tmp_path / "policy.pt")
    assert code == 0 and (tmp_path / "policy.pt").is_file(), err


def test_its_flags_and_refusals_come_from_its_spec(toy, tmp_path, train, call_main):
    from rl_gpu.cli.train import main

    code, out, _ = call_main(main, "--algo", "toy", "--help")
    text = " ".join(out.replace("│", " ").split())  # the help's box wraps lines
    assert code == 0 and "--toy-gamma" in text and "a policy gradient written in the tests" in text
    assert "--clip-coef" not in out  # PPO's section is not this run's
    for args, needle in [(["--toy-gamma", "2"], "--toy-gamma must be in [0, 1]"),
                         (["--compile", "inductor"], "--compile inductor does not apply to --algo toy"),
                         (["--parallel", "--seeds", "1", "2"], "--parallel trains populations of PPO or MAPPO or IPPO only"),
                         (["--clip-coef", "0.1"], "--clip-coef"),
                         (["--lr-schedule", "cosine"], "--lr-schedule cosine does not apply to --algo toy")]:
        code, _, err = train(*args, "--max-updates", "2", "--output", tmp_path / "refused")
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "refused").exists()
    unregister_algorithm("toy")
    code, _, err = train("--output", tmp_path / "refused")
    assert code == 2 and "invalid choice 'toy' for argument '--algo'" in err and "'ppo', 'sac'" in err, err


def test_the_spec_is_checked_when_registered():
    for bad in [dict(name="Toy"), dict(config="not an entry"), dict(default_num_steps=0),
                dict(compile_modes=("inductor",)), dict(population=True), dict(pbt="some.module:PBT")]:
        with pytest.raises(ValueError):
            dataclasses.replace(SPEC, **bad)
    register_algorithm(SPEC)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_algorithm(dataclasses.replace(SPEC, summary="another"))
    finally:
        unregister_algorithm("toy")


def test_its_setup_carries_an_env_factory_and_named_seeds(toy, tmp_path, train):
    Toy.setups.clear()
    code, _, err = train("--max-updates", "1", "--output", tmp_path / "run")
    assert code == 1, err
    (setup,) = Toy.setups
    second = setup.make_env(3, setup.seed_for("second-collector"))
    assert second is not setup.env and second.num_envs == 3 and second.spec == setup.env.spec
    assert second.device == setup.env.device
    again = setup.make_env(3, setup.seed_for("second-collector"))
    assert torch.equal(second.reset().obs, again.reset().obs)  # the same seed, the same starts
    assert setup.seed_for("a") != setup.seed_for("b") and setup.seed_for("a") != setup.seed


def test_the_opponent_slot_is_filled_through_setup():
    """Self-play's league arrives through Setup.opponent (called with the policy the algorithm built), not by
    reaching into the algorithm afterwards."""
    from rl_gpu.algos.registry import make_algorithm
    from rl_gpu.envs.registry import make
    from rl_gpu.nn.actor_critic import UniformRandomPolicy

    seen, player = [], UniformRandomPolicy()

    def opponent(policy):
        seen.append(policy)
        return player

    env = make("RussianRoulette-v0", num_envs=8, seed=0)
    algo = make_algorithm("ppo", Setup(env=env, seed=0, opponent=opponent),
                          algorithm_spec("ppo").default_config())
    assert seen == [algo.policy] and algo.opponent is player
    metrics = algo.iterate()
    assert float(metrics["episodes"]) > 0
