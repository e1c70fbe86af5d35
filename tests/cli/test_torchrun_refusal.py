"""Under torchrun every rank refuses bad input alike; only rank 0 prints the one line, all exit with code 2."""

import pytest

from rl_gpu.cli.parsing import fail


@pytest.mark.parametrize(("rank", "printed"), [("0", True), ("1", False), ("7", False)])
def test_only_rank_0_prints_a_refusal(monkeypatch, capsys, rank, printed):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    monkeypatch.setenv("RANK", rank)
    with pytest.raises(SystemExit) as info:
        fail("rl-gpu train", "--num-envs must be a positive integer, got 0")
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert (err == "rl-gpu train: error: --num-envs must be a positive integer, got 0\n") == printed, err
    assert printed or err == ""


def test_without_torchrun_every_process_prints(monkeypatch, capsys):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setenv("RANK", "3")  # a RANK alone (another launcher's) is not torchrun's
    with pytest.raises(SystemExit):
        fail("rl-gpu train", "bad")
    assert capsys.readouterr().err == "rl-gpu train: error: bad\n"
