#!/usr/bin/env bash
# Everything that needs a GPU, checked and timed in one go: about 7 minutes on one H200 (2026-12-04), 8 on one H100
# (476 s on 2026-12-05, three stages cut at the H200's limits, raised since). Every stage has a time limit, an upper
# bound (a stage cut at its limit is reported as failed, exit 124). Two phases:
#   A. checks, run side by side (their speed is not reported): the tests marked gpu (CUDA sync-debug-mode "error"
#      runs of the hot loop in every compile mode, eager vs inductor vs CUDA-graph results, the engine against
#      collect() on CUDA, SAC/TD3 modes, loading/exporting on CUDA) on 6 pytest workers, next to short training
#      runs through the CLI (checkpoints, evaluation): PPO --compile cudagraphs on CartPole-v1, APPO --async
#      (V-trace on a one-version-old rollout), SAC --compile cudagraphs on Pendulum-v1;
#   B. timings, one stage at a time on a quiet GPU: rl-gpu bench on CartPole-v1 at N=65536 (eager vs Inductor vs
#      CUDA graphs: env-only, env + inference, full training); SAC and TD3 iterations at N=4096
#      (gpu_check_offpolicy.py); the policy layer (CNN on MinAtar frames in three modes, the host collector's
#      compiled policy half: gpu_check_policies.py; PPO with a GRU and with an LSTM, eager vs graph-captured: its memory
#      stage); bf16 and fp16 against fp32 for PPO's update
#      (precision.py at 4096 envs); MAPPO on vmas:navigation at N=65536 worlds, eager, compiled and with the
#      world critic (gpu_check_mappo.py; skipped
#      without VMAS); GRPO's generation tokens/s, update time and peak memory for a 256x6 transformer at 4096 rows
#      (llm/grpo_throughput.py) and its decoding step eager, compiled and as a CUDA graph (llm/decode_compile.py); ten CartPole variants in one batch against one task
#      (multitask_throughput.py); data-parallel PPO under torchrun (distributed_throughput.py); MuJoCo Warp when
#      installed.
# Prints one table at the end (stage, exit, seconds, its last line); each stage's output is in $OUT/<stage>.txt.
#
#   bash benchmarks/gpu_check.sh            # from the repository root; OUT=... to choose the folder
#   STAGES="pytest_gpu policies" bash benchmarks/gpu_check.sh      # only these stages (a rerun)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
OUT=${OUT:-artifacts/gpu_check}
mkdir -p "$OUT"
: > "$OUT/stages.tsv"
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1

stage() {  # stage NAME SECONDS COMMAND...   (appends "name<TAB>exit<TAB>seconds" to stages.tsv)
    local name=$1 limit=$2
    shift 2
    if [ -n "${STAGES:-}" ] && [[ " $STAGES " != *" $name "* ]]; then return 0; fi
    local start=$SECONDS
    echo "== $name (limit ${limit}s): $*"
    timeout --signal=INT --kill-after=10 "$limit" "$@" > "$OUT/$name.txt" 2>&1
    local rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - start))" >> "$OUT/stages.tsv"
    echo "== $name: exit $rc after $((SECONDS - start))s"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())" \
    | tee -a "$OUT/gpu.txt" || { echo "no usable CUDA device"; exit 2; }
TRAIN=(--device cuda --eval-episodes 64 --final-eval-episodes 64 --seeds 1 --overwrite)

# Phase A: checks side by side.
stage pytest_gpu 125 "$PY" -m pytest -q -m gpu -p no:cacheprovider -rs -n 6 --durations=15 &
tests=$!
stage train_cudagraphs 50 "$PY" -m rl_gpu train --env CartPole-v1 --compile cudagraphs --num-envs 4096 \
    --num-steps 16 --total-timesteps 524288 --eval-every 4 --output "$OUT/train" "${TRAIN[@]}"
stage train_appo_async 40 "$PY" -m rl_gpu train --env CartPole-v1 --algo appo --async --num-envs 4096 \
    --num-steps 16 --total-timesteps 524288 --eval-every 4 --output "$OUT/train_appo" "${TRAIN[@]}"
stage train_sac_cudagraphs 50 "$PY" -m rl_gpu train --algo sac --env Pendulum-v1 --compile cudagraphs \
    --num-envs 1024 --num-steps 2 --learning-starts 2048 --batch-size 4096 --total-timesteps 24576 \
    --eval-every 6 --output "$OUT/train_sac" "${TRAIN[@]}"
wait "$tests"

# Phase B: timings, one at a time.
stage bench_cartpole 75 "$PY" -m rl_gpu bench --env CartPole-v1 --device cuda --num-envs 65536 \
    --compile off inductor cudagraphs --repeats 2 --output "$OUT/bench_cartpole.json"
stage offpolicy 55 "$PY" benchmarks/gpu_check_offpolicy.py --num-envs 4096 --iterations 8 --repeats 2 \
    --output "$OUT/offpolicy.json"
stage policies 90 "$PY" benchmarks/gpu_check_policies.py --device cuda --calls 2 --rounds 2 \
    --rows cnn breakout breakout-bf16 breakout-fp16 host --output "$OUT/policies.json"
stage memory 60 "$PY" benchmarks/gpu_check_policies.py --device cuda --calls 2 --rounds 2 --rows gru lstm \
    --output "$OUT/memory.json"
stage precision 20 "$PY" benchmarks/precision.py --device cuda --num-envs 4096 --rounds 3 --precisions bf16 fp16
if "$PY" -c "import vmas" 2>/dev/null; then
    stage mappo_vmas 90 "$PY" benchmarks/gpu_check_mappo.py --device cuda --num-envs 65536 --num-steps 32 \
        --iterations 2 --rounds 2 --output "$OUT/mappo_vmas.json"
fi
stage multitask 15 "$PY" benchmarks/multitask_throughput.py --device cuda --num-envs 65536 --tasks 10 --rounds 3
stage grpo 10 "$PY" benchmarks/llm/grpo_throughput.py --device cuda --num-envs 4096 --sizes 256x6 --iterations 3
stage decode 40 "$PY" benchmarks/llm/decode_compile.py --device cuda --size 256x6 --num-envs 4096 --rounds 2
stage distributed 45 "$PY" benchmarks/distributed_throughput.py --device cuda --num-envs 16384 --num-steps 32 \
    --iterations 5 --output "$OUT/distributed.json"
if "$PY" -c "import mujoco_warp" 2>/dev/null; then
    stage mujoco_warp 120 "$PY" benchmarks/gpu_check_mujoco.py --sizes 4096
fi

echo
echo "GPU check, $(head -2 "$OUT/gpu.txt" | tail -1)"
"$PY" - "$OUT" <<'PYEOF'
import pathlib, sys
out = pathlib.Path(sys.argv[1])
print(f"| stage | exit | seconds | last line of {out}/<stage>.txt |\n| --- | ---: | ---: | --- |")
for row in (out / "stages.tsv").read_text().splitlines():
    name, rc, seconds = row.split("\t")
    lines = [l.strip() for l in (out / f"{name}.txt").read_text(errors="replace").splitlines() if l.strip()]
    print(f"| {name} | {rc} | {seconds} | {(lines[-1] if lines else '')[:110].replace('|', '/')} |")
PYEOF
if awk -F'\t' '$2 != 0 {bad=1} END {exit bad}' "$OUT/stages.tsv"; then
    echo "all GPU stages passed"
else
    echo "FAILED: $(awk -F'\t' '$2 != 0 {printf "%s ", $1}' "$OUT/stages.tsv")"
    exit 1
fi
