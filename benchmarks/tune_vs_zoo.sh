#!/usr/bin/env bash
# rl-gpu tune against RL-Zoo's --optimize on one task: our sweep, RL-Zoo's on the same budget (when rl_zoo3 imports),
# then the preset and the sweep's best settings trained on 3 fresh seeds each (final evaluation's IQM over the seeds).
#   bash benchmarks/tune_vs_zoo.sh ENV ALGO TRIALS BUDGET EVALS [OUT] [--fixed NAME=VALUE ...]
#   bash benchmarks/tune_vs_zoo.sh Pendulum-v1 sac 16 4000 4 artifacts/tune-pendulum final_eval_episodes=200
#   ZOO_TRIALS=3 ZOO_TIMEOUT=1200 bash benchmarks/tune_vs_zoo.sh HalfCheetah-v5 ppo 16 300000 4 artifacts/tune-cheetah
# PYTHON=... picks our interpreter, ZOO_PYTHON=... RL-Zoo's; ZOO_TRIALS (default TRIALS) and ZOO_TIMEOUT (seconds,
# default none) bound RL-Zoo's side when its trials are slow. Trials, budget, sampler (TPE), pruner (median) and
# validations per trial are the same on both sides; each side's trials per hour come from its own wall time here.
set -euo pipefail
ENV=$1 ALGO=$2 TRIALS=$3 BUDGET=$4 EVALS=$5
OUT=${6:-artifacts/tune-$ENV-$ALGO}
FIXED=("${@:7}")
PYTHON=${PYTHON:-python}
ZOO_PYTHON=${ZOO_PYTHON:-$PYTHON}
ZOO_TRIALS=${ZOO_TRIALS:-$TRIALS}
export OMP_NUM_THREADS=1
mkdir -p "$OUT"
t0=$(date +%s)
$PYTHON -m rl_gpu tune --env "$ENV" --algo "$ALGO" --trials "$TRIALS" --budget "$BUDGET" --evals "$EVALS" \
    ${FIXED[@]:+--fixed "${FIXED[@]}"} --device cpu --output "$OUT/sweep" | tail -n $((TRIALS + 2))
t1=$(date +%s)
echo "rl_gpu: $TRIALS trials in $((t1 - t0)) s: $(( TRIALS * 3600 / (t1 - t0 > 0 ? t1 - t0 : 1) )) trials/hour"
if $ZOO_PYTHON -c "import rl_zoo3" 2>/dev/null; then
    # RL-Zoo's settings for the id; where its file has none (its MuJoCo entries are v4), its MuJoCo defaults.
    ZOO_CONF=()
    zoo_yml=$($ZOO_PYTHON -c "import os, rl_zoo3; print(os.path.dirname(rl_zoo3.__file__))")/hyperparams/$ALGO.yml
    if ! grep -q "^$ENV:" "$zoo_yml" 2>/dev/null; then
        printf '%s:\n  policy: MlpPolicy\n  n_timesteps: %s\n  normalize: true\n' "$ENV" "$BUDGET" > "$OUT/zoo.yml"
        ZOO_CONF=(--conf-file "$OUT/zoo.yml")
    fi
    ${ZOO_TIMEOUT:+timeout $ZOO_TIMEOUT} $ZOO_PYTHON -m rl_zoo3.train --algo "$ALGO" --env "$ENV" -n "$BUDGET" \
        -optimize --n-trials "$ZOO_TRIALS" --n-jobs 1 --sampler tpe --pruner median --n-evaluations "$EVALS" \
        --no-optim-plots --seed 0 --device cpu ${ZOO_CONF[@]:+"${ZOO_CONF[@]}"} --log-folder "$OUT/zoo" \
        > "$OUT/zoo.log" 2>&1 || echo "RL-Zoo stopped (exit $?) after $(( $(date +%s) - t1 )) s"
    t2=$(date +%s)
    done_trials=$(grep -cE "Trial [0-9]+ (finished|pruned)" "$OUT/zoo.log" || true)
    grep -E "Trial [0-9]+ (finished|pruned)" "$OUT/zoo.log" | sed -E 's/ and parameters.*//' || true
    echo "RL-Zoo: $done_trials trials in $((t2 - t1)) s: $(( done_trials * 3600 / (t2 - t1 > 0 ? t2 - t1 : 1) )) trials/hour"
else
    echo "RL-Zoo: rl_zoo3 does not import under $ZOO_PYTHON; skipped"
fi
$PYTHON -m rl_gpu train --algo "$ALGO" --env "$ENV" --total-timesteps "$BUDGET" \
    ${FIXED[@]:+$(printf -- "--%s " "${FIXED[@]//_/-}")} \
    --seeds 1 2 3 --device cpu --quiet --output "$OUT/preset" --overwrite | tail -n 3 || true
$PYTHON -m rl_gpu train --config "$OUT/sweep/best.json" --seeds 1 2 3 --device cpu --quiet \
    --output "$OUT/best" --overwrite | tail -n 3 || true
