"""``rl-gpu plot``: learning curves from metrics.jsonl, seeds aggregated, bad input refused in one line."""

import json

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from rl_gpu.__main__ import main as rl_gpu_main  # noqa: E402
from rl_gpu.cli.plot import (  # noqa: E402
    aggregate,
    find_runs,
    group_runs,
    numeric_metrics,
    read_metrics,
    series,
    smooth,
)

PNG = b"\x89PNG\r\n\x1a\n"


def _write_run(run_dir, seed, updates=30, steps_per_update=1000, validate_every=10, torn=False):
    run_dir.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    lines = []
    for update in range(1, updates + 1):
        record = {"update": update, "global_step": update * steps_per_update, "time": 0.1 * update,
                  "episodes": 0 if update == 2 else 4, "episode_return": float(update + rng.normal()),
                  "train_win_rate": 0.5, "loss": 1.0 / update, "entropy": 0.7, "approx_kl": 0.01}
        if update % validate_every == 0:
            record["validation"] = {"score": update / updates, "passed": True, "streak": 1}
        lines.append(json.dumps(record))
    text = "\n".join(lines) + "\n" + ('{"update": 31, "glo' if torn else "")
    (run_dir / "metrics.jsonl").write_text(text)


def test_seed_runs_are_one_group_and_other_runs_their_own(tmp_path):
    for seed in (1, 2, 3):
        _write_run(tmp_path / "exp" / f"seed-{seed}", seed)
    _write_run(tmp_path / "baseline", 9, torn=True)
    runs = find_runs([tmp_path / "exp", tmp_path / "baseline", tmp_path / "exp" / "seed-1"])
    assert [r.name for r in runs] == ["seed-1", "seed-2", "seed-3", "baseline"]
    groups = group_runs(runs)
    assert list(groups) == ["exp", "baseline"] and len(groups["exp"]) == 3
    baseline = read_metrics(tmp_path / "baseline")
    assert baseline.skipped_lines == 1 and len(baseline.records) == 30
    x, _ = series(baseline, "episode_return")
    assert x.size == 29 and 2000.0 not in x  # the update that ended no episode has no return
    x, _ = series(baseline, "validation.score")
    assert x.tolist() == [10000.0, 20000.0, 30000.0]


def test_aggregate_mean_and_band_over_the_whole_budget():
    a = (np.array([0.0, 10.0, 20.0]), np.array([0.0, 1.0, 2.0]))  # stopped early, at step 20
    b = (np.array([5.0, 15.0, 30.0]), np.array([2.0, 3.0, 4.0]))
    steps, mean, low, high = aggregate([a, b], "minmax")
    assert steps[0] == 5.0 and steps[-1] == 30.0  # not cut at the first seed to stop
    np.testing.assert_allclose(mean, (np.interp(steps, *a) + np.interp(steps, *b)) / 2)
    late = steps > 20.0
    assert late.any() and (low[late] == 2.0).all()  # the stopped seed holds its last value
    np.testing.assert_allclose(mean[steps == 30.0], [3.0])
    assert (low <= mean).all() and (mean <= high).all()
    _, mean_s, low_s, high_s = aggregate([a, b], "std")
    np.testing.assert_allclose(high_s - mean_s, mean_s - low_s)
    np.testing.assert_allclose(smooth(np.array([1.0, 3.0, 5.0, 7.0]), 2), [1.0, 2.0, 4.0, 6.0])


def test_cli_writes_a_png(tmp_path, capsys):
    for seed in (1, 2):
        _write_run(tmp_path / "exp" / f"seed-{seed}", seed)
    _write_run(tmp_path / "other", 5, updates=12, steps_per_update=2500)
    out = tmp_path / "figs" / "curves.png"
    code = rl_gpu_main(["plot", str(tmp_path / "exp"), str(tmp_path / "other"), "--output", str(out),
                        "--band", "std", "--smooth", "3", "--title", "test"])
    assert code == 0
    assert out.read_bytes().startswith(PNG)
    assert "episode_return, validation.score" in capsys.readouterr().out
    single = tmp_path / "single.png"
    assert rl_gpu_main(["plot", str(tmp_path / "exp" / "seed-1"), "--output", str(single),
                        "--metric", "loss", "entropy"]) == 0
    assert single.read_bytes().startswith(PNG)


@pytest.mark.parametrize("setup, args, needle", [
    ("none", ["missing"], "no such directory"),
    ("empty-dir", ["empty"], "no metrics.jsonl"),
    ("empty-file", ["run"], "no metrics recorded"),
    ("run", ["run", "--metric", "nope"], "no run has metric 'nope'; available:"),
    ("run", [], "at least one run directory"),
    ("run", ["run", "--smooth", "0"], "--smooth"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, monkeypatch, capsys, setup, args, needle):
    monkeypatch.chdir(tmp_path)
    if setup == "empty-dir":
        (tmp_path / "empty").mkdir()
    elif setup == "empty-file":
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "metrics.jsonl").write_text("\n")
    elif setup == "run":
        _write_run(tmp_path / "run", 0)
    with pytest.raises(SystemExit) as exit_info:
        rl_gpu_main(["plot", *args, "--output", "out.png"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rl-gpu plot: error:") and needle in err and "\n" not in err
    assert not (tmp_path / "out.png").exists()


def _plot_error(args, capsys):
    with pytest.raises(SystemExit) as exit_info:
        rl_gpu_main(["plot", *args])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err.startswith("rl-gpu plot: error:") and "\n" not in err, err
    return err


def test_hostile_metric_lines_are_skipped(tmp_path, capsys):
    _write_run(tmp_path / "run", 0, updates=12)
    hostile = [b"\xff\xfe not utf-8", b'{"update": 13, "global_step": 1' + b"0" * 5000 + b', "episodes": 1}',
               b'{"update": 14, "global_step": 14000, "episodes": 1, "episode_return": ' + b"9" * 400 + b"}",
               b"[" * 100000 + b"]" * 100000, b'{"a":' * 5000 + b"1" + b"}" * 5000, b"[1, 2]", b"42", b'"text"',
               b'{"update": 16, "nested": ' + b'{"a": ' * 500 + b"1" + b"}" * 501,
               b'{"update": 15, "global_step": "soon", "episode_return": 1.0, "episodes": 1}']
    with open(tmp_path / "run" / "metrics.jsonl", "ab") as f:
        f.write(b"\n".join(hostile) + b"\n")
    run = read_metrics(tmp_path / "run")
    assert len(run.records) == 12 + 3 and run.skipped_lines == len(hostile) - 3
    assert "nested.a.a.a" not in str(numeric_metrics([run]))  # deeper than MAX_DEPTH: not a metric
    x, y = series(run, "episode_return")
    # The 400-digit return is too large for a float and the step that is a string is not a step: both left out.
    assert x.size == 11 and np.isfinite(y).all()
    out = tmp_path / "out.png"
    assert rl_gpu_main(["plot", str(tmp_path / "run"), "--output", str(out)]) == 0
    assert out.read_bytes().startswith(PNG)


@pytest.mark.parametrize("title", [r"$\frac{1", "cost in $ and $$", r"$x^{", "\\", "ok $x$"])
def test_titles_and_run_names_are_drawn_literally(tmp_path, capsys, title):
    _write_run(tmp_path / "a$b_{" / "seed-1", 0, updates=5)
    out = tmp_path / "t.png"
    assert rl_gpu_main(["plot", str(tmp_path / "a$b_{"), "--output", str(out), "--title", title]) == 0
    assert out.read_bytes().startswith(PNG)


def test_default_metric_follows_the_kind_of_run(tmp_path, capsys):
    game = tmp_path / "roulette" / "seed-11"
    game.mkdir(parents=True)
    lines = [{"update": u, "global_step": 640 * u, "episodes": 64, "train_win_rate": 0.4 + 0.01 * u, "loss": 1.0,
              **({"validation": {"score": 0.5, "passed": False}} if u % 5 == 0 else {})} for u in range(1, 11)]
    (game / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "game.png"
    assert rl_gpu_main(["plot", str(tmp_path / "roulette"), "--output", str(out)]) == 0
    assert "(train_win_rate, validation.score)" in capsys.readouterr().out
    _write_run(tmp_path / "single", 1)
    (tmp_path / "single" / "metrics.jsonl").write_text("".join(
        json.dumps({k: v for k, v in json.loads(line).items() if k != "train_win_rate"}) + "\n"
        for line in (tmp_path / "single" / "metrics.jsonl").read_text().splitlines()))
    assert rl_gpu_main(["plot", str(tmp_path / "single"), str(game), "--output", str(out)]) == 0
    assert "(episode_return, train_win_rate, validation.score)" in capsys.readouterr().out
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "metrics.jsonl").write_text('{"update": 1, "global_step": 5, "loss": 0.5}\n')
    assert "choose with --metric from: loss" in _plot_error([str(bare), "--output", str(out)], capsys)


def test_a_batch_of_tasks_plots_each_tasks_curve(tmp_path, capsys):
    run = tmp_path / "tasks" / "seed-1"
    run.mkdir(parents=True)
    lines = [{"update": u, "global_step": 100 * u, "episodes": 3, "episode_return": float(u),
              **{f"task/{k}/return": float(u * k) for k in (0, 2, 10)}} for u in range(1, 6)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "tasks.png"
    assert rl_gpu_main(["plot", str(run), "--output", str(out)]) == 0
    assert "(episode_return, task/0/return, task/2/return, task/10/return)" in capsys.readouterr().out
    assert out.read_bytes().startswith(PNG)


def test_outputs_that_are_not_ours_are_refused(tmp_path, capsys):
    _write_run(tmp_path / "run", 0, updates=5)
    metrics = tmp_path / "run" / "metrics.jsonl"
    before = metrics.read_bytes()
    assert "is the input" in _plot_error([str(tmp_path / "run"), "--output", str(metrics)], capsys)
    assert "character device" in _plot_error([str(tmp_path / "run"), "--output", "/dev/null"], capsys)
    (tmp_path / "fig.png").mkdir()
    assert "directory" in _plot_error([str(tmp_path / "run"), "--output", str(tmp_path / "fig.png")], capsys)
    assert "image format" in _plot_error([str(tmp_path / "run"), "--output", str(tmp_path / "f.txt")], capsys)
    assert metrics.read_bytes() == before and not (tmp_path / "f.txt").exists()
