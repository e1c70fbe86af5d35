"""benchmarks/purejaxrl_compare.py says what is missing, and exits 2, before it measures anything."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "purejaxrl_compare.py"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), "train", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_a_folder_without_purejaxrl_is_refused(tmp_path):
    out = _run(str(tmp_path), "--jax-python", sys.executable)
    assert out.returncode == 2
    assert "has no ppo.py and no wrappers.py" in out.stderr and "PureJaxRL checkout" in out.stderr


@pytest.mark.skipif(importlib.util.find_spec("jax") is not None, reason="this environment has JAX")
def test_an_interpreter_without_jax_is_refused_with_the_install_line(tmp_path):
    for name in ("ppo.py", "wrappers.py"):
        (tmp_path / name).write_text("")
    out = _run(str(tmp_path), "--jax-python", sys.executable)
    assert out.returncode == 2
    assert "cannot import jax" in out.stderr
    assert "pip install jax flax optax distrax chex six gymnax==0.0.9" in out.stderr


def test_a_missing_interpreter_is_refused(tmp_path):
    for name in ("ppo.py", "wrappers.py"):
        (tmp_path / name).write_text("")
    out = _run(str(tmp_path), "--jax-python", str(tmp_path / "no-python"))
    assert out.returncode == 2 and "no Python interpreter" in out.stderr and "--jax-python" in out.stderr


def test_the_minatar_side_by_sides_permutation_test_tells_apart_only_what_differs():
    module = _minatar_module()
    same = [6.0, 6.5, 6.0, 8.7, 6.5]
    assert module.permutation_p(same, list(reversed(same)), rounds=2000) == 1.0
    apart = module.permutation_p([1.0, 1.1, 1.2, 1.3, 1.4], [5.0, 5.1, 5.2, 5.3, 5.4], rounds=2000)
    assert apart < 0.02   # 2 of the 252 splits are as far apart: p = 0.008
    # The 10 Breakout seeds of benchmarks/README.md (row c'): the script's p for them.
    ours = [5.98, 6.49, 5.98, 6.48, 6.49, 8.64, 5.96, 5.97, 5.99, 8.86]
    theirs = [6.44, 6.44, 6.47, 6.48, 5.97, 5.97, 5.96, 8.92, 6.49, 6.48]
    assert 0.6 < module.permutation_p(ours, theirs) < 0.8


def test_a_compiled_runs_compile_time_is_its_first_updates_excess(tmp_path):
    """rl_gpu's compile is timed apart as PureJaxRL's is: the first update's time beyond the median update's."""
    module = _minatar_module()
    lines = [{"update": 0, "validation": {"score": 0.0}},
             {"update": 1, "collect_seconds": 6.0, "update_seconds": 7.0},
             *({"update": u, "collect_seconds": 0.2, "update_seconds": t} for u, t in ((2, 0.3), (3, 0.4), (4, 0.2)))]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert module.compile_seconds(metrics) == pytest.approx(13.0 - 0.5)
    metrics.write_text(json.dumps(lines[1]) + "\n")  # one update: nothing to tell the compile from
    assert module.compile_seconds(metrics) == 0.0


def _minatar_module():
    spec = importlib.util.spec_from_file_location("purejaxrl_minatar", SCRIPT.parent / "purejaxrl_minatar.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("corrupt", [None, "reward", "done", "obs"])
def test_the_minatar_game_check_refuses_the_first_difference(tmp_path, monkeypatch, capsys, corrupt):
    """The check before SpaceInvaders' side by side compares every observation, reward and episode end with what
    the JAX side saved; here the JAX side is replaced by rl_gpu's own env (equal: it passes), then by that with
    one value changed (it exits 2 naming the step)."""
    import argparse

    import numpy as np
    import torch

    from rl_gpu.envs.registry import make

    module = _minatar_module()
    for driver in (module.MINATAR_RULES, module.CHECK_DRIVER, module.JAX_DRIVER):
        compile(driver, "<jax side>", "exec")

    def fake_run_jax(python, core, driver, payload):
        assert driver is module.CHECK_DRIVER and payload["env"] == "SpaceInvaders-MinAtar"
        actions = np.load(payload["actions"])
        env = make(module.IDS["SpaceInvaders"][1], num_envs=actions.shape[1], seed=5)
        frames, rewards, dones = [env.reset(seed=5).obs.numpy().astype(bool)], [], []
        for a in actions:
            r = env.step(torch.as_tensor(a, dtype=torch.long))
            frames.append(r.obs.numpy().astype(bool))
            rewards.append(r.reward.numpy())
            dones.append((r.terminated | r.truncated).numpy())
        saved = {"obs": np.stack(frames), "reward": np.stack(rewards), "done": np.stack(dones)}
        if corrupt == "obs":
            saved["obs"][40, 3, 9, 0, 0] ^= True
        elif corrupt is not None:
            saved[corrupt][39, 2] = not saved[corrupt][39, 2] if corrupt == "done" else 7.0
        np.savez(payload["out"], **saved)
        return {"steps": len(actions)}

    monkeypatch.setattr(module, "run_jax", fake_run_jax)
    args = argparse.Namespace(jax_python="python", core=0, rules="minatar")
    if corrupt is None:
        assert module.check_same_game(args, [], tmp_path, "SpaceInvaders", envs=4, steps=120) > 0
        return
    with pytest.raises(SystemExit) as exit_info:
        module.check_same_game(args, [], tmp_path, "SpaceInvaders", envs=4, steps=120)
    assert exit_info.value.code == 2
    what = {"obs": "observation", "reward": "reward", "done": "episode end"}[corrupt]
    assert f"differs from rl_gpu's env in the {what} at step 40 (environments [{3 if corrupt == 'obs' else 2}])" \
        in capsys.readouterr().err
