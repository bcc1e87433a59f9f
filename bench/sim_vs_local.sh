#!/bin/sh
# The simulator against lattice's own runs on this machine (issue 16, "Our own runs here"), over
# shared memory, loopback tcp and emulated links (50 us one way, 1 GB/s: tcp through the link
# emulator of fabric/tcp/link_emu.h, verbs through the emulated RDMA device's wire), at 1-4 ranks,
# tensor and pipeline parallel, on the 1.1B Llama and the mixture-of-experts bench models.
# One calibration (`lattice sim --calibrate`, the engine's efficiency from a generated model that
# is neither of them) serves every row. Prints one table per model: measured decode tok/s (best
# of REPS), predicted, error, and the issue's bound (+-10% at 1-2 ranks, +-20% at 3-4).
# Not a timed test: run it on a quiet machine (the lead does).
#
#   bench/sim_vs_local.sh [BUILD_DIR]     env: RANKS=1,2,3,4 MODES=tp,pp N=32 REPS=2
#       PROVIDERS=shm,tcp,tcp-emu,verbs-emu LAT_US=50 GBYTES_S=1 MODELS="a.gguf b.gguf" JSON=1
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
models=${MODELS:-"/tmp/lattice-bench-models/tinyllama-q4_0.gguf /tmp/lattice-bench-models/qwen3moe-bench-q4_0.gguf"}
machine="$build/sim-validation/this-machine.json"
mkdir -p "$build/sim-validation"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores" >&2
for m in $models; do
  [ -f "$m" ] || { echo "no model $m (skipped)" >&2; continue; }
  python3 "$here/sim_vs_real.py" --build "$build" --model "$m" --machine "$machine" \
    --ranks "${RANKS:-1,2,3,4}" --modes "${MODES:-tp,pp}" --providers "${PROVIDERS:-shm,tcp,tcp-emu,verbs-emu}" \
    --reps "${REPS:-2}" --n "${N:-32}" --link-latency-us "${LAT_US:-50}" --link-gbytes-s "${GBYTES_S:-1}" \
    ${JSON:+--json}
  echo
done
