"""What one :meth:`~rl_gpu.algos.base.Algorithm.iterate` returns: a typed result whose parts say how each number is
logged and combined, instead of metric names that the runner, the rank reduction and the logger agree on.

- :class:`Collected`: the episodes the iteration collected (counted the same way by every algorithm,
  :mod:`rl_gpu.data.episodes`). ``episodes`` and ``transitions`` add up over processes; the others are means over
  the episodes that ended, weighted by each process's episodes.
- ``learning_rate`` and ``learner``: the algorithm's own statistics of its learning step (losses, KL, ...),
  averaged over processes.
- ``per_episode``: the algorithm's own means over the episodes that ended (MAPPO's team and per-agent returns):
  weighted like :class:`Collected`'s means, and left out of an update's record when no episode ended.

Every value is a tensor on the device, 0-dim for one run and ``[K]`` for a population of K members
(:meth:`Iteration.member` selects one); nothing here reads a value back to the host. An :class:`Iteration` is also
a read-only mapping from the names ``metrics.jsonl`` uses to those tensors, so ``result["loss"]`` works.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import torch
from torch import Tensor


class Collected(NamedTuple):
    """Statistics of the episodes an iteration collected (float tensors on the device)."""

    episodes: Tensor
    """Episodes that ended."""
    episode_return: Tensor
    """Their mean (learner's) return; 0 when none ended."""
    episode_length: Tensor
    """Their mean length; 0 when none ended."""
    win_rate: Tensor
    """The share of them with a positive (learner's) return; 0 when none ended."""
    transitions: Tensor
    """Environment transitions actually taken."""

    @classmethod
    def of(cls, stats: Mapping[str, Tensor]) -> Collected:
        """From a mapping holding (at least) these names, as floats."""
        missing = [name for name in cls._fields if name not in stats]
        if missing:
            raise TypeError(f"an iteration's metrics must include {list(cls._fields)}; missing {missing}")
        return cls(*(stats[name].float() for name in cls._fields))


COLLECTION_METRICS = Collected._fields
"""The names of :class:`Collected`'s statistics in an update's record."""


class MetricLayout(NamedTuple):
    """The order of an iteration's metrics when they travel as one ``[len(names)]`` tensor, and how each is
    combined over processes."""

    names: tuple[str, ...]
    summed: tuple[bool, ...]
    """Adds up over processes (counts)."""
    per_episode: tuple[bool, ...]
    """A mean over the episodes that ended: weighted by each process's ``episodes``."""


@dataclass(frozen=True, eq=False)
class Iteration(Mapping):
    """One iteration's result (see the module docstring)."""

    collected: Collected
    learning_rate: Tensor
    learner: Mapping[str, Tensor] = field(default_factory=dict)
    """The algorithm's own statistics of its learning step, by the names its record uses."""
    per_episode: Mapping[str, Tensor] = field(default_factory=dict)
    """The algorithm's own means over the episodes that ended, by the names its record uses."""

    def __post_init__(self) -> None:
        taken = {*COLLECTION_METRICS, "learning_rate"}
        for part in (self.learner, self.per_episode):
            clash = taken.intersection(part)
            if clash:
                raise ValueError(f"iteration metric names {sorted(clash)} are used twice")
            taken.update(part)

    @classmethod
    def of(cls, metrics: Mapping[str, Tensor], per_episode: tuple[str, ...] = ()) -> Iteration:
        """``metrics`` itself if it is an :class:`Iteration`; else a plain mapping split into the parts: the
        :data:`COLLECTION_METRICS`, ``learning_rate``, the names in ``per_episode``, and the rest as ``learner``
        (what an algorithm written against a plain dictionary returns)."""
        if isinstance(metrics, Iteration):
            return metrics
        if "learning_rate" not in metrics:
            raise TypeError("an iteration's metrics must include 'learning_rate'")
        rest = {k: v for k, v in metrics.items() if k not in COLLECTION_METRICS and k != "learning_rate"}
        return cls(Collected.of(metrics), metrics["learning_rate"],
                   {k: v for k, v in rest.items() if k not in per_episode},
                   {k: v for k, v in rest.items() if k in per_episode})

    def _flat(self) -> dict[str, Tensor]:
        return {**self.learner, "learning_rate": self.learning_rate, **self.per_episode, **self.collected._asdict()}

    def __getitem__(self, name: str) -> Tensor:
        return self._flat()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._flat())

    def __len__(self) -> int:
        return len(self._flat())

    def adding(self, *, learner: Mapping[str, Tensor] | None = None,
               per_episode: Mapping[str, Tensor] | None = None) -> Iteration:
        """This result with more statistics of either kind (a wrapper's: a league's ratings, reward terms)."""
        return replace(self, learner={**self.learner, **(learner or {})},
                       per_episode={**self.per_episode, **(per_episode or {})})

    def member(self, k: int) -> Iteration:
        """Member ``k``'s result, from a population's (every value ``[K]``)."""
        return Iteration(Collected(*(x[k] for x in self.collected)), self.learning_rate[k],
                         {n: v[k] for n, v in self.learner.items()}, {n: v[k] for n, v in self.per_episode.items()})

    def layout(self) -> MetricLayout:
        """The order :meth:`stacked` puts the values in, and how each one is combined over processes."""
        names = tuple(self._flat())
        per_episode = {*self.per_episode, *COLLECTION_METRICS} - {"episodes", "transitions"}
        return MetricLayout(names, tuple(n in ("episodes", "transitions") for n in names),
                            tuple(n in per_episode for n in names))

    def stacked(self, layout: MetricLayout) -> Tensor:
        """Every value as one float tensor in ``layout``'s order (``ValueError`` if this result holds other
        metrics than the layout's: an algorithm's metrics are the same every iteration)."""
        flat = self._flat()
        if tuple(flat) != layout.names and set(flat) != set(layout.names):
            raise ValueError(f"an iteration returned the metrics {sorted(flat)}, the first one {sorted(layout.names)}"
                             ": an algorithm's metrics must be the same every iteration")
        return torch.stack([flat[n].detach().float() for n in layout.names])
