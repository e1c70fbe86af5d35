"""rl_gpu.runtime.distributed under a real two-process gloo group on the loopback interface, and as the
identity without a process group; per-rank seed streams."""

from __future__ import annotations

import datetime
import multiprocessing
import os
import socket
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rl_gpu.core.seeding import derive_seed
from rl_gpu.runtime import distributed as D

WORLD = 2

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with the gloo backend is not available")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=20))
    try:
        assert D.is_distributed()
        assert D.rank() == rank and D.world_size() == WORLD
        assert D.is_main_process() == (rank == 0)

        # Gradients: each rank its own, afterwards every rank holds the mean, in the same tensors.
        scale = rank + 1.0  # 1 and 2: mean 1.5
        grads = [torch.full((3, 2), scale), torch.arange(4.0) * scale, torch.tensor(-scale)]
        ids = [id(g) for g in grads]
        D.all_reduce_grads_(grads)
        assert [id(g) for g in grads] == ids
        torch.testing.assert_close(grads[0], torch.full((3, 2), 1.5))
        torch.testing.assert_close(grads[1], torch.arange(4.0) * 1.5)
        torch.testing.assert_close(grads[2], torch.tensor(-1.5))
        D.all_reduce_grads_([])  # nothing to reduce: returns without a collective

        x = torch.tensor([float(rank), 10.0 * rank + 4.0])
        mean = D.all_reduce_mean(x)
        torch.testing.assert_close(mean, torch.tensor([0.5, 9.0]))
        torch.testing.assert_close(x, torch.tensor([float(rank), 10.0 * rank + 4.0]))  # input untouched

        assert D.all_agree(rank == 1) is True  # one rank asks: every rank agrees
        assert D.all_agree(rank == 0) is True
        assert D.all_agree(False) is False
        assert D.all_agree(True) is True

        params = [torch.full((2,), float(rank)), torch.tensor([rank * 7])]
        D.broadcast_parameters_(params, src=0)
        torch.testing.assert_close(params[0], torch.zeros(2))
        assert params[1].item() == 0
        D.broadcast_parameters_(params := [torch.full((2,), float(rank))], src=1)
        torch.testing.assert_close(params[0], torch.ones(2))
    finally:
        dist.destroy_process_group()


def test_helpers_reduce_across_two_processes():
    # torch.multiprocessing.spawn's machinery; forked children skip re-importing torch (about 3 s against 15 s
    # on a busy 2-core machine), unless CUDA is initialised here, which a forked child could not use.
    fork = "fork" in multiprocessing.get_all_start_methods() and not torch.cuda.is_initialized()
    context = mp.start_processes(_worker, args=(_free_port(),), nprocs=WORLD, join=False,
                                 start_method="fork" if fork else "spawn")
    deadline = time.monotonic() + 120
    # join re-raises an error (a failed assertion) in either rank here, with that rank's traceback.
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("the two ranks did not finish within 120 s")


def test_helpers_are_the_identity_without_a_process_group():
    assert not (dist.is_available() and dist.is_initialized())
    assert D.rank() == 0 and D.world_size() == 1
    assert not D.is_distributed() and D.is_main_process()
    x = torch.tensor([1.0, 2.0])
    assert D.all_reduce_mean(x) is x
    grads = [torch.ones(2, 2), torch.tensor(3.0)]
    D.all_reduce_grads_(grads)
    torch.testing.assert_close(grads[0], torch.ones(2, 2))
    torch.testing.assert_close(grads[1], torch.tensor(3.0))
    params = [torch.arange(3.0)]
    D.broadcast_parameters_(params)
    torch.testing.assert_close(params[0], torch.arange(3.0))
    assert D.all_agree(True) is True and D.all_agree(False) is False


def test_derive_seed_ranks():
    for seed in (0, 11, 2**40 + 3):
        for purpose in ("train", "validate", "final-eval"):
            base = derive_seed(seed, purpose)
            assert derive_seed(seed, purpose, 0) == base  # rank 0 keeps the single-process stream
            assert derive_seed(seed, purpose) == base  # deterministic
            per_rank = [derive_seed(seed, purpose, r) for r in range(4)]
            assert len(set(per_rank)) == 4, per_rank
            assert all(0 <= s < 2**62 for s in per_rank)
    assert derive_seed(11, "train") != derive_seed(11, "validate")
    assert derive_seed(11, "train", 1) != derive_seed(12, "train", 1)
