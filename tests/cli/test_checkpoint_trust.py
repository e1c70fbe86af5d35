"""A checkpoint never runs code: the environment id a file records is data. Beside a crafted checkpoint lies a
module that writes a marker when imported; every command, run as ``python -m rl_gpu`` from that folder, refuses
in one line (exit 2) and the marker never appears, until the user names the id (``--env``, ``--trust-env``)."""

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import torch

from rl_gpu.envs import registry
from rl_gpu.envs.registry import (
    UntrustedEnvError,
    check_may_import,
    env_class,
    make,
    module_to_import,
    named_ids_only,
)
from rl_gpu.runtime.checkpoint import checkpoint_bytes, load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
MODULE = f"planted_{uuid.uuid4().hex[:8]}"
ENV_ID = f"{MODULE}:Walk"

PLANTED = textwrap.dedent('''
    """Writes MARKER when imported: what a hostile module beside a downloaded checkpoint would do."""
    import pathlib
    from typing import NamedTuple

    import torch

    from rl_gpu.envs.base import TensorEnv

    pathlib.Path(__file__).with_name("MARKER").write_text("imported")


    class S(NamedTuple):
        pos: torch.Tensor


    class Walk(TensorEnv[S]):
        obs_shape = (1,)
        num_actions = 2
        max_episode_steps = 8

        def _sample_initial_state(self, num_envs, generator):
            return S(torch.zeros(num_envs, device=self.device))

        def _transition(self, s, action):
            pos = s.pos + torch.where(action == 1, 1.0, -1.0)
            return S(pos), (action == 1).float(), pos.abs() >= 3

        def _observe(self, s):
            return s.pos.unsqueeze(1)
''')

TINY = ["--num-envs", "4", "--num-steps", "8", "--max-updates", "1", "--min-updates", "1", "--eval-every", "1",
        "--eval-episodes", "4", "--final-eval-episodes", "4", "--solve-threshold", "1e9", "--device", "cpu",
        "--hidden-sizes", "8"]


def run(args, cwd, console_script=False):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)  # the folder is reachable as the current directory only
    script = Path(sys.executable).with_name("rl-gpu")
    command = [str(script)] if console_script and script.exists() else [sys.executable, "-m", "rl_gpu"]
    return subprocess.run([*command, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def rewrite(path: Path, target: Path, **changes) -> Path:
    """``path``'s checkpoint with entries replaced, written as a valid file (its checksum recomputed)."""
    payload = load_checkpoint(path)
    payload.update(changes)
    if "env_id" in changes and isinstance(payload.get("config"), dict):
        payload["config"] = {**payload["config"], "env": changes["env_id"]}
    target.write_bytes(checkpoint_bytes(payload))
    return target


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder holding the planted module and a run trained on it by a user who named it (``--env``), run by
    the console script, which finds the module in the current directory as ``python -m`` does."""
    home = tmp_path_factory.mktemp("downloaded")
    (home / f"{MODULE}.py").write_text(PLANTED)
    proc = run(["train", "--env", ENV_ID, "--output", "run", *TINY], home, console_script=True)
    assert proc.returncode == 1, proc.stderr  # the goal is out of reach: every file written, exit 1
    assert (home / "MARKER").exists()  # named: imported
    seed_dir = home / "run" / "seed-11"
    rewrite(seed_dir / "best.pt", home / "gym.pt", env_id=f"gym:{MODULE}:Walk-v0")
    rewrite(seed_dir / "best.pt", home / "dotted.pt", env_id=f"{MODULE}.sub:Walk")
    return home


REFUSED = {
    "evaluate": (["evaluate", "run/seed-11/best.pt", "--device", "cpu"], "--trust-env " + ENV_ID),
    "evaluate --checkpoint": (["evaluate", "--checkpoint", "run/seed-11/last.pt"], "--trust-env " + ENV_ID),
    "evaluate gym id": (["evaluate", "gym.pt"], f"--trust-env gym:{MODULE}:Walk-v0"),
    "evaluate dotted id": (["evaluate", "dotted.pt"], f"--trust-env {MODULE}.sub:Walk"),
    "export int8": (["export", "run/seed-11/best.pt", "--output", "p.onnx", "--quantize", "int8"],
                    "--trust-env " + ENV_ID),
    "export clip": (["export", "run/seed-11/best.pt", "--output", "p.pt", "--clip-actions"],
                    "--trust-env " + ENV_ID),
    "resume": (["train", "--resume", "run/seed-11", "--max-updates", "3"], "--env " + ENV_ID),
    "config": (["train", "--config", "run/seed-11/config.json", "--output", "other"], "--env " + ENV_ID),
    "config resume": (["train", "--config", "resume.json"], "--env " + ENV_ID),
    "other named id": (["train", "--resume", "run/seed-11", "--env", "CartPole-v1"], "--env " + ENV_ID),
    "another trust": (["evaluate", "run/seed-11/best.pt", "--trust-env", "os:Walk"], "names that recorded id"),
}


@pytest.fixture
def main_in_folder(folder, monkeypatch):
    """The command line's ``main``, to run in this process from ``folder`` with the planted module importable (first
    on the import path, as ``python -m`` would find it in the current directory)."""
    from rl_gpu.cli.main import main

    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    return main


AS_PROCESSES = ("evaluate", "export int8", "resume")
"""One case of each command runs as a user meets it, ``python -m rl_gpu`` in a process of its own; the rest run the
same entry point in this process (a process costs seconds of imports), with the folder first on the import path
and the module checked absent from ``sys.modules`` before and after (an import would also write the marker)."""


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_a_recorded_id_imports_nothing_unless_named(folder, case, call_main, main_in_folder):
    args, how = REFUSED[case]
    (folder / "resume.json").write_text(json.dumps({"env": "CartPole-v1", "resume": "run/seed-11"}))
    (folder / "MARKER").unlink(missing_ok=True)
    before = sorted(p.name for p in (folder / "run" / "seed-11").iterdir())
    if case in AS_PROCESSES:
        code, err = (proc := run(args, folder)).returncode, proc.stderr.strip()
    else:
        assert MODULE not in sys.modules
        code, _, err = call_main(main_in_folder, *args)
        err = err.strip()
        assert MODULE not in sys.modules
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert how in err, err
    assert not (folder / "MARKER").exists()
    assert not (folder / "other").exists() and not (folder / "p.onnx").exists() and not (folder / "p.pt").exists()
    assert sorted(p.name for p in (folder / "run" / "seed-11").iterdir()) == before


def test_the_refusal_names_the_module_and_where_it_lies(folder, call_main, main_in_folder):
    (folder / "MARKER").unlink(missing_ok=True)
    code, _, err = call_main(main_in_folder, "evaluate", "run/seed-11/best.pt")
    assert code == 2 and f"would import the module '{MODULE}' ({folder / MODULE}.py)" in err, err
    # plot reads a run's files and builds nothing: it runs, and imports nothing either.
    code, _, err = call_main(main_in_folder, "plot", "run", "--output", "curves.png")
    assert code == 0, err
    assert not (folder / "MARKER").exists() and MODULE not in sys.modules


def test_named_the_id_imports_its_module(folder):
    """The other side of the boundary (so the marker is shown to work): naming the id builds it."""
    (folder / "MARKER").unlink(missing_ok=True)
    proc = run(["evaluate", "run/seed-11/best.pt", "--episodes", "4", "--trust-env", ENV_ID], folder)
    assert proc.returncode == 0, proc.stderr
    assert ENV_ID in proc.stdout and (folder / "MARKER").exists()


def test_files_beside_the_checkpoint_shadow_no_module(tmp_path):
    """``python -m rl_gpu`` puts the current directory first on the import path; it drops it before importing
    anything else, so ``torch.py`` or ``gymnasium.py`` lying beside a checkpoint is never imported."""
    from rl_gpu.nn.actor_critic import ActorCritic
    from rl_gpu.runtime.checkpoint import save_checkpoint

    names = ("torch", "numpy", "tyro", "gymnasium", "mujoco", "onnx", "json", "typing", "rich")
    for name in names:
        (tmp_path / f"{name}.py").write_text(f"open('MARKER_{name}', 'w').close()\n")
    policy = ActorCritic(obs_dim=4, num_actions=2, hidden_sizes=(8,))
    save_checkpoint(tmp_path / "best.pt", {"env_id": "gym:CartPole-v1", "policy_config": policy.config(),
                                           "seed": 1, "config": {"env": "gym:CartPole-v1"},
                                           "algorithm": {"policy": policy.state_dict()}})
    proc = run(["evaluate", "best.pt", "--episodes", "2", "--device", "cpu"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not list(tmp_path.glob("MARKER_*"))


@pytest.mark.parametrize(("env_id", "module"), [
    ("CartPole-v1", None), ("gym:CartPole-v1", None), ("rl_gpu.envs.cartpole:CartPoleEnv", None),
    ("pkg.mod:Env", "pkg.mod"), ("gym:pkg.mod:Env-v0", "pkg.mod"), ("os:system", "os"),
    ("not an id", None), (None, None), (3, None),
])
def test_which_ids_import_a_module(env_id, module):
    assert module_to_import(env_id) == module


def test_inside_a_command_only_named_ids_import(tmp_path, monkeypatch):
    name = f"planted_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(PLANTED)
    monkeypatch.chdir(tmp_path)  # found in the current directory, as the commands find it
    env_id = f"{name}:Walk"
    try:
        with named_ids_only():
            with pytest.raises(UntrustedEnvError, match=f"would import the module '{name}'"):
                env_class(env_id)
            with pytest.raises(UntrustedEnvError):
                make(f"gym:{name}:Walk-v0")
            assert not (tmp_path / "MARKER").exists()
            with named_ids_only([env_id]):  # a nested block adds its ids
                env = make(env_id, num_envs=2)
                assert env.num_envs == 2 and (tmp_path / "MARKER").exists()
            with pytest.raises(UntrustedEnvError):  # the name's block ended
                check_may_import(env_id, "x.pt", "--trust-env")
        assert registry._named is None
        assert env_class(env_id).__name__ == "Walk"  # Python code names its own ids
        with pytest.raises(UntrustedEnvError):  # but an id read from a file is refused wherever it is checked
            check_may_import(env_id, "x.pt")
    finally:
        sys.modules.pop(name, None)


def test_the_python_api_loads_a_policy_without_building_its_environment(tmp_path):
    from rl_gpu import load
    from rl_gpu.nn.actor_critic import ActorCritic
    from rl_gpu.runtime.checkpoint import save_checkpoint

    (tmp_path / "hostile_api_mod.py").write_text("open(__file__ + '.MARKER', 'w').close()\n")
    policy = ActorCritic(obs_dim=4, num_actions=2, hidden_sizes=(8,))
    save_checkpoint(tmp_path / "best.pt", {"env_id": "hostile_api_mod:Env", "policy_config": policy.config(),
                                           "algorithm": {"policy": policy.state_dict()}})
    loaded = load(tmp_path / "best.pt")
    assert loaded.env_id == "hostile_api_mod:Env"
    assert loaded.act(torch.zeros(3, 4)).shape == (3,)
    assert not list(tmp_path.glob("*.MARKER")) and "hostile_api_mod" not in sys.modules
