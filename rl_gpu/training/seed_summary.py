"""Across seeds: the final scores of a multi-seed run, with robust aggregates (``OUTPUT/summary.json``).

Few seeds make the mean fragile, so the summary also gives the median and the interquartile mean (IQM: the
mean of the middle half of the sorted scores, as in Agarwal et al., "Deep RL at the Edge of the Statistical
Precipice", 2021) with a percentile-bootstrap 95% confidence interval: the seeds are resampled with
replacement ``BOOTSTRAP_SAMPLES`` times from a fixed seed, so the interval is the same every time it is computed.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence

BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0


def iqm(scores: Sequence[float]) -> float:
    """Interquartile mean: drop ``floor(n / 4)`` scores from each end of the sorted list, average the rest
    (``scipy.stats.trim_mean(x, 0.25)``)."""
    ordered = sorted(scores)
    cut = len(ordered) // 4
    middle = ordered[cut:len(ordered) - cut]
    return sum(middle) / len(middle)


def bootstrap_ci(scores: Sequence[float], statistic=iqm, samples: int = BOOTSTRAP_SAMPLES,
                 seed: int = BOOTSTRAP_SEED, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over ``scores`` (resampled with replacement)."""
    rng = random.Random(seed)
    n = len(scores)
    values = sorted(statistic([scores[rng.randrange(n)] for _ in range(n)]) for _ in range(samples))
    tail = (1 - level) / 2
    lo = values[max(0, math.floor(tail * samples))]
    hi = values[min(samples - 1, math.ceil((1 - tail) * samples) - 1)]
    return lo, hi


def seed_summary(summaries: Sequence[dict], multi_player: bool) -> dict:
    """Aggregate per-seed ``summary.json`` contents: each seed's final score (best.pt's win rate for turn-based
    games, its mean return otherwise), their mean, median and IQM with a bootstrap 95% CI, and how many seeds
    met their goal. Seeds without a final evaluation are listed with a null score and left out of the
    statistics. Where every seed measured best.pt's exploitability (two-player games that have one), its
    statistics go under ``exploitability`` too (lower is better): for self-play, the measure that matters."""
    metric = "win_rate" if multi_player else "mean_return"
    per_seed = []
    for s in summaries:
        best = (s.get("final_evaluation") or {}).get("best")
        per_seed.append({"seed": s.get("seed"), "status": s.get("status"), "success": bool(s.get("success")),
                         "score": best[metric] if best else None})
    scores = [p["score"] for p in per_seed if p["score"] is not None]
    out: dict = {"metric": f"final evaluation of best.pt: {metric}", "seeds": per_seed,
                 "successes": sum(p["success"] for p in per_seed), "num_seeds": len(per_seed)}
    if scores:
        out.update(_statistics(scores), bootstrap={"samples": BOOTSTRAP_SAMPLES, "seed": BOOTSTRAP_SEED})
    measured = [s.get("exploitability") for s in summaries]
    if measured and all(isinstance(m, dict) and isinstance(m.get("best"), (int, float)) for m in measured):
        values = [float(m["best"]) for m in measured]
        out["exploitability"] = {"of": "best.pt", "unit": measured[0].get("unit"),
                                 "seeds": [{"seed": s.get("seed"), "value": v} for s, v in zip(summaries, values)],
                                 **_statistics(values)}
    return out


def _statistics(scores: Sequence[float]) -> dict:
    lo, hi = bootstrap_ci(scores)
    return {"mean": statistics.fmean(scores), "median": statistics.median(scores), "iqm": iqm(scores),
            "iqm_ci95": [lo, hi]}


def _outcomes(summary: dict) -> str:
    """How the seeds ended: the goal count, or, where every seed trained its whole budget without a success (a
    self-play run has no goal to meet), that."""
    n = summary["num_seeds"]
    if not summary["successes"] and all(p["status"] == "budget_spent" for p in summary["seeds"]):
        return f"all {n} seeds trained their whole budget"
    return f"goal met by {summary['successes']}/{n} seeds"


def describe(summary: dict) -> str:
    """A few lines for the log."""
    lines = [f"across {summary['num_seeds']} seeds ({summary['metric']}): " + ", ".join(
        f"seed {p['seed']} {'-' if p['score'] is None else format(p['score'], '.4f')}" for p in summary["seeds"])]
    if "iqm" in summary:
        lo, hi = summary["iqm_ci95"]
        lines.append(f"  mean {summary['mean']:.4f}, median {summary['median']:.4f}, IQM {summary['iqm']:.4f} "
                     f"[{lo:.4f}, {hi:.4f}] (95% bootstrap CI); {_outcomes(summary)}")
    else:
        lines.append(f"  no seed has a final evaluation; {_outcomes(summary)}")
    measured = summary.get("exploitability")
    if measured:
        lo, hi = measured["iqm_ci95"]
        lines.append(f"  exploitability of best.pt ({measured['unit']}): " + ", ".join(
            f"seed {p['seed']} {p['value']:.4f}" for p in measured["seeds"]) + f"; mean {measured['mean']:.4f}, "
            f"median {measured['median']:.4f}, IQM {measured['iqm']:.4f} [{lo:.4f}, {hi:.4f}]")
    return "\n".join(lines)
