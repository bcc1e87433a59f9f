#!/usr/bin/env bash
# Regenerates the GGUF files in tests/data that llama.cpp's llama-quantize wrote: small F32
# models (lattice make-model, and gguf-py through tests/gguf_py/write_model.py) quantized
# to the K-quant mixes large models ship in (Q2_K, Q3_K_M, Q4_K_M). The files are checked in
# (a few hundred KB each) so the tests need no llama.cpp build; this script is the record of
# how they were made. Made with llama.cpp commit 80fb11a (the tree
# ../shared/bench/peers/build-llamacpp.sh builds at /tmp/lattice-peers/llama.cpp).
#
#   usage: tests/data/make_quantized.sh [lattice binary] [llama.cpp bin dir]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
lattice=${1:-$repo/build/lattice}
bin=${2:-/tmp/lattice-peers/llama.cpp/build/bin}
export LD_LIBRARY_PATH=$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

quantize() {  # source.gguf out-name type
  "$bin/llama-quantize" "$1" "$here/$2" "$3" >"$tmp/quantize.log" 2>&1 ||
    { cat "$tmp/quantize.log" >&2; exit 1; }
}

# Dense llama: every matrix has 256 or 512 columns, so no K-quant falls back to a 32-block type.
"$lattice" make-model --arch llama --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 256 --vocab 512 \
  --type f32 --seed 3 -o "$tmp/llama-f32.gguf" >/dev/null
quantize "$tmp/llama-f32.gguf" llama-q2_k.gguf Q2_K
quantize "$tmp/llama-f32.gguf" llama-q3_k_m.gguf Q3_K_M
quantize "$tmp/llama-f32.gguf" llama-q4_k_m.gguf Q4_K_M

# Qwen3-MoE, one layer of 4 experts (2 used): the 3-D expert tensors in Q2_K's mix.
"$lattice" make-model --arch qwen3moe --dim 256 --layers 1 --heads 4 --kv-heads 2 --head-dim 64 \
  --experts 4 --experts-used 2 --expert-ffn 256 --vocab 512 --type f32 --seed 5 -o "$tmp/qwen3moe-f32.gguf" >/dev/null
quantize "$tmp/qwen3moe-f32.gguf" qwen3moe-q2_k.gguf Q2_K

# gguf-py's llama file (written as convert_hf_to_gguf.py would) in Q3_K_M.
# (Debian's python3-numpy belongs to /usr/bin/python3, which a pyenv python3 may not see.)
py=python3
python3 -c 'import numpy' 2>/dev/null || py=/usr/bin/python3
PYTHONPATH=$("$repo/scripts/gguf_py.sh") "$py" "$repo/tests/gguf_py/write_model.py" --arch llama --type f32 \
  --seed 7 --ffn 256 --vocab 512 -o "$tmp/gguf-py-llama-f32.gguf"
quantize "$tmp/gguf-py-llama-f32.gguf" gguf-py-llama-q3_k_m.gguf Q3_K_M
PYTHONPATH=$("$repo/scripts/gguf_py.sh") "$py" "$repo/tests/gguf_py/write_model.py" --arch mixtral --type f32 \
  --seed 7 --layers 1 --vocab 512 -o "$tmp/gguf-py-mixtral-f32.gguf"
quantize "$tmp/gguf-py-mixtral-f32.gguf" gguf-py-mixtral-q2_k.gguf Q2_K
ls -l "$here"/*.gguf
