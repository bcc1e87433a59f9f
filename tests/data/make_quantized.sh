#!/usr/bin/env bash
# Regenerates the GGUF files in tests/data that llama.cpp's llama-quantize wrote: small F32
# models (lattice make-model, and gguf-py through tests/gguf_py/write_model.py) quantized
# to the K-quant mixes large models ship in (Q2_K, Q3_K_M, Q4_K_M), to the 32-element types
# (Q4_1, Q5_0, Q5_1, IQ4_NL), and a deepseek2 with DeepSeek-V3's row widths in the mixes whose
# 256-element types llama-quantize must replace for its 128-wide attn_k_b rows. The files are checked in
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

quantize() {  # [llama-quantize options] source.gguf out-name type
  local opts=()
  while [[ $1 == --* ]]; do opts+=("$1" "$2"); shift 2; done
  "$bin/llama-quantize" "${opts[@]}" "$1" "$here/$2" "$3" >"$tmp/quantize.log" 2>&1 ||
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
# Dense llama with 128-wide rows in the 32-element types, as llama-quantize writes them when
# asked (its 128-column output.weight falls back from Q6_K to Q8_0).
"$lattice" make-model --arch llama --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 256 --vocab 512 \
  --type f32 --seed 4 -o "$tmp/llama128-f32.gguf" >/dev/null
for t in Q4_1 Q5_0 Q5_1 IQ4_NL; do quantize "$tmp/llama128-f32.gguf" "llama-${t,,}.gguf" "$t"; done

# deepseek2 with DeepSeek-V3's row widths where they decide the types: nope 128 (attn_k_b rows,
# not a multiple of 256), kv_lora, q_lora and dim multiples of 256; one dense block, one of 4
# experts in 2 groups plus a shared one; YaRN. What llama-quantize (80fb11a) writes for attn_k_b:
#   Q2_K, Q3_K_S/M/L -> Q4_0;  Q4_K_S/M -> Q5_0;  Q5_K_S/M -> Q5_1;  Q6_K -> Q8_0
# (never Q4_1). Builds of 2024-25, which made the DeepSeek V3 / Kimi K2 files people download,
# fell back from Q2_K / Q3_K to IQ4_NL instead ("using fallback quantization iq4_nl"): the Q3_K_M
# file asks for IQ4_NL on attn_k_b to hold what those files hold.
"$lattice" make-model --arch deepseek2 --dim 256 --layers 2 --heads 2 --ffn 256 --vocab 512 --q-lora 256 \
  --kv-lora 256 --rope-dim 32 --nope-dim 128 --v-dim 128 --experts 4 --experts-used 2 --expert-groups 2 \
  --groups-used 1 --shared-experts 1 --dense-layers 1 --expert-ffn 256 --rope-scale 4 --type f32 --seed 9 \
  -o "$tmp/deepseek2-f32.gguf" >/dev/null
quantize "$tmp/deepseek2-f32.gguf" deepseek2-q2_k.gguf Q2_K
quantize --tensor-type attn_k_b=iq4_nl "$tmp/deepseek2-f32.gguf" deepseek2-q3_k_m.gguf Q3_K_M
quantize "$tmp/deepseek2-f32.gguf" deepseek2-q4_k_m.gguf Q4_K_M
quantize "$tmp/deepseek2-f32.gguf" deepseek2-q5_k_m.gguf Q5_K_M
ls -l "$here"/*.gguf
