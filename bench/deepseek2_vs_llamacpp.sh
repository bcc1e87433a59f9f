#!/bin/bash
# The issue-14 "DeepSeek-V3 proportions" shape (deepseek2, MLA, Q4_0): lattice's bench engine
# and llama.cpp's llama-bench one after the other on the same file (docs/BENCHMARKS.md).
#   LATTICE=build/lattice LLAMACPP_BIN=/tmp/lattice-peers/llama.cpp/build/bin bench/deepseek2_vs_llamacpp.sh [DIR]
set -euo pipefail
LATTICE=${LATTICE:-build/lattice}
BIN=${LLAMACPP_BIN:-/tmp/lattice-peers/llama.cpp/build/bin}
DIR=${1:-/tmp}
F="$DIR/dsv3-proportions-q4_0.gguf"
if [ ! -f "$F" ]; then
  "$LATTICE" make-model --arch deepseek2 --dim 2048 --layers 16 --dense-layers 1 --ffn 5632 --heads 16 \
    --q-lora 512 --kv-lora 256 --rope-dim 32 --nope-dim 64 --v-dim 64 --experts 64 --expert-groups 4 \
    --groups-used 2 --experts-used 6 --shared-experts 1 --expert-ffn 512 --vocab 32000 --type q4_0 -o "$F"
fi
"$LATTICE" bench engine -m "$F" -p 64 -n 32 -t 1,2
LD_LIBRARY_PATH="$BIN" "$BIN/llama-bench" -m "$F" -p 64 -n 32 -t 1,2
