"""The package's shape: layering (import-linter), module size, no import cycles, no private names across
packages, a light ``import rl_gpu``, and entry points that start."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "rl_gpu"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    """Every module of rl_gpu by dotted name (a package by its ``__init__``)."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """``(imported module, names taken from it, line)`` for every import in the file, at any depth (inside
    functions and ``if TYPE_CHECKING:`` too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append((base, [alias.name for alias in node.names], node.lineno))
    return found


def _resolve(target: str) -> str | None:
    """The rl_gpu module a dotted name lands in (its longest known prefix), or None outside rl_gpu."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for base, names, _ in _imports(name, path):
            targets = [f"{base}.{n}" for n in names] if names else [base]
            for target in targets:
                module = _resolve(target) if target.startswith("rl_gpu") else None
                if module is not None and module != name:
                    graph[name].add(module)
    return graph


def _unit(module: str) -> str:
    """The top-level subpackage (or top-level module) a module belongs to: rl_gpu.envs.base -> envs."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_import_contracts_hold():
    exe = Path(sys.executable).with_name("lint-imports")
    command = str(exe) if exe.exists() else shutil.which("lint-imports")
    if command is None:
        pytest.skip("lint-imports is not installed (pip install import-linter, part of the test extra)")
    proc = subprocess.run([command, "--no-cache", "--no-logo"], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"lint-imports failed:\n{proc.stdout}\n{proc.stderr}"
    assert "0 broken" in proc.stdout, proc.stdout


def test_no_module_is_too_long():
    lines = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in MODULES.values()}
    long = {path: n for path, n in lines.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them): {long}"


def test_module_import_graph_is_acyclic():
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            pytest.fail("import cycle: " + " -> ".join(cycle))


def test_the_graph_sees_lazy_imports():
    # The cycle check is only as good as the graph: rl_gpu.cli.main imports its subcommands inside main().
    assert "rl_gpu.cli.train" in _graph()["rl_gpu.cli.main"]


def test_no_private_names_across_packages():
    offences = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        aliases: dict[str, str] = {}  # local name -> rl_gpu module of another package
        for base, names, line in _imports(name, path):
            if not base.startswith("rl_gpu"):
                continue
            for target in [f"{base}.{n}" for n in names] if names else [base]:
                module = _resolve(target)
                if module is None or _unit(module) == _unit(name):
                    continue
                bad = [p for p in target.split(".") if _private(p)]
                if bad:
                    offences.append(f"{path.relative_to(ROOT)}:{line}: imports {target}")
                if names and module == target:
                    aliases[target.rpartition(".")[2]] = module
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    module = _resolve(alias.name) if alias.name.startswith("rl_gpu") else None
                    if alias.asname and module and _unit(module) != _unit(name):
                        aliases[alias.asname] = module
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and _private(node.attr)):
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                offences.append(f"{where}: uses {aliases[node.value.id]}.{node.attr}")
    assert not offences, "private names used across packages:\n" + "\n".join(offences)


LIGHT_IMPORT = """
import json, sys
import rl_gpu
from rl_gpu.envs import registry
entries = [*registry.PREFIXES.values(), *getattr(registry, "_registry", {}).values()]
envs = sorted({e.split(":")[0] for e in entries if isinstance(e, str)})
tops = {"rl_gpu", *sys.argv[1:]}
print(json.dumps({"loaded": sorted(m for m in sys.modules if m.split(".")[0] in tops), "envs": envs}))
"""
COMMAND_LINE_IMPORT = """
import json, sys
import rl_gpu.cli.main, rl_gpu.cli.train, rl_gpu.cli.evaluate, rl_gpu.cli.export
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[:2] in (["torch", "_dynamo"], ["torch", "_inductor"]))))
"""
HEAVY = ("gymnasium", "mujoco", "stable_baselines3", "onnx", "onnxruntime", "tensorboard", "matplotlib",
         "rl_gpu.envs.cartpole", "rl_gpu.envs.roulette", "rl_gpu.algos", "rl_gpu.training", "rl_gpu.interop",
         "rl_gpu.cli", "rl_gpu.collect")


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each fresh interpreter's command; they start together, each starting
    torch (seconds on a busy machine)."""
    commands = {"light": [sys.executable, "-c", LIGHT_IMPORT, *{h.split(".")[0] for h in HEAVY}],
                "command line": [sys.executable, "-c", COMMAND_LINE_IMPORT],
                **{m: [sys.executable, "-m", m, "--help"] for m in ("rl_gpu", "rl_gpu.train")}}
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    procs = {k: subprocess.Popen(c, cwd=ROOT, env=ENV, **pipes) for k, c in commands.items()}
    try:
        outputs = {k: p.communicate(timeout=120) for k, p in procs.items()}
        return {k: (procs[k].returncode, *outputs[k]) for k in procs}
    finally:
        for p in procs.values():
            p.kill()


def test_the_command_line_starts_without_the_compiler(runs):
    """Every ``rl-gpu`` command imports the training commands' modules; TorchDynamo and Inductor (1.5 s and more
    to import) wait until a run compiles."""
    code, out, err = runs["command line"]
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == []


def test_import_rl_gpu_is_light(runs):
    code, out, err = runs["light"]
    assert code == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert "rl_gpu.envs.cartpole" in report["envs"]  # the registry still names its environments
    heavy = [*HEAVY, *report["envs"]]
    loaded = [m for m in report["loaded"] if any(m == h or m.startswith(h + ".") for h in heavy)]
    roots = [m for m in loaded if not any(m.startswith(other + ".") for other in loaded)]
    assert not roots, f"import rl_gpu imported (with their submodules): {roots}"


@pytest.mark.parametrize("module", ["rl_gpu", "rl_gpu.train"])
def test_entry_points_print_help(runs, module):
    code, out, err = runs[module]
    assert code == 0, f"python -m {module} --help: exit {code}\n{out}{err}"
    assert "usage" in out.lower()
