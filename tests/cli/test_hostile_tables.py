"""One hostile-input table per command, built from its parser (issue 37): every flag of train (for each
algorithm), evaluate, export, bench and plot gets the values its type can never take (words for numbers, a
5000-digit integer, nan and inf, an unknown choice, an empty path, a boolean given a value); each is refused in
one line, exit 2, no traceback, nothing written. A new flag joins the table by itself."""

import dataclasses
import types
import typing
from pathlib import Path

import pytest

from rl_gpu.algos.registry import algorithm_names, algorithm_spec
from rl_gpu.cli import bench, evaluate, export, plot, train

HUGE_INT = "9" * 5000


def _base(annotation):
    """The flag's value type: ``int | None`` -> int; ``tuple[int, ...]`` -> int; Literal kept."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _base(args[0]) if len(args) == 1 else annotation
    if origin in (tuple, list):
        return _base(typing.get_args(annotation)[0])
    if origin is typing.Annotated:
        return _base(typing.get_args(annotation)[0])
    return annotation


def _hostile(annotation) -> list[str]:
    base = _base(annotation)
    if base is bool:
        return []  # switches: --flag / --no-flag take no value (a value is the next flag's problem)
    if base is int:
        return ["abc", "1.5", HUGE_INT]
    if base is float:
        return ["abc", "nan", "inf"]
    if typing.get_origin(base) is typing.Literal:
        return ["no-such-choice"]
    if base is Path:
        return [""]
    return []


def _flags(cls) -> list[tuple[str, str]]:
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for field in dataclasses.fields(cls):
        if field.name in ("algo_params", "config", "resume", "checkpoint"):
            continue  # read before parsing or positional: their own tests (test_train_inputs, test_evaluate)
        for value in _hostile(hints[field.name]):
            out.append(("--" + field.name.replace("_", "-"), value))
    return out


COMMANDS = {
    "train": (train.main, ["--env", "CartPole-v1", "--device", "cpu"], train.TrainConfig),
    "evaluate": (evaluate.main, ["--checkpoint", "missing.pt"], evaluate.EvaluateConfig),
    "export": (export.main, ["--checkpoint", "missing.pt", "--output", "p.onnx"], export.ExportConfig),
    "bench": (bench.main, ["--measure", "env", "--env", "CartPole-v1"], bench.BenchConfig),
    "plot": (plot.main, ["--output", "p.png", "missing"], plot.PlotConfig),
}
CASES = [(name, flag, value) for name, (_, _, cls) in COMMANDS.items() for flag, value in _flags(cls)]
for _algo in algorithm_names():  # each algorithm's own section (flags without a prefix)
    _section = algorithm_spec(_algo).config_class()
    _hints = typing.get_type_hints(_section, include_extras=True)
    CASES += [(f"train --algo {_algo}", f"--{f.name.replace('_', '-')}", value) for f in dataclasses.fields(_section)
              for value in _hostile(_hints[f.name])]
    COMMANDS.setdefault(f"train --algo {_algo}", (train.main, ["--env", "CartPole-v1", "--algo", _algo], None))


@pytest.mark.parametrize("command,flag,value", CASES, ids=[f"{c} {f} {v[:8]}" for c, f, v in CASES])
def test_a_value_its_type_can_never_take_is_one_line(call_main, tmp_path, monkeypatch, command, flag, value):
    monkeypatch.chdir(tmp_path)
    main, base, _ = COMMANDS[command]
    code, out, err = call_main(main, *base, flag, value)
    assert code == 2, (code, err[-500:])
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and lines[0].startswith(f"rl-gpu {command.split()[0]}: error:"), err
    assert len(lines[0]) < 400, lines[0]
    assert list(tmp_path.iterdir()) == [], "nothing is written"


def test_the_table_covers_every_command_and_many_flags():
    assert {c for c, _, _ in CASES} == set(COMMANDS) and len(CASES) > 200
