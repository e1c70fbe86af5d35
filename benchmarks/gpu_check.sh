#!/usr/bin/env bash
# Everything that needs a GPU, checked and timed in one go (about 9 minutes on one H200, plus up to 5 for MuJoCo
# Warp when installed; every stage has a time limit so the whole script stays under 14, 19 with MuJoCo Warp):
#   1. the tests marked gpu: CUDA sync-debug-mode "error" runs of the hot loop in every compile mode, eager vs
#      inductor vs CUDA-graph results, the engine against collect() on CUDA, and every other gpu-marked test;
#   2. short training runs with --compile cudagraphs through the trainer (CLI, checkpoints, evaluation): PPO on
#      CartPole-v1, SAC on Pendulum-v1 (a step budget: exit 0 once spent);
#   3. rl-gpu bench on CartPole-v1 at N=65536 (and 4096): eager vs compiled vs graph-captured, env-only,
#      env + inference, full training;
#   4. SAC and TD3 iterations (one vector step + 4 updates of batch 4096) at N=1024 and 4096 Pendulum-v1
#      environments, eager vs compiled vs one CUDA graph per iteration (benchmarks/gpu_check_offpolicy.py);
#   5. data-parallel PPO training steps/s under torchrun with 1 and with every visible GPU
#      (benchmarks/distributed_throughput.py; with one GPU only the K=1 row, and the NCCL path for one process);
#   6. MAPPO on vmas:navigation at N=65536 worlds (4 agents each): world steps/s of whole iterations, eager vs
#      inductor (benchmarks/gpu_check_mappo.py; skipped when VMAS is not installed).
#   7. the policy layer: PPO with the composed CNN policy on bool frames (eager / inductor / cudagraphs), PPO with
#      a GRU (sequence minibatches, eager) and the host collector's compiled policy half on gym:CartPole-v1
#      (benchmarks/gpu_check_policies.py).
# Results go to $OUT (default artifacts/gpu_check); the exit status is non-zero if any stage failed.
#
#   bash benchmarks/gpu_check.sh            # from the repository root, with .venv installed (make test)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
OUT=${OUT:-artifacts/gpu_check}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
failed=()

stage() {  # stage NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    echo "== $name (limit ${limit}s): $*"
    timeout --signal=INT --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$name.txt"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc after $((SECONDS - start))s" | tee -a "$OUT/summary.txt"
    [ "$rc" -eq 0 ] || failed+=("$name")
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())" \
    | tee -a "$OUT/gpu.txt" || { echo "no usable CUDA device"; exit 2; }

stage pytest_gpu 330 "$PY" -m pytest -q -m gpu -p no:cacheprovider -rs
stage train_cudagraphs 60 "$PY" -m rl_gpu train --env CartPole-v1 --device cuda --compile cudagraphs \
    --num-envs 4096 --num-steps 16 --max-updates 8 --min-updates 8 --eval-every 4 --eval-episodes 64 \
    --final-eval-episodes 64 --seeds 1 --output "$OUT/train" --overwrite
# Learning while collecting on the GPU: APPO with --async (V-trace on a one-version-old rollout), eager.
stage train_appo_async 60 "$PY" -m rl_gpu train --env CartPole-v1 --algo appo --async --device cuda \
    --num-envs 4096 --num-steps 16 --total-timesteps 524288 --eval-every 4 --eval-episodes 64 \
    --final-eval-episodes 64 --seeds 1 --output "$OUT/train_appo" --overwrite
stage bench_cartpole 150 "$PY" -m rl_gpu bench --env CartPole-v1 --device cuda --num-envs 4096 65536 \
    --compile off inductor cudagraphs --repeats 5 --output "$OUT/bench_cartpole.json"
stage train_sac_cudagraphs 90 "$PY" -m rl_gpu train --algo sac --env Pendulum-v1 --device cuda --compile cudagraphs \
    --num-envs 1024 --num-steps 2 --learning-starts 2048 --batch-size 4096 --total-timesteps 24576 \
    --eval-every 6 --eval-episodes 64 --final-eval-episodes 64 --seeds 1 --output "$OUT/train_sac" --overwrite
stage offpolicy 180 "$PY" benchmarks/gpu_check_offpolicy.py --output "$OUT/offpolicy.json"
# Data-parallel PPO under torchrun (NCCL): transitions/s with 1 GPU and with every visible GPU, in one run.
stage distributed 180 "$PY" benchmarks/distributed_throughput.py --device cuda --num-envs 16384 --num-steps 32 \
    --output "$OUT/distributed.json"
if "$PY" -c "import vmas" 2>/dev/null; then
    stage mappo_vmas 120 "$PY" benchmarks/gpu_check_mappo.py --device cuda --num-envs 65536 --num-steps 32 \
        --iterations 3 --rounds 2 --output "$OUT/mappo_vmas.json"
else
    echo "vmas not installed: stage mappo_vmas skipped (pip install 'rl-gpu[vmas]')" | tee "$OUT/mappo_vmas.txt"
fi
stage policies 240 "$PY" benchmarks/gpu_check_policies.py --device cuda --output "$OUT/policies.json"
# MuJoCo Warp (the mujoco-warp extra, installed in the carried .venv): HalfCheetah and Ant at N=4096 and 16384,
# graph-captured steps, PPO training steps/s, agreement with the C engine. Skipped when mujoco_warp is absent.
if "$PY" -c "import mujoco_warp" 2>/dev/null; then
    stage mujoco_warp 300 "$PY" benchmarks/gpu_check_mujoco.py
else
    echo "mujoco_warp not installed: stage mujoco_warp skipped (pip install 'rl-gpu[mujoco-warp]')" | tee "$OUT/mujoco_warp.txt"
fi

echo "results in $OUT/"
if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "all GPU stages passed"
