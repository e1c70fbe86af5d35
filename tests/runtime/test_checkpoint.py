"""Checkpoint files: the checksum header, versions 1 and 2 without it, type checks, and writes that never
replace what is not ours (devices, directories, FIFOs, links out of the folder, inputs) or leave a half file."""

import errno
import hashlib
import io
import os
import random
import stat

import pytest
import torch

from rl_gpu.nn.actor_critic import ActorCritic
from rl_gpu.runtime import files
from rl_gpu.runtime.checkpoint import (
    FORMAT,
    VERSION,
    CheckpointError,
    checkpoint_bytes,
    load_checkpoint,
    policy_part,
    save_checkpoint,
    training_part,
)
from rl_gpu.runtime.files import FileWriteError, atomic_write_bytes, atomic_write_json, check_writable


def _payload():
    torch.manual_seed(0)
    policy = ActorCritic(obs_dim=3, num_actions=2, hidden_sizes=(4,))
    return {"env_id": "CartPole-v1", "policy_config": policy.config(), "update": 2, "global_step": 64, "seed": 1,
            "algorithm": {"policy": policy.state_dict()}, "trainer": {"env": {}, "update": 2}}


def _legacy(path, version, **extra):
    payload = {**_payload(), "format": FORMAT, "version": version, **extra}
    torch.save(payload, path)
    return path


def test_round_trip_and_header(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint(path, _payload())
    data = path.read_bytes()
    header, body = data.split(b"\n", 1)
    assert header == f"{FORMAT} {VERSION} sha256 {hashlib.sha256(body).hexdigest()}".encode()
    loaded = load_checkpoint(path)
    assert loaded["version"] == VERSION and loaded["update"] == 2
    config, state = policy_part(loaded, path)
    assert config["obs_dim"] == 3 and torch.equal(state["actor.0.weight"], _payload()["algorithm"]["policy"]
                                                  ["actor.0.weight"])
    assert training_part(loaded, path)["update"] == 2
    # Saving a loaded payload again (its format and version entries included) gives the same file.
    save_checkpoint(tmp_path / "again.pt", loaded)
    assert (tmp_path / "again.pt").read_bytes() == data


def test_every_flipped_bit_is_refused_with_one_line(tmp_path):
    data = checkpoint_bytes(_payload())
    rng = random.Random(0)
    target = tmp_path / "flipped.pt"
    reasons = set()
    # Every byte of the header line, and a spread of the payload's.
    end = data.index(b"\n") + 1
    positions = list(range(end)) + sorted(rng.sample(range(end, len(data)), 300))
    for position in positions:
        flipped = bytearray(data)
        flipped[position] ^= 1 << rng.randrange(8)
        target.write_bytes(bytes(flipped))
        with pytest.raises(CheckpointError) as info:
            load_checkpoint(target)
        message = str(info.value)
        assert "\n" not in message and message.startswith(str(target))
        reasons.add(message.split(": ", 1)[1].split(" (")[0])
    assert "damaged checkpoint" in reasons


def test_uppercase_digest_is_a_changed_bit(tmp_path):
    data = checkpoint_bytes(_payload())
    header, body = data.split(b"\n", 1)
    path = tmp_path / "upper.pt"
    path.write_bytes(header.upper().replace(FORMAT.upper().encode(), FORMAT.encode()) + b"\n" + body)
    with pytest.raises(CheckpointError, match="damaged"):
        load_checkpoint(path)


@pytest.mark.parametrize("version", [1, 2])
def test_versions_before_the_checksum_are_read(tmp_path, version):
    path = _legacy(tmp_path / "old.pt", version)
    assert load_checkpoint(path)["version"] == version


def test_a_version_3_payload_without_its_header_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="without its checksum header"):
        load_checkpoint(_legacy(tmp_path / "bare.pt", 3))
    with pytest.raises(CheckpointError, match="version 7"):
        load_checkpoint(_legacy(tmp_path / "future.pt", 7))
    # A header naming a version that never had one is damage, not an old file.
    body = io.BytesIO()
    torch.save({**_payload(), "format": FORMAT, "version": 1}, body)
    digest = hashlib.sha256(body.getvalue()).hexdigest()
    (tmp_path / "h1.pt").write_bytes(f"{FORMAT} 1 sha256 {digest}\n".encode() + body.getvalue())
    with pytest.raises(CheckpointError, match="damaged"):
        load_checkpoint(tmp_path / "h1.pt")


@pytest.mark.parametrize("field, value, needle", [
    ("update", "3", "update is"),
    ("global_step", -1, "global_step is"),
    ("seed", True, "seed is"),
    ("env_id", 5, "env_id is"),
    ("trainer", [1, 2], "trainer is"),
    ("policy_config", torch.zeros(3), "policy_config is"),
    ("config", {1: 2}, "config is"),
])
def test_entries_of_the_wrong_type_are_refused(tmp_path, field, value, needle):
    path = _legacy(tmp_path / "odd.pt", 2, **{field: value})
    with pytest.raises(CheckpointError, match=needle) as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value)


def test_policy_and_training_parts_are_checked(tmp_path):
    path = tmp_path / "x.pt"
    for payload, needle in [({}, "no policy_config"), ({"policy_config": {}}, "no algorithm.policy"),
                            ({"policy_config": {}, "algorithm": {"policy": [1]}}, "expected a dictionary"),
                            ({"policy_config": {}, "algorithm": {"policy": {"w": 1.0}}}, "not a tensor")]:
        with pytest.raises(CheckpointError, match=needle):
            policy_part(payload, path)
    with pytest.raises(CheckpointError, match="not resumable|not a resumable"):
        training_part({"update": 1}, path)


def test_unreadable_and_foreign_files(tmp_path):
    (tmp_path / "dir.pt").mkdir()
    (tmp_path / "zip.pt").write_bytes(b"PK\x03\x04" + os.urandom(64))
    torch.save([1, 2, 3], tmp_path / "list.pt")
    for name, needle in [("missing.pt", "no such"), ("dir.pt", "not a file"), ("zip.pt", "not a readable"),
                         ("list.pt", "not an rl_gpu checkpoint")]:
        with pytest.raises(CheckpointError, match=needle):
            load_checkpoint(tmp_path / name)


def test_written_files_get_0644_less_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        save_checkpoint(tmp_path / "a.pt", {"update": 1})
        atomic_write_json(tmp_path / "a.json", {"x": 1})
    finally:
        os.umask(old)
    for name in ("a.pt", "a.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644 & ~0o027
    save_checkpoint(tmp_path / "b.pt", {"update": 1})
    assert stat.S_IMODE((tmp_path / "b.pt").stat().st_mode) == 0o644 & ~old


def test_writes_never_replace_what_is_not_a_file_of_ours(tmp_path):
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "parent-file").write_text("x")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    work = tmp_path / "work"
    work.mkdir()
    (work / "out.json").symlink_to(outside / "precious")
    read_only = tmp_path / "ro.json"
    read_only.write_text("{}")
    read_only.chmod(0o444)
    cases = [(tmp_path / "folder", "directory"), (tmp_path / "fifo", "FIFO"), (os.devnull, "character device"),
             (tmp_path / "parent-file" / "x.json", "not a directory"), (work / "out.json", "outside"),
             (read_only, "read-only")]
    for path, needle in cases:
        with pytest.raises(FileWriteError, match=needle) as info:
            atomic_write_bytes(path, b"data")
        assert isinstance(info.value, OSError) and isinstance(info.value, ValueError)
        assert "\n" not in str(info.value)
    assert (tmp_path / "folder").is_dir() and stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)
    assert (outside / "precious").read_text() == "keep" and read_only.read_text() == "{}"
    assert sorted(p.name for p in work.iterdir()) == ["out.json"]


def test_a_link_inside_the_folder_is_followed_and_kept(tmp_path):
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to("real.json")
    atomic_write_bytes(tmp_path / "link.json", b"new")
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real.json").read_bytes() == b"new"


def test_an_output_onto_an_input_is_refused(tmp_path):
    source = tmp_path / "best.pt"
    save_checkpoint(source, {"update": 1})
    before = source.read_bytes()
    os.link(source, tmp_path / "hard.pt")
    (tmp_path / "soft.pt").symlink_to("best.pt")
    for output in (source, tmp_path / "hard.pt", tmp_path / "soft.pt", tmp_path / "." / "best.pt"):
        with pytest.raises(FileWriteError, match="is the input"):
            atomic_write_bytes(output, b"x", inputs=[source])
    assert source.read_bytes() == before
    assert check_writable(tmp_path / "other.pt", inputs=[source]) == tmp_path / "other.pt"


@pytest.mark.parametrize("where, code, needle", [
    ("fsync", errno.ENOSPC, "No space left on device"),
    ("replace", errno.EROFS, "Read-only file system"),
    ("mkstemp", errno.EACCES, "Permission denied"),
])
def test_filesystem_errors_are_one_line_and_keep_the_old_file(tmp_path, monkeypatch, where, code, needle):
    target = tmp_path / "last.pt"
    save_checkpoint(target, {"update": 1})

    def broken(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    module = files.tempfile if where == "mkstemp" else files.os
    monkeypatch.setattr(module, where, broken)
    with pytest.raises(FileWriteError) as info:
        save_checkpoint(target, {"update": 2})
    monkeypatch.undo()
    message = str(info.value)
    assert needle in message and str(target) in message and "\n" not in message
    assert load_checkpoint(target)["update"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]
