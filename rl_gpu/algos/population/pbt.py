"""Population-based training (Jaderberg et al., 2017): every ``interval`` iterations the worst members copy a
better member (exploit) and perturb its hyper-parameters (explore).

Pure decisions on host numbers (:func:`exploit_and_explore`) apart from their application to a
:class:`~rl_gpu.algos.population.ppo.PopulationPPO` (:class:`PBT`), so the rule can be checked on hand-made cases.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from rl_gpu.algos.iteration import Iteration
from rl_gpu.algos.population.ppo import HYPER_PARAMETERS, PopulationPPO

FRACTION = 0.25
"""The bottom and top quantiles of the ranking: the bottom quarter copies from the top quarter."""
FACTORS = (0.8, 1.2)
"""Explore: each hyper-parameter of a copied member is multiplied by one of these, chosen at random."""
INITIAL_SPREAD = 2.0
"""Members start with each hyper-parameter drawn log-uniformly in [value / spread, value * spread]."""


@dataclass(frozen=True)
class Exploit:
    """One member replaced: ``target`` took ``source``'s weights and optimiser state, and ``hyper_parameters``
    (``source``'s, each multiplied by the factor in ``factors``)."""

    target: int
    source: int
    factors: dict[str, float]
    hyper_parameters: dict[str, float]


def exploit_and_explore(scores: Sequence[float], hyper_parameters: dict[str, Sequence[float]],
                        rng: random.Random, fraction: float = FRACTION,
                        factors: Sequence[float] = FACTORS, eligible: Sequence[bool] | None = None) -> list[Exploit]:
    """The exploits of one PBT round.

    Members are ranked by ``scores`` (ties by index, NaN lowest) among the ``eligible`` ones (default: all);
    with ``n = floor(fraction * eligible count)``, each of the ``n`` lowest copies one of the ``n`` highest
    (chosen uniformly by ``rng``), whose hyper-parameters it takes, each multiplied by a factor drawn from
    ``factors``. Fewer than ``1 / fraction`` eligible members: no exploit.
    """
    members = [i for i in range(len(scores)) if eligible is None or eligible[i]]
    n = math.floor(fraction * len(members))
    if n < 1:
        return []

    def key(i: int) -> tuple[float, int]:
        s = scores[i]
        return (-math.inf if math.isnan(s) else s, i)

    ranked = sorted(members, key=key)
    bottom, top = ranked[:n], ranked[-n:]
    out = []
    for target in bottom:
        source = top[rng.randrange(n)]
        chosen = {name: factors[rng.randrange(len(factors))] for name in sorted(hyper_parameters)}
        values = {name: hyper_parameters[name][source] * chosen[name] for name in sorted(hyper_parameters)}
        out.append(Exploit(target, source, chosen, values))
    return out


def initial_hyper_parameters(base: dict[str, float], members: int, rng: random.Random,
                             spread: float = INITIAL_SPREAD) -> list[dict[str, float]]:
    """Each member's starting hyper-parameters: ``base[name]`` times ``spread ** u``, u uniform in [-1, 1]."""
    return [{name: base[name] * spread ** rng.uniform(-1.0, 1.0) for name in sorted(base)}
            for _ in range(members)]


class PBT:
    """PBT over a :class:`PopulationPPO`: scores are each member's mean episode return over the iterations since
    the last round (a member with no finished episode scores NaN, ranked lowest); :meth:`after_iteration`
    accumulates them on the device and every ``interval`` iterations runs a round (one host read). ``lineage``
    records every initial value and exploit (JSON-able)."""

    def __init__(self, population: PopulationPPO, interval: int, seed: int) -> None:
        if interval < 1:
            raise ValueError(f"the PBT interval must be at least 1 iteration, got {interval}")
        self.population = population
        self.interval = interval
        self.rng = random.Random(seed)
        self.iteration = 0
        k, device = population.k, population.device
        self._returns = torch.zeros(k, device=device)
        self._episodes = torch.zeros(k, device=device)
        base = {name: value[0] for name, value in population.hyper_parameters().items()}
        start = initial_hyper_parameters(base, k, self.rng)
        for i, values in enumerate(start):
            population.set_hyper_parameters(i, values)
        self.lineage: dict = {"interval": interval, "fraction": FRACTION, "factors": list(FACTORS),
                              "hyper_parameters": list(HYPER_PARAMETERS), "initial": start, "rounds": []}

    def after_iteration(self, result: Iteration, active: Sequence[bool]) -> list[Exploit]:
        """Accumulate the iteration's returns; at the end of an interval, exploit and explore among the
        ``active`` members and apply the result. Returns the exploits made (usually none)."""
        collected = result.collected
        self._returns += collected.episode_return * collected.episodes
        self._episodes += collected.episodes
        self.iteration += 1
        if self.iteration % self.interval:
            return []
        scores = torch.where(self._episodes > 0, self._returns / self._episodes.clamp(min=1),
                             torch.full_like(self._returns, math.nan)).tolist()
        self._returns.zero_()
        self._episodes.zero_()
        population = self.population
        exploits = exploit_and_explore(scores, population.hyper_parameters(), self.rng, eligible=active)
        for e in exploits:
            population.copy_member(e.source, e.target)
            population.set_hyper_parameters(e.target, e.hyper_parameters)
        self.lineage["rounds"].append({
            "iteration": self.iteration, "scores": [None if math.isnan(s) else s for s in scores],
            "exploits": [asdict(e) for e in exploits], "hyper_parameters": population.hyper_parameters()})
        return exploits
