#!/usr/bin/env bash
# Prepare a real SGLang 0.5.16 for the GPU machines (no network there, ≤ 64 MiB copied per call).
# Run on a machine that reaches the package index. Writes two archives into $DEST (together one device call):
#   site.tar.xz  the wheels below, unpacked and trimmed (installed on the GPU machine into a venv made with
#                --system-site-packages over the image's torch 2.11.0+cu130, so SGLang's pins shadow the image's);
#                built once (REBUILD_SITE=1 to rebuild);
#   src.tar.gz   `git archive` of this checkout's HEAD (the tool, the model generator, the run script).
# Usage: bench/real_sglang/prepare.sh [DEST]      (default DEST: .gpu, which .git/info/exclude must ignore)
#
# Every wheel and why (the "imported by" column is bench/real_sglang/import_chase.py's output on the unpacked
# set: the first SGLang module that pulls the package in at module level on a Llama or Qwen3-MoE + EAGLE-3 server
# with the Triton attention backend; see docs/real-sglang.md). The GPU image already has torch, triton, numpy, scipy,
# einops, aiohttp, requests, psutil, pillow, sentencepiece, tiktoken, tqdm, uvloop, prometheus-client,
# nvidia-ml-py, packaging, filelock, huggingface-hub, safetensors, httpx, anyio, h11, click, annotated-doc,
# accelerate, jinja2, pyyaml, rich: those are not carried unless SGLang or the tool pins another version.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=$(realpath -m "${1:-$ROOT/.gpu}")
WORK=${PREPARE_WORK:-/tmp/specdeploy-real-sglang}
PY=${PYTHON:-python3}
WHEELS=(
  sglang==0.5.16               # the server (0.5.12-0.5.16 pin torch 2.11.0, the GPU image's torch)
  sgl-deep-gemm==0.1.4.post1   # deep_gemm: CUDA graph capture imports it on Hopper (without it capture fails;
                               # real-0.5.16-h200/cuda-graphs-on-deep_gemm-missing.log)
  sglang-kernel==0.4.5         # sgl_kernel: rmsnorm/activation/sampling kernels (sm90/common_ops), triton_kernels
  flashinfer-python==0.6.14    # flashinfer.sampling, imported by sglang.srt.layers.sampler
  transformers==5.12.1         # SGLang 0.5.16's pin: the image's 5.17 fails ('qwen3_asr' is already used)
  tokenizers==0.22.2           # transformers 5.12.1 wants tokenizers <= 0.23.0 (image: 0.23.2)
  pydantic==2.14.4             # fastapi, sglang.srt.entrypoints.openai.protocol; the tool's inventory too
  pydantic_core==2.50.5        # pydantic
  typing_extensions==4.16.0    # pydantic 2.14 and fastapi want a recent one
  annotated_types==0.8.0       # pydantic
  typing_inspection==0.4.5     # pydantic
  dill==0.4.1                  # sglang.srt.sampling.custom_logit_processor
  openai==2.6.1                # sglang.srt.entrypoints.openai.protocol (openai.types.responses)
  jiter==0.19.0                # openai
  distro==1.9.0                # openai
  sniffio==1.3.1               # openai
  xgrammar==0.2.1              # sglang.srt.entrypoints.openai.protocol, default grammar backend (libxgrammar.a dropped)
  apache-tvm-ffi==0.1.11       # xgrammar and sglang.jit_kernel (tvm_ffi)
  fastapi==0.121.3             # sglang.srt.entrypoints.http_server (newer fastapi imports opentelemetry)
  starlette==0.50.0            # fastapi 0.121.3's range; sglang.srt.utils.common
  uvicorn==0.54.0              # sglang.srt.entrypoints.http_server
  orjson==3.13.0               # sglang.srt.utils.common
  pyzmq==27.3.0                # zmq: the tokenizer/scheduler/detokenizer IPC (sglang.srt.entrypoints.engine)
  pybase64==1.5.1              # sglang.srt.managers.tokenizer_manager
  setproctitle==1.3.8          # sglang.srt.managers.scheduler: the sglang::scheduler_TPn titles
  msgspec==0.23.0              # sglang.srt.managers.io_struct
  partial-json-parser==0.2.1.1.post7  # sglang.srt.function_call
  interegular==0.3.3           # sglang.srt.constrained outlines backends (lazy; hand-run set)
  python-multipart==0.0.34     # starlette.requests (form parsing)
  compressed-tensors==0.20.1   # sglang.srt.layers.quantization (imported by the quantization registry)
  torch-memory-saver==0.0.10   # sglang.srt.utils.torch_memory_saver_adapter
  loguru==0.7.3                # compressed_tensors.logger
  gguf==0.19.0                 # sglang.srt.layers.quantization.gguf
  zstandard==0.25.0            # sglang.srt.entrypoints.http_request_decompression (cffi backend .so dropped)
  watchfiles==1.3.0            # uvicorn.supervisors.watchfilesreload
  jsonschema==4.26.0           # sglang.srt.entrypoints.openai.serving_chat
  jsonschema-specifications==2025.9.1  # jsonschema
  referencing==0.37.0          # jsonschema
  rpds-py==2026.9.1              # jsonschema
  humming-kernels==0.1.10      # the 'humming' quantization method SGLang registers (hand-run set)
  helion==0.2.6                # sglang.jit_kernel helion kernels (hand-run set)
  soundfile==0.13.1            # SGLang's pin; sglang.srt.entrypoints.openai.streaming_asr
  cffi==2.1.1                  # soundfile
  pycparser==3.12              # cffi
  invoke==2.2.1                # the tool's CLI (inv)
  tenacity==9.2.1              # the tool
  jinja2==3.1.6                # the tool's templates (pinned)
  markupsafe==3.0.3            # jinja2
  pyyaml==6.0.3                # the tool's inventory
  rich==15.0.0                 # the tool's tables
  markdown_it_py==4.3.0        # rich
  mdurl==0.1.2                 # rich
  pygments==2.21.0             # rich
)
# Left out: llguidance and openai-harmony (lazy imports a Llama + EAGLE-3 server never reaches), so the set with
# deep_gemm stays under a call's 64 MiB.
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp)
for p in manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 \
         manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 linux_x86_64 any; do
  PLAT+=(--platform "$p")
done
mkdir -p "$WORK/whl" "$DEST"
if [ ! -f "$DEST/site.tar.xz" ] || [ "${REBUILD_SITE:-0}" = 1 ]; then
specs=(); for w in "${WHEELS[@]}"; do specs+=("$w"); done
"$PY" -m pip download -q --no-deps "${PLAT[@]}" -d "$WORK/whl" "${specs[@]}"
rm -rf "$WORK/site" && mkdir -p "$WORK/site"
for w in "$WORK"/whl/*.whl; do
  case "$(basename "$w")" in
    sglang_kernel-*)
      # 1.1 GB of the kernel wheel is flash_ops (FA3, never imported with --attention-backend triton); flashmla,
      # infllm and the sm100 build serve other models or GPUs. What stays: sm90/common_ops + python (15 MB).
      unzip -q -o "$w" -d "$WORK/site" -x 'sgl_kernel/flash_ops.abi3.so' 'sgl_kernel/flashmla_ops.abi3.so' \
        'sgl_kernel/infllm_ops*' 'sgl_kernel/sm100/*' ;;
    fabric-*|paramiko-*) ;;   # the local connection kind needs neither
    *) unzip -q -o "$w" -d "$WORK/site" ;;
  esac
done
rm -f "$WORK/site/xgrammar/lib/libxgrammar.a"                     # static library: only for building against
rm -f "$WORK/site"/zstandard/_cffi.cpython-*.so                     # the C backend is the one used
# IPython: sglang/utils.py imports `from IPython.display import HTML, display` at module level (notebook helpers);
# a two-name stand-in spares carrying IPython and its 20 dependencies.
mkdir -p "$WORK/site/IPython"
printf '"""Stand-in for IPython (specdeploy real-SGLang kit): sglang/utils.py imports these two names."""\n' \
  > "$WORK/site/IPython/__init__.py"
printf 'class HTML:\n    def __init__(self, *a, **k):\n        pass\n\n\ndef display(*a, **k):\n    pass\n' \
  > "$WORK/site/IPython/display.py"
"$PY" "$ROOT/bench/real_sglang/import_chase.py" "$WORK/site" > "$DEST/import_chase.txt"
tar -C "$WORK" -cf - site | xz -T0 -6 > "$DEST/site.tar.xz.tmp"
mv "$DEST/site.tar.xz.tmp" "$DEST/site.tar.xz"
fi
git -C "$ROOT" archive --format=tar.gz -o "$DEST/src.tar.gz" HEAD
du -m "$DEST/site.tar.xz" "$DEST/src.tar.gz"
echo "copy both with one device call: carry [$(basename "$DEST")] (limit 64 MiB with the checkout)"
