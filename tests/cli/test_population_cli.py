"""``rl-gpu train --parallel`` (and ``--pbt``), in process: each seed writes a lone run's files, the seeds'
aggregate is written and printed, a member resumes alone, and what a population cannot run is refused."""

import contextlib
import io
import json

import pytest

from rl_gpu.cli.train import main

TINY = ["--env", "CartPole-v1", "--num-envs", "8", "--num-steps", "16", "--num-minibatches", "2",
        "--update-epochs", "1", "--hidden-sizes", "16", "16", "--eval-every", "1", "--eval-episodes", "4",
        "--final-eval-episodes", "4", "--quiet"]


def call(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def refused(args, needle):
    code, out, err = call(*args)
    assert code == 2, (code, out, err)
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("rl-gpu train: error: ") and needle in lines[0], err


@pytest.fixture(scope="module")
def population_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pop") / "run"
    code, stdout, err = call(*TINY, "--parallel", "--seeds", "1", "2", "--max-updates", "1", "--output", str(out))
    assert code in (0, 1), (code, stdout, err)
    return out, stdout


def test_parallel_seeds_write_lone_run_files_and_the_aggregate(population_run):
    out, stdout = population_run
    for seed in (1, 2):
        run = out / f"seed-{seed}"
        assert {"config.json", "metrics.jsonl", "last.pt", "best.pt", "summary.json"} <= {p.name for p in
                                                                                         run.iterdir()}
        assert json.loads((run / "config.json").read_text())["seed"] == seed
        updates = [json.loads(line).get("update") for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert 1 in updates
        assert json.loads((run / "summary.json").read_text())["final_evaluation"]["best"]["episodes"] == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["parallel"] is True and summary["num_seeds"] == 2
    assert {"mean", "median", "iqm", "iqm_ci95", "successes"} <= set(summary)
    assert "across 2 seeds" in stdout and "IQM" in stdout


def test_a_parallel_member_resumes_alone(population_run):
    out, _ = population_run
    code, stdout, err = call("--resume", str(out / "seed-2"), "--max-updates", "2", "--quiet")
    assert code in (0, 1), (code, stdout, err)
    updates = [json.loads(line).get("update") for line in (out / "seed-2" / "metrics.jsonl").read_text().splitlines()]
    assert 2 in updates
    refused(["--resume", str(out / "seed-1"), "--parallel"], "--resume continues one seed alone")


@pytest.mark.slow
def test_pbt_writes_its_lineage_and_its_members_do_not_resume_alone(tmp_path):
    out = tmp_path / "pbt"
    code, stdout, err = call(*TINY, "--parallel", "--pbt", "--pbt-interval", "1", "--seeds", "1", "2", "3", "4",
                             "--max-updates", "2", "--output", str(out))
    assert code in (0, 1), (code, stdout, err)
    lineage = json.loads((out / "pbt.json").read_text())
    assert lineage["seeds"] == [1, 2, 3, 4] and len(lineage["initial"]) == 4
    assert [r["iteration"] for r in lineage["rounds"]] == [1, 2]
    assert all(len(r["exploits"]) == 1 for r in lineage["rounds"])
    refused(["--resume", str(out / "seed-1"), "--max-updates", "3"], "a --pbt member")


def test_population_of_an_off_policy_algorithm_is_refused(tmp_path):
    refused(["--env", "Pendulum-v1", "--algo", "sac", "--parallel", "--seeds", "1", "2", "--output",
             str(tmp_path / "r")], "--parallel trains populations of PPO or MAPPO or IPPO only")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("args, needle", [
    (["--pbt", "--seeds", "1", "2", "3", "4"], "--pbt trains a population: give --parallel too"),
    (["--parallel", "--pbt", "--seeds", "1", "2"], "--pbt needs at least 4 seeds"),
    (["--parallel", "--compile", "inductor", "--seeds", "1", "2"], "--parallel runs eagerly"),
    (["--parallel", "--pbt-interval", "0"], "--pbt-interval must be a positive integer"),
])
def test_population_refusals(tmp_path, args, needle):
    refused([*TINY, *args, "--output", str(tmp_path / "r")], needle)
    assert not (tmp_path / "r").exists()
