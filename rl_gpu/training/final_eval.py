"""The end of a seed's run: best.pt, the initial policy and a uniform-random player evaluated on fresh seeds,
and ``summary.json``."""

from __future__ import annotations

from rl_gpu.nn.actor_critic import UniformRandomPolicy
from rl_gpu.runtime.checkpoint import atomic_write_json, load_checkpoint
from rl_gpu.runtime.distributed import is_main_process, world_size
from rl_gpu.training.evaluation import improvement_z
from rl_gpu.training.ranks import read_on_main


def final_evaluation(self, status: str, reason: str) -> dict:
    """Re-evaluate best.pt, the initial policy and a uniform-random player on fresh seeds (``self``: a
    :class:`~rl_gpu.training.runner.Trainer`), log the results and write ``summary.json``; returns the summary.
    A stop signal cuts the evaluations short (:class:`~rl_gpu.training.signals.Stopped`): no summary is
    written, and a resume runs the final evaluation again."""
    cfg, multi = self.config, self.goal.multi_player
    summary: dict = {"seed": self.seed, "env": cfg.env, "success": status == "success", "status": status,
                     "reason": reason, "updates": self.state.update, "global_step": self.state.global_step,
                     "train_seconds": self.state.train_seconds, "best_update": self.state.best_update,
                     "world_size": world_size(), "total_envs": cfg.num_envs * world_size(),
                     "initial_validation": self.state.baseline.to_dict()}
    best_path = self.run_dir / "best.pt"
    # Read where the files are (rank 0 under torchrun) and handed to every process, which plays its share.
    best_state = read_on_main(lambda: load_checkpoint(best_path)["algorithm"]["policy"] if best_path.exists()
                              else None)
    if best_state is None and self.state.baseline is not None:
        # best.pt went missing (deleted while the run was stopped, and no validation came after the resume):
        # the policy as it is now stands in for it, and the summary says so.
        self.log(f"[seed {self.seed}] note: {best_path} is missing: the final evaluation uses the policy at update "
                 f"{self.state.update}")
        best_state = self.algo.policy.state_dict()
        summary.update(best_update=self.state.update, best_missing=True)
    if best_state is not None:
        best = self.algo.initial_policy()
        best.load_state_dict(best_state)
        n = cfg.final_eval_episodes
        final = {"best": self.evaluate(best, n, "final-eval"),
                 "initial": self.evaluate(self.initial_policy, n, "final-eval")}
        if not self.env.spec.is_continuous:
            final["random"] = self.evaluate(UniformRandomPolicy(), n, "final-eval")
        summary["final_evaluation"] = {k: v.to_dict() for k, v in final.items()}
        lines = [f"[seed {self.seed}] final evaluation on fresh seeds ({n} episodes each):"]
        for name, res in final.items():
            lines.append(f"  {name:>7}: " + res.describe(multi).replace("\n", "\n           "))
        if self.measure is not None:
            # The run's measure (exact exploitability of a two-player game), of the policies just evaluated.
            measured = {"best": self.measure(best), "initial": self.measure(self.initial_policy)}
            summary["exploitability"] = {"unit": measured["best"].unit,
                                         **{name: m.value for name, m in measured.items()}}
            lines += [f"  {name:>7}: exploitability {m.describe()}" for name, m in measured.items()]
        if multi:
            for name in ("initial", "random"):
                z = improvement_z(final["best"].win_rate, n, final[name].win_rate, n)
                summary[f"z_vs_{name}"] = z
                lines.append(f"  best vs {name}: {final['best'].win_rate - final[name].win_rate:+.4f} "
                             f"win rate, z = {z:+.1f}")
        self.log("\n".join(lines))
    if is_main_process():
        atomic_write_json(self.run_dir / "summary.json", summary)
    return summary
