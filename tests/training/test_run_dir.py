"""``--overwrite`` removes only a run's own files, checks every seed before deleting anything, and never
follows a link out of the run directory."""

import os

import pytest

from rl_gpu.core.errors import UsageError
from rl_gpu.training.run_dir import RUN_FILES, check_run_dirs, prepare_run_dir


def _old_run(run_dir):
    run_dir.mkdir(parents=True)
    for name in RUN_FILES:
        (run_dir / name).write_text(name)
    (run_dir / "tb").mkdir()
    (run_dir / "tb" / "events.out.tfevents.1").write_text("e")
    (run_dir / "notes.txt").write_text("mine")


def _snapshot(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_overwrite_removes_the_run_files_and_nothing_else(tmp_path):
    run_dir = tmp_path / "out" / "seed-11"
    _old_run(run_dir)
    with pytest.raises(UsageError, match="already exists"):
        check_run_dirs([run_dir], overwrite=False)
    check_run_dirs([run_dir], overwrite=True)
    prepare_run_dir(run_dir, overwrite=True)
    assert _snapshot(run_dir) == ["notes.txt"]


def test_a_tb_link_is_unlinked_never_followed(tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "data").write_text("keep")
    run_dir = tmp_path / "seed-11"
    run_dir.mkdir()
    (run_dir / "tb").symlink_to(outside, target_is_directory=True)
    (run_dir / "last.pt").symlink_to(outside / "data")
    prepare_run_dir(run_dir, overwrite=True)
    assert not os.path.lexists(run_dir / "tb") and not os.path.lexists(run_dir / "last.pt")
    assert (outside / "data").read_text() == "keep"


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_seed_directory_that_is_a_link_is_refused(tmp_path, overwrite):
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "last.pt").write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / "seed-11").symlink_to(outside, target_is_directory=True)
    for call in (check_run_dirs, lambda d, o: prepare_run_dir(d[0], o)):
        with pytest.raises(UsageError, match="symbolic link"):
            call([out / "seed-11"], overwrite)
    assert _snapshot(outside) == ["last.pt"] and (outside / "last.pt").read_text() == "keep"


@pytest.mark.parametrize("damage, needle", [
    (lambda d: (d / "last.pt").mkdir(), "last.pt is a directory"),
    (lambda d: os.mkfifo(d / "metrics.jsonl"), "metrics.jsonl is a FIFO"),
    (lambda d: (d / "tb").write_text("not a folder"), "tb is a regular file"),
])
def test_anything_else_under_a_run_file_name_is_refused_before_deleting(tmp_path, damage, needle):
    seeds = [tmp_path / "out" / "seed-11", tmp_path / "out" / "seed-12"]
    _old_run(seeds[0])
    seeds[1].mkdir()
    (seeds[1] / "config.json").write_text("{}")
    target = seeds[1]
    if "tb" in needle:
        target = seeds[0]
        for child in (target / "tb").iterdir():
            child.unlink()
        (target / "tb").rmdir()
    damage(target)
    before = _snapshot(tmp_path)
    with pytest.raises(UsageError, match=needle) as info:
        check_run_dirs(seeds, overwrite=True)
    assert "nothing was deleted" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(UsageError, match=needle):
        prepare_run_dir(target, overwrite=True)
    assert _snapshot(tmp_path) == before


def test_a_seed_directory_that_is_a_file_stops_every_seed(tmp_path):
    seeds = [tmp_path / "out" / "seed-11", tmp_path / "out" / "seed-12"]
    _old_run(seeds[0])
    seeds[1].write_text("a file where a run directory goes")
    before = _snapshot(tmp_path)
    for overwrite in (False, True):
        with pytest.raises(UsageError):
            check_run_dirs(seeds, overwrite=overwrite)
    with pytest.raises(UsageError, match="regular file, not a run directory"):
        check_run_dirs(seeds, overwrite=True)
    assert _snapshot(tmp_path) == before


def test_an_output_below_a_file_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is not a directory"):
        check_run_dirs([tmp_path / "file" / "seed-11"], overwrite=False)
    with pytest.raises(UsageError, match="is not a directory"):
        prepare_run_dir(tmp_path / "file" / "seed-11", overwrite=True)
    prepare_run_dir(tmp_path / "new" / "seed-11", overwrite=False)
    assert (tmp_path / "new" / "seed-11").is_dir()
