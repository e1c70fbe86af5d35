"""Hostile command lines and config files for ``rl-gpu train``, fuzzed with hypothesis.

Each case runs ``rl-gpu train`` in this process with the training itself replaced by a stub that reports
success (``Trainer.run``): what is tested is everything before it, the boundary where flags and files are read,
validated, and turned into run directories, environments and an algorithm. Every case must end with exit 0 or a
one-line error with exit 2 (never a traceback), write nothing outside its output folder, and leave its
``--config`` file byte for byte as it was. Cases per kind: each test's ``max_examples``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from cli_runner import FUZZ, run_cli

from rl_gpu.training import runner


@pytest.fixture(autouse=True)
def no_training(monkeypatch):
    """Trainer.run replaced by an immediate success: the boundary is under test, not learning."""

    def run(self, stop=None, stop_after=None):
        return runner.RunResult(self.seed, self.run_dir, "success", "stubbed", {})

    monkeypatch.setattr(runner.Trainer, "run", run)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _check(root: Path, out: Path, before: dict[str, bytes], code: int, err: str) -> None:
    event(f"exit {code}")
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err, err
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
        assert not out.exists(), "a refused run wrote its output folder"
    after = _files(root)
    for name, data in before.items():
        assert after.get(name) == data, f"{name} was modified"
    assert all(name in before or (root / name).is_relative_to(out) for name in after), sorted(after)


NUMBERS = st.one_of(
    st.integers(-3, 64), st.sampled_from([0, 10**12, 2**40, 2**63, -(2**31)]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["nan", "inf", "-inf", "1e38", "-0.0", "1e-300"]),
)
WORDS = st.one_of(st.text(max_size=8), st.sampled_from(["", "None", "true", "yes", "-1", "--", "cpu", "cuda"]))
FLAGS = {
    "--num-envs": NUMBERS, "--num-steps": NUMBERS, "--learning-rate": NUMBERS, "--max-updates": NUMBERS,
    "--min-updates": NUMBERS, "--eval-every": NUMBERS, "--eval-episodes": NUMBERS, "--final-eval-episodes": NUMBERS,
    "--threads": NUMBERS, "--gamma": NUMBERS, "--gae-lambda": NUMBERS, "--clip-coef": NUMBERS,
    "--ent-coef": NUMBERS, "--num-minibatches": NUMBERS, "--update-epochs": NUMBERS, "--solve-threshold": NUMBERS,
    "--success-z": NUMBERS, "--total-timesteps": NUMBERS, "--target-kl": NUMBERS, "--norm-reward-clip": NUMBERS,
    "--hidden-sizes": st.lists(NUMBERS, max_size=3), "--seeds": st.lists(NUMBERS, max_size=3),
    "--compile": WORDS, "--device": WORDS, "--algo": WORDS, "--checkpoint-every": NUMBERS, "--log-every": NUMBERS,
    "--bogus-flag": WORDS, "--learning-rat": NUMBERS,
}
SMALL = ["--num-envs", "8", "--eval-episodes", "8", "--final-eval-episodes", "8", "--max-updates", "2",
         "--min-updates", "1", "--num-steps", "16", "--num-minibatches", "2"]


@settings(FUZZ, max_examples=150)
@given(env=st.sampled_from(["CartPole-v1", "RussianRoulette-v0", "Pendulum-v1", "gym:NoSuch-v0", "Bogus-v9",
                            "os:system", "rl_gpu.envs.cartpole:CartPoleEnv"]),
       flags=st.dictionaries(st.sampled_from(sorted(FLAGS)), st.none(), max_size=4).flatmap(
           lambda chosen: st.fixed_dictionaries({k: FLAGS[k] for k in chosen})))
def test_train_flags(tmp_path_factory, env, flags):
    root = tmp_path_factory.mktemp("flags")
    out = root / "out"
    argv = ["train", "--env", env, "--device", "cpu", "--output", str(out), "--quiet", *SMALL]
    for flag, value in flags.items():
        argv += [flag, *map(str, value)] if isinstance(value, list) else [flag, str(value)]
    before = _files(root)
    _check(root, out, before, *run_cli(*argv))


KEYS = ["env", "seeds", "num_envs", "num_steps", "learning_rate", "anneal_lr", "hidden_sizes", "max_updates",
        "min_updates", "eval_every", "eval_episodes", "final_eval_episodes", "solve_threshold", "success_z",
        "threads", "device", "compile", "overwrite", "resume", "output", "ppo", "seed", "run_environment",
        "learning_rat", "gama", "total_timesteps", "algo"]
JSON_VALUE = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
              st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)
PPO_SECTION = st.dictionaries(st.sampled_from(["gamma", "gae_lambda", "clip_coef", "ent_coef", "num_minibatches",
                                               "update_epochs", "target_kl", "norm_reward", "gama"]),
                              JSON_VALUE, max_size=3)


@settings(FUZZ, max_examples=150)
@example(base={"env": "CartPole-v1"}, changes={"ppo": {"gamma": -1}}, text=None)  # found: a bare ValueError
@given(base=st.sampled_from([{}, {"env": "CartPole-v1", "solve_threshold": 475.0},
                             {"env": "RussianRoulette-v0"}]),
       changes=st.dictionaries(st.sampled_from(KEYS), st.one_of(JSON_VALUE, PPO_SECTION), max_size=4),
       text=st.one_of(st.none(), st.text(max_size=30), st.sampled_from(["[]", "{", "null", "\udcff"])))
def test_train_config_files(tmp_path_factory, base, changes, text):
    root = tmp_path_factory.mktemp("config")
    out = root / "out"
    path = root / "config.json"
    data = {"num_envs": 8, "num_steps": 16, "eval_episodes": 8, "final_eval_episodes": 8, "max_updates": 2,
            "min_updates": 1, "device": "cpu", "ppo": {"num_minibatches": 2}, **base, **changes}
    if text is None:
        path.write_text(json.dumps(data))
    else:
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
    before = _files(root)
    _check(root, out, before, *run_cli("train", "--config", str(path), "--output", str(out), "--quiet"))
