#!/usr/bin/env bash
# Everything GPU-side in one go, for a bare GPU machine: it has python, torch (CUDA) and
# transformers but none of our other dependencies and no package index.
# First it says what this machine can run (the first lines of its output and of the results
# file): CUDA yes/no and the GPU count, vLLM importable yes/no; without vLLM the vLLM checks
# are deselected (pytest -m "gpu and not vllm") and named as skipped. Then the steps:
#   1. environment: GPUs, torch / CUDA / transformers versions, attention implementation
#   2. the small wheels it is handed (.whl/: msgspec, pyzmq, ...) into a scratch --target dir
#   3. pytest tests/gpu (but test_ipc.py): learner bf16 vs fp32, the FSDP2 learner on NCCL,
#      ZeroMQ weights from CUDA tensors, vLLM CUDA engine, flash-attn
#   4. pytest tests/gpu/test_ipc.py: CUDA IPC between two processes (torch alone; and vLLM's
#      IPC engine with ours, weights.backend vllm_ipc, where vLLM imports)
#   5. -m bench.bench_learner --device cuda --model-size 0.5b   (tokens/s, memory, bf16 MFU)
#   6. -m bench.bench_learner --device cuda --model-size 1.5b
# and writes one results file (markdown: each step's command, exit status, seconds, output).
# Each step has its own time limit; with the probe they stay under 10 minutes.
#
#   scripts/gpu_check.sh [--dry-run] [--wheels DIR] [--results FILE]
#   scripts/gpu_check.sh --fetch-wheels      # on a machine with the index: fill .whl/ (cp312)
#
# --dry-run prints the capabilities and the steps without running a step (the probe imports
# torch and vLLM; GPU_CHECK_CUDA="yes N" | "no 0" and GPU_CHECK_VLLM=yes|no stand in for
# it, as the tests do). Default results file:
# $OUT/gpu_check_results.md when $OUT is set (the device runner's output folder), else
# ./gpu_check_results.md. A failing step is recorded and the next one still runs; the exit
# status is that of the first failing step.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=.whl
RESULTS=${OUT:+$OUT/}gpu_check_results.md
DRY=0
WHEEL_PKGS=(msgspec pyzmq)  # what the GPU image lacks among the gpu tests' imports
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --wheels) WHEELS=$2; shift ;;
    --results) RESULTS=$2; shift ;;
    --fetch-wheels)
      # cp312 manylinux wheels for the GPU image's python 3.12 (about 1 MB together).
      exec "$PY" -m pip download --only-binary=:all: --no-deps --python-version 3.12 \
        --implementation cp --abi cp312 --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "${WHEEL_PKGS[@]}" ;;
    *) echo "gpu_check: unknown argument '$1' (use --dry-run, --wheels DIR, --results FILE," \
         "--fetch-wheels)" >&2; exit 2 ;;
  esac
  shift
done

SCRATCH=${GPU_CHECK_SCRATCH:-}
if [ -z "$SCRATCH" ]; then
  if [ "$DRY" = 1 ]; then
    SCRATCH=/tmp/gpu-check.XXXXXX
  else
    SCRATCH=$(mktemp -d -t gpu-check.XXXXXX)
    trap 'rm -rf "$SCRATCH"' EXIT  # the wheels' target and the model cache: ours alone
  fi
fi
SITE=$SCRATCH/site
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export AGENT_R1_ASYNC_CACHE=$SCRATCH/cache WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
N=0
FIRST_FAIL=0
START=$(date +%s)

step() {  # step NAME LIMIT_S COMMAND...: run COMMAND under `timeout`, record it in $RESULTS
  local name=$1 limit=$2
  shift 2
  N=$((N + 1))
  if [ "$DRY" = 1 ]; then
    echo "step $N: $name (limit ${limit}s): $*"
    return 0
  fi
  echo "== step $N: $name" >&2
  local t0 rc out
  t0=$(date +%s)
  out=$(timeout "$limit" "$@" 2>&1)
  rc=$?
  printf '%s\n' "$out" >&2
  {
    echo "## step $N: $name"
    echo
    echo "\`$*\` — exit $rc$([ $rc = 124 ] && echo " (time limit ${limit}s)"), $(($(date +%s) - t0)) s"
    echo
    echo '```'
    printf '%s\n' "$out" | tail -n 200
    echo '```'
    echo
  } >> "$RESULTS"
  [ $rc != 0 ] && [ "$FIRST_FAIL" = 0 ] && FIRST_FAIL=$rc
  return 0
}

# What this machine can run, said before anything else. vLLM counts as importable only when
# `import vllm` succeeds within the limit (a real import: a package that is present but broken
# is a "no", with the reason).
TORCH_PROBE_S=15
VLLM_PROBE_S=25
if [ -n "${GPU_CHECK_CUDA:-}" ]; then
  read -r CUDA GPUS <<< "$GPU_CHECK_CUDA"
else
  read -r CUDA GPUS <<< "$(timeout "$TORCH_PROBE_S" "$PY" -c "import torch; n = torch.cuda.device_count() \
if torch.cuda.is_available() else 0; print('yes' if n else 'no', n)" 2>/dev/null || echo "no 0")"
fi
if [ -n "${GPU_CHECK_VLLM:-}" ]; then
  VLLM=$GPU_CHECK_VLLM
  VLLM_WHY="(GPU_CHECK_VLLM=$GPU_CHECK_VLLM)"
else
  VLLM_WHY=$(timeout "$VLLM_PROBE_S" "$PY" -c "import vllm; print('vllm', vllm.__version__)" 2>&1)
  case $? in
    0) VLLM=yes; VLLM_WHY="(${VLLM_WHY##*$'\n'})" ;;
    124) VLLM=no; VLLM_WHY="(import vllm took more than ${VLLM_PROBE_S}s)" ;;
    *) VLLM=no; VLLM_WHY="(${VLLM_WHY##*$'\n'})" ;;
  esac
fi
RUNS="learner bf16 vs fp32 on CUDA, the FSDP2 learner on NCCL, ZeroMQ weights from CUDA \
tensors, CUDA IPC between two processes (torch), flash-attn where installed, bf16 MFU (bench)"
SKIPS=""
MARK="gpu"
if [ "$VLLM" = yes ]; then
  RUNS="$RUNS, the vLLM CUDA engine (tests/gpu/test_vllm_cuda.py), vLLM's IPC engine across \
two processes (tests/gpu/test_ipc.py, weights.backend vllm_ipc)"
else
  MARK="gpu and not vllm"
  SKIPS="no vLLM: skipped the vLLM CUDA engine (tests/gpu/test_vllm_cuda.py) and vLLM's IPC \
engine across two processes (tests/gpu/test_ipc.py::test_vllm_ipc_engine_receives_the_learners\
_cuda_tensors_in_another_process)"
fi
if [ "$CUDA" != yes ]; then
  SKIPS="${SKIPS:+$SKIPS; }no CUDA: the gpu tests skip themselves (each says why), the learner \
benches are skipped"
fi
CAPS=("gpu_check: CUDA $CUDA, $GPUS GPU(s); vLLM importable $VLLM $VLLM_WHY"
      "gpu_check: runs: $RUNS"
      "gpu_check: ${SKIPS:-skipped: nothing}")

if [ "$DRY" = 1 ]; then
  printf '%s\n' "${CAPS[@]}"
  echo "gpu_check --dry-run: results would go to $RESULTS; scratch $SCRATCH; PYTHONPATH $PYTHONPATH"
  echo "gpu_check --dry-run: the probe takes at most ${TORCH_PROBE_S}s (torch) + ${VLLM_PROBE_S}s (vllm)"
else
  mkdir -p "$SITE" "$(dirname "$RESULTS")"
  printf '%s\n' "${CAPS[@]}" >&2
  { printf '%s\n' "${CAPS[@]}"; echo; echo "# GPU check, $(date -u +%Y-%m-%dT%H:%MZ), $(hostname)"
    echo; } > "$RESULTS"
fi

step "environment" 20 bash -c "nvidia-smi -L; $PY -c \"import torch, transformers; \
from agent_r1_async.models import attention_implementation as a; \
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', \
transformers.__version__); print('devices', [torch.cuda.get_device_name(i) for i in \
range(torch.cuda.device_count())]); print('attention', *a('cuda'))\""
# No index on the GPU machine: only the wheels handed over, and none of their dependencies.
# Without pip, unpacking a wheel into the target is its installation (no scripts needed here).
step "wheels from $WHEELS into $SITE" 20 bash -c "ls $WHEELS/*.whl && { $PY -m pip install \
--no-index --no-deps --disable-pip-version-check --target $SITE $WHEELS/*.whl || $PY -c \
'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
$SITE $WHEELS/*.whl; }"
step "pytest -m \"$MARK\" tests/gpu" 120 "$PY" -m pytest -m "$MARK" tests/gpu \
  --ignore=tests/gpu/test_ipc.py -v -rs -p no:cacheprovider
step "CUDA IPC between two processes" 60 "$PY" -m pytest -m "$MARK" tests/gpu/test_ipc.py \
  -v -rs -p no:cacheprovider
if [ "$CUDA" = yes ]; then
  step "learner bench 0.5b" 140 "$PY" -m bench.bench_learner --device cuda --model-size 0.5b
  step "learner bench 1.5b" 200 "$PY" -m bench.bench_learner --device cuda --model-size 1.5b
fi

if [ "$DRY" = 0 ]; then
  echo "total $(($(date +%s) - START)) s; first failing exit status: $FIRST_FAIL" >> "$RESULTS"
  echo "gpu_check: results in $RESULTS" >&2
fi
exit "$FIRST_FAIL"
