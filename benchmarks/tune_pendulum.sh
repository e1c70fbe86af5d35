#!/usr/bin/env bash
# rl-gpu tune on Pendulum-v1 (SAC): the sweep, the same sweep with RL-Zoo's --optimize (when rl_zoo3 imports), then
# the preset and the sweep's best settings trained on 3 fresh seeds each, final evaluation's IQM over the seeds.
#   bash benchmarks/tune_pendulum.sh [OUT]      (PYTHON=... picks the interpreter; ZOO_PYTHON=... RL-Zoo's)
# Trials, budget and validations are the same on both sides: 16 trials of 4,000 env steps, TPE, median pruner,
# 4 evaluations per trial. Each side's trials per hour come from its own wall time in this one run.
set -euo pipefail
OUT=${1:-artifacts/tune-pendulum}
PYTHON=${PYTHON:-python}
ZOO_PYTHON=${ZOO_PYTHON:-$PYTHON}
TRIALS=16 BUDGET=4000 EVALS=4
export OMP_NUM_THREADS=1
mkdir -p "$OUT"
t0=$(date +%s)
$PYTHON -m rl_gpu tune --env Pendulum-v1 --algo sac --trials $TRIALS --budget $BUDGET --evals $EVALS \
    --fixed final_eval_episodes=200 --device cpu --output "$OUT/sweep" | tail -n $((TRIALS + 2))
t1=$(date +%s)
echo "rl_gpu: $TRIALS trials in $((t1 - t0)) s: $(( TRIALS * 3600 / (t1 - t0 > 0 ? t1 - t0 : 1) )) trials/hour"
if $ZOO_PYTHON -c "import rl_zoo3" 2>/dev/null; then
    $ZOO_PYTHON -m rl_zoo3.train --algo sac --env Pendulum-v1 -n $BUDGET -optimize --n-trials $TRIALS --n-jobs 1 \
        --sampler tpe --pruner median --n-evaluations $EVALS --no-optim-plots --seed 0 --device cpu \
        --log-folder "$OUT/zoo" > "$OUT/zoo.log" 2>&1
    t2=$(date +%s)
    grep -E "Best trial|Value:" "$OUT/zoo.log" | head -3
    echo "RL-Zoo: $TRIALS trials in $((t2 - t1)) s: $(( TRIALS * 3600 / (t2 - t1 > 0 ? t2 - t1 : 1) )) trials/hour"
else
    echo "RL-Zoo: rl_zoo3 does not import under $ZOO_PYTHON; skipped"
fi
$PYTHON -m rl_gpu train --algo sac --env Pendulum-v1 --total-timesteps $BUDGET --final-eval-episodes 200 \
    --seeds 1 2 3 --device cpu --quiet --output "$OUT/preset" --overwrite | tail -n 3 || true
$PYTHON -m rl_gpu train --config "$OUT/sweep/best.json" --seeds 1 2 3 --device cpu --quiet \
    --output "$OUT/best" --overwrite | tail -n 3 || true
