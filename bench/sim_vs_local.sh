#!/bin/sh
# The simulator against lattice's own runs on this machine (issue 16, "Our own runs here"), over
# shared memory, loopback tcp and emulated links (50 us one way, 1 GB/s: tcp through the link
# emulator of fabric/tcp/link_emu.h, verbs through the emulated RDMA device's wire), at 1-4 ranks,
# tensor and pipeline parallel, on the 1.1B Llama and the mixture-of-experts bench models.
# One calibration of the machine (`lattice sim --calibrate`: bandwidth, matmul, links) serves every
# row; each model's engine efficiencies are fitted to its own one-rank run (`sim --calibrate-from`),
# so the 2-4 rank rows come from the link, schedule and placement models alone. Prints one table per
# model: measured decode and prefill tok/s (the median of REPS), predicted, error, and the issue's bound
# (+-10% at 2 ranks, +-20% at 3-4), an error outside it marked, and how many rows are within
# (JSON=1: "within"). The default models are written by `lattice make-model` when missing (the
# shapes of bench/engine_vs_llamacpp.sh and bench/ep_vs_single.sh, seed 1).
# Each row is calibrated beside each of its runs (ADJACENT=1, the default: REPS rounds of a one-rank
# run, for tensor parallel a co-run pair, and the row's run, a one-rank run after the last; each
# run predicted from the one-rank runs on either side and its co-run, the row the round of the
# median error, every round's error in the last column), since a VM's speed drifts within
# seconds; ADJACENT=0 calibrates once at the start. Not a timed test: run it on a quiet machine (the lead does). The machine file is kept in
# BUILD_DIR/sim-validation/this-machine.json and reused: delete it to calibrate again (one
# measured on a loaded machine is wrong for a quiet run). The one-rank runs beside a row are pinned
# (taskset) to the CPUs its ranks start on, in turn, and the co-run's two copies to two ranks' CPUs
# (PIN_ALONE=1, the default; 0: unpinned, a single rank then runs on the faster vCPU). Every round's run and calibration is kept
# there too: REPREDICT=1 runs nothing and predicts the last table's rounds again with this build (a
# change to the model against the same measurements, the host's drift out of the comparison).
# Each measured table's rounds are also kept in a folder of their own, BUILD_DIR/sim-validation/
# tables/<UTC time> (KEEP=0: not), and REPREDICT=1 POOL=dir1,dir2 predicts each row from its rounds
# in the last table and in those kept tables together, every round on its own calibration, the row
# the median of them all: a row's rounds minutes apart move together (docs/SIM.md, session 40:
# more prefill runs a round left the rounds' spread as it was), so a row is sampled at other times.
# INTERLEAVE=1 (the default) runs each row in turns with its calibration instead: the row's run and
# a one-rank run pinned to each of two CPUs start together, and their launchers are stopped and
# resumed (SIGTSTP / SIGCONT) so that every cycle of 0.6 s phases gives the row, each one-rank run
# alone and the two together the machine in turn; each job's pace is read from its token times
# (run --json, token_clock_ms) inside its own phases, a few seconds from the others' (docs/SIM.md,
# session 26). INTERLEAVE=0: ADJACENT's runs one after the other. Rows beyond the cores run with
# `run --bind cores` (BIND=cores, the default: rank r on CPU r mod CPUs, the placement the
# simulator takes, so they too run in turns); BIND=auto leaves them to the scheduler, whose
# placement moved 3 ranks on 2 cores between 1.06 and 1.35 x the pace of 2 (session 27).
#
#   bench/sim_vs_local.sh [BUILD_DIR]     env: RANKS=1,2,3,4 MODES=tp,pp N=32 REPS=2 PREFILL_RUNS=3
#       PROVIDERS=shm,tcp,tcp-emu,verbs-emu LAT_US=50 GBYTES_S=1 MODELS="a.gguf b.gguf" JSON=1 ADJACENT=1
#       PIN_ALONE=1 REPREDICT=1 INTERLEAVE=1 BIND=cores KEEP=1 POOL=dir1,dir2
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
D=/tmp/lattice-bench-models
models=${MODELS:-"$D/tinyllama-q4_0.gguf $D/qwen3moe-bench-q4_0.gguf"}
make_model() {  # path -> written once, if it is one of the default bench models
  [ -f "$1" ] && return 0
  case "$1" in
    */tinyllama-q4_0.gguf) set -- "$1" --arch llama --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632 --vocab 32000 ;;
    */qwen3moe-bench-q4_0.gguf) set -- "$1" --arch qwen3moe --dim 2048 --layers 24 --heads 32 --kv-heads 4 --head-dim 64 \
      --experts 32 --experts-used 8 --expert-ffn 512 --ffn 5632 --vocab 32000 ;;
    *) return 0 ;;
  esac
  out=$1; shift
  mkdir -p "$(dirname "$out")"
  echo "writing $out (lattice make-model)" >&2
  "$build/lattice" make-model "$@" --type q4_0 --seed 1 -o "$out.tmp" >/dev/null && mv "$out.tmp" "$out"
}
machine="$build/sim-validation/this-machine.json"
mkdir -p "$build/sim-validation"
keep=
if [ "${REPREDICT:-0}" != 1 ] && [ "${KEEP:-1}" = 1 ]; then
  keep="$build/sim-validation/tables/$(date -u +%Y%m%dT%H%M%SZ)"
  echo "keeping this table's rounds in $keep" >&2
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores" >&2
for m in $models; do
  make_model "$m"
  [ -f "$m" ] || { echo "no model $m (skipped)" >&2; continue; }
  python3 "$here/sim_vs_real.py" --build "$build" --model "$m" --machine "$machine" \
    --ranks "${RANKS:-1,2,3,4}" --modes "${MODES:-tp,pp}" --providers "${PROVIDERS:-shm,tcp,tcp-emu,verbs-emu}" \
    --reps "${REPS:-2}" --prefill-runs "${PREFILL_RUNS:-3}" --n "${N:-32}" --link-latency-us "${LAT_US:-50}" --link-gbytes-s "${GBYTES_S:-1}" \
    $( [ "${ADJACENT:-1}" = 1 ] && echo --adjacent ) $( [ "${PIN_ALONE:-1}" = 1 ] && echo --pin-alone ) $( [ "${REPREDICT:-0}" = 1 ] && echo --repredict ) \
    $( [ "${INTERLEAVE:-1}" = 1 ] && echo --interleave ) --bind "${BIND:-cores}" ${JSON:+--json} \
    ${keep:+--keep "$keep"} ${POOL:+--pool "$POOL"}
  echo
done
