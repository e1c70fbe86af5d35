"""Integer flags take whole numbers written as an SB3 user writes them (``--total-timesteps 1e6``); a number that
is not whole is refused in one line."""

import pytest

from rl_gpu.cli.parsing import whole_number
from rl_gpu.cli.train import _defaults, _parse


@pytest.mark.parametrize(("text", "value"), [("1000000", 10**6), ("1e6", 10**6), ("2.5e5", 250_000),
                                             ("300000.0", 300_000), ("-1e3", -1000), ("1E15", 10**15)])
def test_whole_numbers(text, value):
    assert whole_number(text) == value and type(whole_number(text)) is int


@pytest.mark.parametrize("text", ["1.5", "nan", "inf", "1e999", "abc", "", "0x10"])
def test_other_numbers_are_refused(text):
    with pytest.raises(ValueError):
        whole_number(text)


def test_train_flags_take_them(capsys):
    args = ["--env", "CartPole-v1", "--total-timesteps", "1e6", "--num-envs", "1.6e1", "--seeds", "1e1", "2"]
    default, _, source = _defaults(args)
    config = _parse(args, default, source)
    assert (config.total_timesteps, config.num_envs, config.seeds) == (10**6, 16, (10, 2))
    with pytest.raises(SystemExit) as info:
        _parse(["--total-timesteps", "1.5"], default, source)
    assert info.value.code == 2 and "'1.5' is not a whole number" in capsys.readouterr().err
