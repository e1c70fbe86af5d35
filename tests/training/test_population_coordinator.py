"""The barrier between member trainers (threads) and the population: one population iteration per round of
requests, member k gets its own entries, a member that leaves is frozen and no longer waited for, and a failing
iteration reaches every waiting trainer instead of hanging them."""

import threading

import torch

from rl_gpu.algos.iteration import Collected, Iteration
from rl_gpu.training.population import Coordinator


class FakePopulation:
    """Counts iterations; entry k of a metric is ``100 * iteration + k``."""

    def __init__(self, k, fail_at=None):
        self.k = k
        self.calls = []
        self.fail_at = fail_at

    def iterate(self, active):
        self.calls.append(list(active))
        if len(self.calls) == self.fail_at:
            raise ValueError("boom")
        zeros = torch.zeros(self.k)
        return Iteration(Collected(*[zeros] * 5), zeros,
                         {"loss": torch.arange(self.k, dtype=torch.float32) + 100 * len(self.calls)})


def run_members(coordinator, rounds):
    """Member k asks for ``rounds[k]`` iterations, then leaves; returns what each got (or its error)."""
    got = {k: [] for k in rounds}

    def member(k):
        try:
            for _ in range(rounds[k]):
                got[k].append(coordinator.iterate(k)["loss"].item())
        except RuntimeError as e:
            got[k].append(e)
        finally:
            coordinator.leave(k)

    threads = [threading.Thread(target=member, args=(k,)) for k in rounds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive(), "a member is stuck at the barrier"
    return got


def test_one_iteration_per_round_and_finished_members_are_frozen():
    population = FakePopulation(3)
    got = run_members(Coordinator(population, None, lambda lineage: None), {0: 2, 1: 4, 2: 3})
    assert got == {0: [100.0, 200.0], 1: [101.0, 201.0, 301.0, 401.0], 2: [102.0, 202.0, 302.0]}
    assert population.calls == [[True, True, True], [True, True, True], [False, True, True], [False, True, False]]


def test_a_failing_iteration_reaches_every_member():
    population = FakePopulation(3, fail_at=2)
    got = run_members(Coordinator(population, None, lambda lineage: None), {0: 5, 1: 5, 2: 5})
    for k in range(3):
        assert got[k][0] == 100.0 + k
        assert isinstance(got[k][1], RuntimeError) and isinstance(got[k][1].__cause__, ValueError)
    assert len(population.calls) == 2
