#!/usr/bin/env bash
# Real-GPU smoke check. On a GPU machine with PyTorch + NCCL (no network needed): installs the wheels carried in
# .whl/ (the tool's pure-Python dependencies, and setproctitle into the GPU Python's own environment so the
# simulator's schedulers get SGLang's real process titles), then runs bench/gpu_smoke.py with that Python.
#   bench/gpu_smoke.sh [--tp N]
# Prepare .whl/ on a machine with the package index: see docs/gpu-smoke.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${GPU_PYTHON:-python3}
if [ -d .whl ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/specdeploy-site .whl/*.whl
  "$PY" -m pip install -q --no-index --no-deps .whl/setproctitle-*.whl
  export PYTHONPATH=/tmp/specdeploy-site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
exec "$PY" bench/gpu_smoke.py "$@"
