"""Your own environment by name: ``make("package.module:ClassName")`` and ids that installed distributions
declare in the ``rl_gpu.envs`` entry-point group, with one-line errors for everything that does not resolve."""

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import torch

from rl_gpu.envs import registry
from rl_gpu.envs.registry import env_class, is_known, make, registered_ids

ROOT = Path(__file__).resolve().parents[2]

WALK = textwrap.dedent('''
    """A 1-D walk: move left or right, +1 for each step right; ends at |position| >= 3 or after 10 steps."""
    from typing import NamedTuple

    import torch

    from rl_gpu.envs.base import TensorEnv


    class WalkState(NamedTuple):
        pos: torch.Tensor


    class WalkEnv(TensorEnv[WalkState]):
        obs_shape = (1,)
        num_actions = 2
        max_episode_steps = 10

        def _sample_initial_state(self, num_envs, generator):
            start = torch.randint(-1, 2, (num_envs,), generator=generator, device=self.device)
            return WalkState(start.float())

        def _transition(self, s, action):
            pos = s.pos + torch.where(action == 1, 1.0, -1.0)
            return WalkState(pos), (action == 1).float(), pos.abs() >= 3

        def _observe(self, s):
            return s.pos.unsqueeze(1)


    class NotAnEnv:
        def reset(self):
            pass
''')


@pytest.fixture
def walk_module(tmp_path, monkeypatch):
    """A module on sys.path, named afresh for each test (no two tests share a ``sys.modules`` entry)."""
    name = f"walk_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(WALK)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_an_entry_point_id_builds_that_class(walk_module):
    env_id = f"{walk_module}:WalkEnv"
    assert is_known(env_id)
    cls = env_class(env_id)
    assert cls.__name__ == "WalkEnv" and cls.__module__ == walk_module
    env = make(env_id, num_envs=3, seed=0, max_episode_steps=2)
    assert isinstance(env, cls) and env.num_envs == 3 and env.max_episode_steps == 2
    start = env.observe().obs[:, 0].clone()
    step = env.step(torch.ones(3, dtype=torch.long))
    torch.testing.assert_close(step.final_obs[:, 0], start + 1)
    assert torch.equal(step.reward, torch.ones(3))
    # Same seed, same starts: the id resolves to the same class every time.
    assert torch.equal(make(env_id, num_envs=3, seed=0).observe().obs[:, 0], start)
    assert env_id not in registered_ids()  # nothing was registered


@pytest.mark.parametrize(("suffix", "expected"), [
    (":NoSuchClass", "has no attribute 'NoSuchClass'"),
    (":NotAnEnv", "not an environment class"),
    (":WalkState", "not an environment class"),
    (":torch", "is a module, not an environment class"),
])
def test_an_entry_point_that_is_not_an_environment_is_one_line(walk_module, suffix, expected):
    env_id = walk_module + suffix
    assert is_known(env_id)  # well formed: make says what is wrong with it
    with pytest.raises(ValueError, match=expected) as info:
        make(env_id)
    message = str(info.value)
    assert "\n" not in message and repr(env_id) in message
    if suffix == ":NotAnEnv":
        # It has reset; what it lacks is named.
        assert "missing spec, reset_rows, step," in message


def test_a_module_that_cannot_be_imported_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "broken_env_module.py").write_text("raise RuntimeError('needs a licence\\nfile')\n")
    (tmp_path / "uses_missing_dep.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = {
        "no_such_module_xyz.envs:Thing": "cannot import module 'no_such_module_xyz.envs' (No module named",
        "uses_missing_dep:Thing": "No module named 'no_such_dependency_xyz'",
        "broken_env_module:Thing": "importing module 'broken_env_module' failed: RuntimeError: needs a licence file",
    }
    try:
        for env_id, expected in cases.items():
            with pytest.raises(ValueError) as info:
                make(env_id)
            assert expected in str(info.value) and "\n" not in str(info.value)
    finally:
        for name in ("broken_env_module", "uses_missing_dep"):
            sys.modules.pop(name, None)


def test_ids_that_are_not_entry_points_stay_unknown():
    for env_id in ("a b:C", "mod:", ":Cls", "pkg..mod:C", "mod:C:D", "1mod:C", "CartPole-v9", None, 3):
        assert not is_known(env_id), env_id
    with pytest.raises(ValueError, match="'package.module:ClassName'"):
        make("mod:C:D")
    assert is_known("rl_gpu.envs.cartpole:CartPoleEnv") and is_known("gym:CartPole-v1")


def test_registering_by_name_checks_the_class_when_first_built(walk_module, monkeypatch):
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    monkeypatch.setattr(registry, "_imported", dict(registry._imported))
    registry.register("Walk-v0", f"{walk_module}:WalkEnv")
    registry.register("NotWalk-v0", f"{walk_module}:NotAnEnv")
    assert make("Walk-v0", num_envs=2).num_envs == 2
    with pytest.raises(ValueError, match="'NotWalk-v0'.*missing spec"):
        make("NotWalk-v0")


DECLARED = textwrap.dedent('''
    import importlib.metadata as metadata
    import sys

    calls = []
    real = metadata.entry_points

    def counting(**kwargs):
        if kwargs.get("group") == "rl_gpu.envs":
            calls.append(kwargs)
        return real(**kwargs)

    metadata.entry_points = counting
    import rl_gpu

    rl_gpu.make("CartPole-v1")
    rl_gpu.make("rl_gpu.envs.cartpole:CartPoleEnv")
    assert calls == [], "known ids must not read the entry points"
    env = rl_gpu.make("DeclaredWalk-v0", num_envs=2, seed=0)
    assert type(env).__name__ == "WalkEnv" and env.num_envs == 2
    assert "DeclaredWalk-v0" in rl_gpu.registered_ids()
    from rl_gpu.envs.registry import is_known
    assert not is_known("StillUnknown-v0")
    try:
        rl_gpu.make("DeclaredBroken-v0")
    except ValueError as e:
        assert "DeclaredBroken-v0" in str(e) and "missing" in str(e), e
    else:
        raise AssertionError("a declared class that is not an environment was built")
    assert len(calls) == 1, calls
    print("ok")
''')


def test_ids_declared_by_installed_distributions_are_found_lazily(tmp_path):
    """A fresh interpreter: ``import rl_gpu`` and known ids never read the entry points; the first unknown
    id reads them once (a distribution is faked by its ``.dist-info`` folder on the path)."""
    (tmp_path / "declared_walk.py").write_text(WALK)
    info = tmp_path / "fake_rl_gpu_envs-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-rl-gpu-envs\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[rl_gpu.envs]\nDeclaredWalk-v0 = declared_walk:WalkEnv\nDeclaredBroken-v0 = declared_walk:NotAnEnv\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-c", DECLARED], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
