#!/usr/bin/env bash
# On the GPU machine, from the checkout's root: install the carried real SGLang (.gpu/site.tar.xz, made by
# prepare.sh) into a venv over the image's torch, unpack the tool (.gpu/src.tar.gz), generate the models, then
# run real_run.py for one phase. Everything lands under $OUT (log, results.json, server logs).
#   bench/real_sglang/run.sh PHASE [real_run.py options, e.g. --shape 7b --wrong-every 3]
# PHASE: tp1 tp1a tp1b tp2 tp2b tp8 profile profileb three threeb (tiny shape by default) or
#        prof7b eager7b sweep7b grid7b (7B shape, draft wrong every 3 slots, models written inside the call),
#        profmoe (the Qwen3-MoE shape, 20 GB written inside the call, draft wrong every 3 slots).
set -uo pipefail
PHASE=${1:?phase: tp1, tp2, tp8, profile, prof7b, sweep7b, ... (see the header)}
shift
KIT=${KIT:-$(pwd)/.gpu}   # a folder holding site.tar.xz and src.tar.gz (prepare.sh)
R=/tmp/rs
OUT=${OUT:-/tmp/rs/out}
mkdir -p "$R" "$OUT"
export PYTHONUNBUFFERED=1
# Required on the multi-GPU machines here; also written into every launch environment by the inventory.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TRITON_CACHE_DIR=$R/triton-cache   # persists for the machine's lifetime: later deploys skip compiling
t0=$(date +%s)
if [ ! -x "$R/venv/bin/python" ]; then
  # The image's python3 is itself a venv (/opt/torch/.venv), so --system-site-packages would see the base
  # interpreter, not torch. Instead: a bare venv whose site-packages holds the carried set, and a .pth that appends
  # the image's site directories after it, so SGLang's pins (transformers 5.12.1, tokenizers 0.22.2) shadow the
  # image's and everything else (torch, triton, numpy, ...) comes from the image.
  python3 -m venv --without-pip "$R/venv" || exit 1
  SP=$("$R/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  python3 -c 'import sys
for p in sys.path:
    if p.endswith(("site-packages", "dist-packages")):
        print("import site; site.addsitedir(%r)" % p)' > "$SP/zz_image_site.pth"
  xz -dc "$KIT/site.tar.xz" | tar -x -C "$R" || exit 1
  cp -a "$R/site/." "$SP/" && rm -rf "$R/site"
fi
rm -rf "$R/src" && mkdir -p "$R/src" && tar -xzf "$KIT/src.tar.gz" -C "$R/src" || exit 1
took=$(( $(date +%s) - t0 ))
echo "install: $took s"
cd "$R/src"
# The device call is bounded at 600 s: the driver keeps its closing stop + rollback inside what is left.
"$R/venv/bin/python" bench/real_sglang/real_run.py --phase "$PHASE" --python "$R/venv/bin/python" \
  --models "$R/models" --out "$OUT" --budget-s $(( ${CALL_BUDGET:-570} - took )) "$@" 2>&1 | tee "$OUT/log"
rc=${PIPESTATUS[0]}
# Server logs and the tool's run records come back too (at most 8 files from $OUT).
tar -czf "$OUT/server-logs.tar.gz" -C "$R/work" logs state runs 2>/dev/null
exit "$rc"
