"""``rl-gpu train --env vmas:<scenario> --algo mappo|ippo`` as a user runs it: a short run end to end (train,
evaluate with a video, export one shared actor, load, resume), and what cannot work refused in one line."""

import json

import pytest
import torch

pytest.importorskip("vmas")

from rl_gpu.cli.evaluate import main as evaluate_main  # noqa: E402
from rl_gpu.cli.export import main as export_main  # noqa: E402
from rl_gpu.cli.train import main  # noqa: E402
from rl_gpu.interop.policy_io import load_policy  # noqa: E402

from cli_call import call_main  # noqa: E402

TINY = ["--env", "vmas:navigation", "--device", "cpu", "--num-envs", "4", "--num-steps", "10", "--max-updates", "2",
        "--min-updates", "1", "--eval-every", "2", "--eval-episodes", "4", "--final-eval-episodes", "4",
        "--hidden-sizes", "16", "--num-minibatches", "2", "--update-epochs", "1", "--seeds", "3"]


def test_a_short_mappo_run_trains_evaluates_films_exports_and_resumes(tmp_path):
    out = tmp_path / "nav"
    code, text, err = call_main(main, "--algo", "mappo", *TINY, "--output", out)
    assert code == 0, err
    run_dir = out / "seed-3"
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["algo"] == "mappo" and "mappo" in saved and "ppo" not in saved
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in lines if "loss" in r] == [40, 80]  # N worlds x T steps per update
    video = tmp_path / "nav.mp4"
    code, text, err = call_main(evaluate_main, run_dir / "best.pt", "--episodes", "4", "--video", video,
                                "--video-steps", "3")
    assert code == 0, err
    assert "video:" in text and "4 frames (3 steps" in text and video.stat().st_size > 0
    onnx = tmp_path / "actor.onnx"
    code, text, err = call_main(export_main, run_dir / "best.pt", "--output", onnx)
    assert code == 0, err
    assert "obs [N, 18]" in text  # one actor for every agent: one agent's observation in, its action out
    policy, _ = load_policy(run_dir / "best.pt")
    assert policy.act(torch.zeros(5, 18), deterministic=True).action.shape == (5, 2)
    code, _, err = call_main(main, "--resume", run_dir, "--max-updates", "3")
    assert code == 0, err
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in lines if "loss" in r] == [1, 2, 3]


def test_a_world_critic_trains_loads_and_resumes(tmp_path):
    out = tmp_path / "nav"
    code, text, err = call_main(main, "--algo", "mappo", "--world-critic", *TINY, "--output", out)
    assert code == 0, err
    run_dir = out / "seed-3"
    assert json.loads((run_dir / "config.json").read_text())["mappo"]["world_critic"] is True
    policy, _ = load_policy(run_dir / "best.pt")
    assert policy.config()["world_agents"] == 4 and policy.critic[-1].out_features == 4  # a value head per agent
    assert policy.act(torch.zeros(5, 18), deterministic=True).action.shape == (5, 2)
    code, _, err = call_main(main, "--resume", run_dir, "--max-updates", "3")
    assert code == 0, err
    code, text, err = call_main(evaluate_main, run_dir / "last.pt", "--episodes", "4")
    assert code == 0, err


@pytest.mark.slow  # suite time; tests/algos/test_population_mappo.py checks each member against its lone update
def test_seeds_in_parallel_each_keep_a_lone_runs_files_and_resume_alone(tmp_path):
    out = tmp_path / "nav"
    args = [a if a != "3" else "4" for a in TINY]  # --seeds 4 5
    code, text, err = call_main(main, "--algo", "mappo", *args, "5", "--parallel", "--output", out)
    assert code == 0, err
    assert "population of 2 members (seeds " in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["parallel"] is True
    for seed in (4, 5):
        lines = [json.loads(x) for x in (out / f"seed-{seed}" / "metrics.jsonl").read_text().splitlines()]
        updates = [r for r in lines if "loss" in r]
        assert [r["global_step"] for r in updates] == [40, 80]  # each member's own 4 worlds x 10 steps
        policy, _ = load_policy(out / f"seed-{seed}" / "best.pt")
        assert policy.act(torch.zeros(3, 18), deterministic=True).action.shape == (3, 2)
    code, _, err = call_main(main, "--resume", out / "seed-4", "--max-updates", "3")
    assert code == 0, err


@pytest.mark.parametrize("args, needles", [
    (["--algo", "ppo", "--env", "vmas:navigation"], ["4 agents acting at once", "--algo mappo", "ippo"]),
    (["--algo", "mappo", "--env", "CartPole-v1"], ["one agent per row", "--algo ppo"]),
    (["--algo", "mappo", "--env", "vmas:no_such_scenario"], ["no such VMAS scenario", "navigation"]),
    (["--algo", "mappo", "--env", "vmas:navigation", "--compile", "cudagraphs"], ["--compile cudagraphs"]),
    (["--algo", "mappo", "--env", "vmas:navigation", "--parallel", "--no-share-params", "--seeds", "1", "2"],
     ["--parallel", "--no-share-params"]),
    (["--algo", "mappo", "--env", "vmas:navigation", "--parallel", "--world-critic", "--seeds", "1", "2"],
     ["--world-critic", "--parallel"]),
    (["--algo", "ippo", "--env", "vmas:navigation", "--world-critic"], ["--algo mappo or drop --world-critic"]),
    (["--algo", "ppo", "--env", "CartPole-v1", "--world-critic"], ["--world-critic"]),
])
def test_what_cannot_work_is_one_line_exit_2(tmp_path, args, needles):
    out = tmp_path / "never"
    code, _, err = call_main(main, *args, "--output", out, "--device", "cpu", "--max-updates", "1",
                            "--min-updates", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not out.exists()


def test_one_network_per_agent_trains_evaluates_exports_one_file_per_agent_loads_and_resumes(tmp_path):
    out = tmp_path / "nav"
    two_agents = [a if a != "vmas:navigation" else "vmas:navigation?n_agents=2" for a in TINY]
    code, text, err = call_main(main, "--algo", "ippo", *two_agents, "--no-share-params", "--output", out)
    assert code == 0, err
    run_dir = out / "seed-3"
    assert json.loads((run_dir / "config.json").read_text())["ippo"]["share_params"] is False
    code, text, err = call_main(evaluate_main, run_dir / "best.pt", "--episodes", "4")
    assert code == 0, err
    onnx = tmp_path / "actor.onnx"
    code, text, err = call_main(export_main, run_dir / "best.pt", "--output", onnx)
    assert code == 0, err
    files = [tmp_path / "actor.agent0.onnx", tmp_path / "actor.agent1.onnx"]
    assert all(f.stat().st_size > 0 for f in files) and not onnx.exists(), text
    assert "one per agent" in text
    # Each file is its agent's actor: onnxruntime gives what the loaded policy does for that agent.
    ort = pytest.importorskip("onnxruntime")
    import rl_gpu

    loaded = rl_gpu.load(run_dir / "best.pt")
    obs = torch.randn(5, 2, loaded.obs_dim)
    actions = loaded.act(obs)
    assert actions.shape == (5, 2, 2)
    for m, f in enumerate(files):
        session = ort.InferenceSession(str(f), providers=["CPUExecutionProvider"])
        got = session.run(None, {session.get_inputs()[0].name: obs[:, m].numpy()})[0]
        torch.testing.assert_close(torch.from_numpy(got), actions[:, m], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"obs must have shape \[N, 2, 18\]"):
        loaded.act(torch.zeros(5, 18))
    code, _, err = call_main(main, "--resume", run_dir, "--max-updates", "3")
    assert code == 0, err
