"""Freed host memory stays on glibc's heap in a training process: reallocating megabyte tensors costs no page
faults, where glibc's defaults give the pages back and fault them in again. Python's cyclic collector is spared
the objects a run starts with, and given them back when it ends."""

import gc
import json
import os
import subprocess
import sys
import weakref

import pytest

from rl_gpu.runtime import allocator

SCRIPT = """
import json, resource, sys
import torch
from rl_gpu.runtime.allocator import keep_freed_host_memory
applied = keep_freed_host_memory() if sys.argv[1] == "keep" else False
def rounds():
    for _ in range(20):  # the activations of a minibatch: several 4 MiB blocks, all freed before the next
        blocks = [torch.empty(1 << 20).fill_(1.0) for _ in range(6)]
        del blocks
rounds()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rounds()
print(json.dumps({"applied": applied, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _faults(mode: str, **env) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    return json.loads(out.stdout)


@pytest.mark.slow  # a property of glibc's allocator settings, seconds of page-fault counting (suite time)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_kept_memory_is_reused_without_page_faults():
    # glibc's starting threshold, held fixed: whether its adaptive threshold has risen by the time of an
    # allocation depends on the process's history (the same script saw 0 or 122,000 faults from run to run).
    default = _faults("default", MALLOC_MMAP_THRESHOLD_="131072")
    kept = _faults("keep")
    assert kept["applied"]
    # 20 rounds x 6 blocks x 1024 pages come back from the kernel; none once memory is kept.
    assert default["faults"] > 20 * 6 * 1000 and kept["faults"] < 1024


def test_the_users_own_malloc_settings_are_left_alone(monkeypatch):
    for name, value in ((allocator.OPT_OUT, "0"), ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1"),
                        ("MALLOC_ARENA_MAX", "2")):
        with monkeypatch.context() as m:
            m.setenv(name, value)
            assert allocator._user_tuned_malloc()
    if sys.platform.startswith("linux"):
        assert _faults("keep", **{allocator.OPT_OUT: "0"})["applied"] is False


class _Node:
    pass


def _cycle() -> weakref.ref:
    node = _Node()
    node.me = node  # only the cyclic collector frees it
    return weakref.ref(node)


def test_the_collector_spares_what_lived_at_the_freeze_until_the_end(nothing_frozen):
    early = _Node()
    early.me = early
    early_ref = weakref.ref(early)  # held until frozen: an automatic collection could free it before
    with allocator.collector_spares_startup() as freeze:
        assert gc.get_freeze_count() == 0  # nothing before the call
        freeze()
        count = gc.get_freeze_count()
        assert count > 0
        freeze()  # once only
        assert gc.get_freeze_count() == count
        del early
        gc.collect()
        assert early_ref() is not None  # frozen: the collector no longer walks it
        later = _cycle()
        gc.collect()
        assert later() is None  # what is made after the freeze is collected as before
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert early_ref() is None  # handed back: collected after the run


def test_someone_elses_freeze_is_left_alone(nothing_frozen):
    gc.freeze()
    count = gc.get_freeze_count()
    with allocator.collector_spares_startup() as freeze:
        freeze()
        assert gc.get_freeze_count() == count
    assert gc.get_freeze_count() == count
    gc.disable()
    try:
        gc.unfreeze()
        with allocator.collector_spares_startup() as freeze:
            freeze()  # the collector is off: nothing to spare
            assert gc.get_freeze_count() == 0
    finally:
        gc.enable()
