"""Every flag used or refused (issue 37, item 5): the table of which training flags apply when
(rl_gpu/cli/flag_modes.py) covers every flag the parser has, for every algorithm; a flag given where it does
nothing is refused in one line before anything is written."""

import dataclasses

import pytest

from rl_gpu.algos.registry import algorithm_names, algorithm_spec
from rl_gpu.cli.flag_modes import EVERY_MODE, NEEDS, check_flags_apply, flag_field
from rl_gpu.cli.presets import preset_config
from rl_gpu.cli.train import flags_of, main
from rl_gpu.training.config import TrainConfig

BASE = ["--device", "cpu", "--num-envs", "8", "--max-updates", "1", "--quiet"]
SAMPLE = {"snapshot_every": "3", "pool_size": "3", "pfsp": "hard", "latest_share": "0.3", "baseline_share": "0.1",
          "pbt_interval": "5", "memory_size": "16", "lr_step_every": "0.5", "lr_step_gamma": "0.3",
          "desired_kl": "0.02", "track_project": "p", "track_name": "n", "track_tags": "t",
          "mlflow_uri": "sqlite:///x.db"}
SWITCH_ON = {"uses_memory": {"memory": "gru"}, "steps_lr": {"lr_schedule": "step"},
             "adapts_lr": {"lr_schedule": "adaptive-kl"}, "track": {"track": ("wandb",)},
             "tracks_mlflow": {"track": ("mlflow",)}}
"""Settings that a property of the configuration reads (the others are boolean fields: True)."""


def _flag(field):
    return "--" + field.replace("_", "-")


@pytest.mark.parametrize("algo", algorithm_names())
def test_the_table_declares_every_flag_of_the_parser(algo):
    view = flags_of(algo)
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    parser_fields = {f.name for f in dataclasses.fields(view)} - {algo}
    undeclared = sorted(parser_fields & train_fields - EVERY_MODE - set(NEEDS))
    assert not undeclared, f"declare these flags in rl_gpu/cli/flag_modes.py: {undeclared}"
    spec = algorithm_spec(algo)
    section = {f.name: f for f in dataclasses.fields(spec.config_class())}
    for field, switch in spec.flag_needs:
        assert field in section and section[switch].type in (bool, "bool"), (field, switch)
    assert set(spec.ignores) <= train_fields | set(section)


@pytest.mark.parametrize("field", sorted(NEEDS))
def test_a_flag_without_the_setting_it_needs_is_refused(call_main, tmp_path, field):
    needed, switch = NEEDS[field]
    value = [SAMPLE[field]] if field in SAMPLE else []
    code, _, err = call_main(main, *BASE, "--env", "CartPole-v1", "--output", tmp_path / "run", _flag(field), *value)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{_flag(field)} applies only with {switch}" in err or f"give {switch} too" in err, err
    assert not (tmp_path / "run").exists()
    # With its setting on, the flag is used: the table lets it through.
    on = dataclasses.replace(preset_config("RussianRoulette-v0"), **SWITCH_ON.get(needed, {needed: True}),
                             **({"parallel": True} if needed == "pbt" else {}),
                             **({"seeds": (1, 2, 3, 4)} if needed in ("pbt", "parallel") else {}))
    check_flags_apply([_flag(field)], on)


@pytest.mark.parametrize("args,needle", [
    (["--env", "CartPole-v1", "--norm-reward-clip", "5"], "--norm-reward-clip applies only with --norm-reward (--algo ppo), which is off"),
    (["--algo", "sac", "--env", "Pendulum-v1", "--no-autotune", "--target-entropy", "-2"],
     "--target-entropy applies only with --autotune (--algo sac)"),
    (["--algo", "neurd", "--env", "RussianRoulette-v0", "--num-envs", "64"], "--algo neurd does not use --num-envs"),
    (["--env", "CartPole-v1", "--output", ""], "--output is empty"),
])
def test_algorithm_flags_and_empty_values_are_checked(call_main, tmp_path, args, needle):
    code, _, err = call_main(main, *BASE, *args)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_a_used_algorithm_flag_passes():
    config = preset_config("CartPole-v1")
    on = dataclasses.replace(config, algo_params=dataclasses.replace(config.algo_params, norm_reward=True))
    check_flags_apply(["--norm-reward", "--norm-reward-clip"], on)
    assert flag_field("--no-anneal-lr") == "anneal_lr"


def test_bench_refuses_a_negative_seed(call_main, tmp_path):
    from rl_gpu.cli.bench import main as bench

    code, _, err = call_main(bench, "--env", "CartPole-v1", "--seed", "-1", "--output", tmp_path / "b.json")
    assert code == 2 and "--seed must be between 0 and 2**63 - 1" in err, err


def test_a_value_of_thousands_of_characters_is_shown_by_its_start(call_main, tmp_path):
    code, _, err = call_main(main, *BASE, "--env", "CartPole-v1", "--num-envs", "9" * 5000)
    assert code == 2 and "(5,002 characters) is not a whole number" in err and len(err) < 300, err


@pytest.mark.parametrize("flag,value", [("--seeds", "3"), ("--output", "elsewhere"), ("--overwrite", None)])
def test_flags_a_resume_has_no_use_for_are_refused(call_main, tmp_path, flag, value):
    code, _, err = call_main(main, *BASE, "--env", "CartPole-v1", "--eval-episodes", "4", "--final-eval-episodes",
                             "4", "--output", tmp_path / "run")
    assert code == 1, err
    run = tmp_path / "run" / "seed-11"
    before = (run / "last.pt").read_bytes()
    code, _, err = call_main(main, "--resume", run, "--max-updates", "2", flag, *([value] if value else []))
    assert code == 2 and f"{flag} does not apply with --resume" in err and len(err.strip().splitlines()) == 1, err
    assert (run / "last.pt").read_bytes() == before
