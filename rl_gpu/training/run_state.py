"""The run's own state: where it is (update, steps, seconds) and what it has judged so far (best score, streak,
baseline, a validation still due). One object, checkpointed in ``last.pt`` beside the algorithm's state, handed
to callbacks as a read-only copy (:mod:`rl_gpu.training.events`), and checked field by field when read back, so a
damaged or foreign ``last.pt`` is refused in one line instead of failing later in the loop.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from rl_gpu.training.evaluation import EvalResult


@dataclass
class RunState:
    """Counters and judgements of one seed's run (everything the loop decides from, besides the algorithm)."""

    update: int = 0
    """Updates (algorithm iterations) done."""
    global_step: int = 0
    """Environment transitions taken, all processes together."""
    train_seconds: float = 0.0
    """Wall time spent training (validations excluded), summed over every resume."""
    best_score: float = -math.inf
    """The best validation score so far (the goal's score: higher is better)."""
    best_update: int = 0
    """The update of ``best_score`` (the policy in best.pt)."""
    streak: int = 0
    """Validations passed in a row (reset by a failed one)."""
    baseline: EvalResult | None = None
    """The initial policy's validation, that later ones are compared with (None until it is made)."""
    validation_due: bool = False
    """A stop came between this update and its validation: a resumed run validates first."""

    def to_dict(self) -> dict:
        """Plain values (``weights_only``-loadable); the keys are the fields'."""
        out = dataclasses.asdict(self)
        out["baseline"] = self.baseline.to_dict() if self.baseline is not None else None
        return out

    @classmethod
    def from_dict(cls, data: dict) -> RunState:
        """Inverse of :meth:`to_dict`, checked: a missing field, a wrong type or an impossible value raises
        ``ValueError`` naming the field (the caller adds the file)."""
        if not isinstance(data, dict):
            raise ValueError(f"the run state is a {type(data).__name__}, not a dict")
        out = {}
        for field in dataclasses.fields(cls):
            if field.name not in data:
                if field.name == "validation_due":  # written since 0.2 only
                    continue
                raise ValueError(f"the run state has no {field.name!r}")
            out[field.name] = _checked(field.name, data[field.name])
        if out["best_update"] > out["update"]:
            raise ValueError(f"the run state's best_update {out['best_update']} is after its update {out['update']}")
        return cls(**out)

    def copy(self) -> RunState:
        """An independent copy (what callbacks receive)."""
        return dataclasses.replace(self)


def _checked(name: str, value):
    if name in ("update", "global_step", "best_update", "streak"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"the run state's {name} is {value!r}, not a whole number >= 0")
        return value
    if name in ("train_seconds", "best_score"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) \
                or (name == "train_seconds" and not 0 <= value < math.inf) or value == math.inf:
            raise ValueError(f"the run state's {name} is {value!r}, not a number" +
                             (" >= 0" if name == "train_seconds" else " below +inf"))
        return float(value)
    if name == "validation_due":
        if not isinstance(value, bool):
            raise ValueError(f"the run state's validation_due is {value!r}, not true or false")
        return value
    # baseline
    if value is None:
        return None
    try:
        return EvalResult.from_dict(value)
    except (TypeError, AttributeError, KeyError) as e:
        raise ValueError(f"the run state's baseline is not a validation result ({e})") from None
