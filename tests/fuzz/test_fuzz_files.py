"""Hostile files, fuzzed with hypothesis: checkpoint bytes and payloads, and metrics files.

Each case goes through the public entry points in this process (``rl_gpu.load``, ``rl-gpu evaluate``, ``rl-gpu
export``, ``rl-gpu plot``) and must end in a result or a one-line refusal (exit 2), never a traceback or another
exception type, and must leave every input file byte for byte as it was. The number of cases per kind is the
``max_examples`` of each test (hypothesis runs exactly that many unless it exhausts a small space first).
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from cli_runner import FUZZ, run_cli

import rl_gpu
from rl_gpu.envs.registry import make
from rl_gpu.nn.actor_critic import policy_for_env
from rl_gpu.runtime.checkpoint import FORMAT, CheckpointError, save_checkpoint


def _payload() -> dict:
    env = make("CartPole-v1", num_envs=2, seed=0)
    torch.manual_seed(0)
    policy = policy_for_env(env.spec)
    return {"env_id": "CartPole-v1", "algo": "ppo", "policy_config": policy.config(), "update": 1,
            "global_step": 16, "seed": 1, "validation": None,
            "config": {"env": "CartPole-v1", "final_eval_episodes": 4, "deterministic_eval": True, "num_envs": 2},
            "algorithm": {"policy": policy.state_dict()}}


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("ckpt") / "best.pt"
    save_checkpoint(path, _payload())
    rl_gpu.load(path)  # the unmutated file is usable
    return path.read_bytes()


def _assert_clean_refusal(code: int, stderr: str) -> None:
    event(f"exit {code}")
    assert code in (0, 2), (code, stderr)
    assert "Traceback" not in stderr, stderr
    if code == 2:
        assert len(stderr.strip().splitlines()) == 1, stderr


mutation = st.one_of(
    st.tuples(st.just("flip"), st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 7)), min_size=1, max_size=8)),
    st.tuples(st.just("truncate"), st.integers(0, 10**9)),
    st.tuples(st.just("insert"), st.tuples(st.integers(0, 10**9), st.binary(min_size=1, max_size=16))),
    st.tuples(st.just("random"), st.binary(max_size=2048)),
)


def _mutate(data: bytes, how) -> bytes:
    kind, arg = how
    if kind == "flip":
        out = bytearray(data)
        for pos, bit in arg:
            out[pos % len(out)] ^= 1 << bit
        return bytes(out)
    if kind == "truncate":
        return data[: arg % len(data)]
    if kind == "insert":
        pos, extra = arg
        pos %= len(data)
        return data[:pos] + extra + data[pos:]
    return arg


@settings(FUZZ, max_examples=300)
@given(how=mutation)
def test_damaged_checkpoint_bytes_are_refused_in_one_line(good_checkpoint, tmp_path_factory, how):
    data = _mutate(good_checkpoint, how)
    path = tmp_path_factory.mktemp("bad") / "best.pt"
    path.write_bytes(data)
    if data != good_checkpoint:
        with pytest.raises(CheckpointError) as info:
            rl_gpu.load(path)
        assert "\n" not in str(info.value)
    assert path.read_bytes() == data


# Payload mutations go through files without a checksum (format versions 1 and 2 are still read), so the
# schema checks behind the checksum are what refuses them.
def _leaf_paths(tree, prefix=()):
    if isinstance(tree, dict) and tree:
        for k, v in tree.items():
            yield from _leaf_paths(v, prefix + (k,))
    else:
        yield prefix


PAYLOAD_PATHS = list(_leaf_paths(_payload()))
REPLACEMENTS = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True), st.text(max_size=8),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.sampled_from([torch.zeros(0), torch.full((4,), float("nan")), torch.ones(3, 3), torch.zeros(64, 4),
                     torch.ones(2, dtype=torch.int64), torch.full((64, 4), float("inf"))]),
)


@settings(FUZZ, max_examples=300)
@given(edits=st.lists(st.tuples(st.sampled_from(PAYLOAD_PATHS), st.sampled_from(["delete", "replace"]),
                                REPLACEMENTS), min_size=1, max_size=3),
       version=st.sampled_from([1, 2]))
# Found by this test: a layer of 2**55 inputs overflowed torch's size check while the skeleton was built.
@example(edits=[(("policy_config", "obs_dim"), "replace", 2**55)], version=1)
def test_malformed_payloads_load_or_are_refused_in_one_line(tmp_path_factory, edits, version):
    payload = _payload()
    for path, action, value in edits:
        node = payload
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not path:
            continue
        if action == "delete":
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
    file = tmp_path_factory.mktemp("payload") / "best.pt"
    torch.save({"format": FORMAT, "version": version, **payload}, file)
    before = file.read_bytes()
    try:
        loaded = rl_gpu.load(file)
    except CheckpointError as e:
        assert "\n" not in str(e)
    else:
        action = loaded.act(torch.zeros(2, loaded.obs_dim))
        assert action.shape[0] == 2
    assert file.read_bytes() == before


@settings(FUZZ, max_examples=60)
@given(how=mutation, command=st.sampled_from(["evaluate", "export"]))
def test_cli_on_damaged_checkpoints_exits_2_in_one_line_and_writes_nothing(good_checkpoint, tmp_path_factory,
                                                                          how, command):
    folder = tmp_path_factory.mktemp("cli")
    path = folder / "best.pt"
    data = _mutate(good_checkpoint, how)
    path.write_bytes(data)
    if command == "evaluate":
        code, err = run_cli("evaluate", "--checkpoint", str(path), "--device", "cpu", "--json-output",
                         str(folder / "eval.json"))
    else:
        code, err = run_cli("export", str(path), "--output", str(folder / "policy.pt"))
    _assert_clean_refusal(code, err)
    if data != good_checkpoint:
        assert code == 2
        assert sorted(p.name for p in folder.iterdir()) == ["best.pt"]
    assert path.read_bytes() == data


json_value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**200, 2**200), st.floats(allow_nan=True),
              st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=12,
)
record = st.fixed_dictionaries({"update": st.integers(0, 50), "global_step": st.integers(0, 10**6)},
                               optional={"episode_return": json_value, "loss": json_value, "validation": json_value,
                                         "train_win_rate": json_value})
line = st.one_of(
    record.map(json.dumps), json_value.map(json.dumps), st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
    st.just("[" * 5000 + "]" * 5000), st.just('{"update": 1, "global_step": ' + "9" * 5000 + "}"),
)


@settings(FUZZ, max_examples=40)
@given(lines=st.lists(line, max_size=12), raw=st.binary(max_size=64), metric=st.sampled_from(
    [None, "episode_return", "loss", "validation.score", "nope"]))
def test_plot_on_hostile_metrics_files_exits_0_or_2_without_traceback(tmp_path_factory, lines, raw, metric):
    run = tmp_path_factory.mktemp("plot") / "seed-1"
    run.mkdir()
    metrics = run / "metrics.jsonl"
    metrics.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogatepass") + raw)
    before = metrics.read_bytes()
    out = run.parent / "curves.png"
    args = ["plot", str(run), "--output", str(out)] + (["--metric", metric] if metric else [])
    code, err = run_cli(*args)
    _assert_clean_refusal(code, err)
    assert metrics.read_bytes() == before
    assert sorted(os.listdir(run)) == ["metrics.jsonl"]
    if code == 2:
        assert not out.exists()
