#!/usr/bin/env bash
# Sanitizer runs (what .ci/run does after the release tests, and the slow tsan run).
#   scripts/sanitize.sh asan   build the asan preset (AddressSanitizer + UBSan, gcc) and run the
#                              unit and fault tests under it (-L 'unit|fault'; -LE 'slow|cpu'
#                              leaves out the slow suites and the CPU-time assertions, which
#                              the sanitizers' own cost would break). Any report fails the test.
#                              LATTICE_SANITIZE_LAYERS (default: every layer) names the layers
#                              whose tests build and run, e.g. "core crypto fabric coll" (what
#                              .ci/run gives it: the wire parsers, providers and collectives,
#                              about a third of the build; the whole run is the slow
#                              sanitize.asan).
#   scripts/sanitize.sh tsan   build the tsan preset (ThreadSanitizer) and run the threaded
#                              suites: the unit and fault tests of the layers that run threads
#                              (fabric's progress threads, coll's ranks as threads, cluster's
#                              heartbeat and coordinator, serve's engine and HTTP threads, train's
#                              data parallel ranks). Slow (ctest label slow: sanitize.tsan).
# Extra arguments go to ctest (asan, e.g. -R Tcp) or to the GoogleTest executables (tsan, after
# the default filter: a --gtest_filter replaces it); LATTICE_TSAN_LAYERS="fabric coll" runs some layers.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/sanitize.sh asan|tsan [ctest args...]}
shift
jobs=${LATTICE_SANITIZE_JOBS:-2}
# Every report is fatal and names its stack; leaks are reported at exit (LeakSanitizer).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp}
case "$kind" in
  asan)
    # The preset's default targets are exactly what these tests run: the layers' test
    # executables, their peer programs, the lattice binary (the unit tests of fabric, sim and
    # train start it) and the fuzz replays; benches are off and fuzz_seeds is not built by default.
    t0=$SECONDS
    cmake --preset asan >/dev/null
    layers=${LATTICE_SANITIZE_LAYERS:-}
    targets=() only=()
    if [ -n "$layers" ]; then
      for l in $layers; do
        [ -d "tests/$l" ] || { echo "scripts/sanitize.sh: no layer '$l' (tests/$l)" >&2; exit 2; }
        # With its helper programs (tests/<layer>/extra.cmake) and its code's fuzz replays.
        targets+=(--target "${l}_tests")
      done
      only=(-L "^(unit|fault):($(echo $layers | tr ' ' '|'))\$")
      echo "sanitize asan: layers $layers"
    fi
    cmake --build --preset asan -j "$jobs" "${targets[@]}"
    t1=$SECONDS
    echo "sanitize asan: build $((t1 - t0)) s"
    rc=0
    [ ${#only[@]} -gt 0 ] || only=(-L 'unit|fault')
    ctest --test-dir build-asan "${only[@]}" -LE 'slow|cpu' --output-on-failure -j "$jobs" --timeout 900 "$@" || rc=$?
    echo "sanitize asan: build $((t1 - t0)) s, tests $((SECONDS - t1)) s"
    exit $rc
    ;;
  tsan)
    # LATTICE_TSAN_LAYERS picks layers (default the five above; engine, whose parallel tests run
    # ranks as threads and whose kernels run on its ThreadPool, is one more that can be named). Arguments after `tsan` go to each
    # executable after the default filter, so a --gtest_filter there replaces it (GoogleTest
    # keeps the last one), e.g. scripts/sanitize.sh tsan --gtest_filter='*Shm*'.
    t0=$SECONDS
    cmake --preset tsan >/dev/null
    read -r -a layers <<<"${LATTICE_TSAN_LAYERS:-fabric coll cluster serve train}"
    peers=()
    for layer in "${layers[@]}"; do
      case "$layer" in
        fabric|coll|cluster) peers+=("${layer}_peer") ;;
        serve|train|engine) ;;
        *) echo "scripts/sanitize.sh: unknown tsan layer '$layer' (fabric coll cluster serve train engine)" >&2; exit 2 ;;
      esac
    done
    # The peers are the process tests' programs (built with their executable anyway); cluster,
    # serve and train's executables depend on the lattice binary (tests/<layer>/extra.cmake),
    # fabric's and coll's do not, so LATTICE_TSAN_LAYERS="fabric coll" builds a third as much.
    cmake --build --preset tsan -j "$jobs" --target "${layers[@]/%/_tests}" "${peers[@]}"
    t1=$SECONDS
    echo "sanitize tsan: build $((t1 - t0)) s"
    # Each layer's GoogleTest executable with the unit and fault tests' filter (the labels'
    # definitions in tests/CMakeLists.txt: no Slow, CpuBudget, Process, Integration, LlamaCpp,
    # Netns), one at a time: ThreadSanitizer multiplies memory and time.
    failed=()
    for layer in "${layers[@]}"; do
      echo "== tsan: ${layer}_tests"
      t=$SECONDS
      build-tsan/tests/${layer}_tests --gtest_brief=1 \
        --gtest_filter='-*Slow*:*CpuBudget*:*Process*:*Integration*:*LlamaCpp*:*Netns*' "$@" || failed+=("$layer")
      echo "== tsan: ${layer}_tests $((SECONDS - t)) s"
    done
    echo "sanitize tsan: build $((t1 - t0)) s, tests $((SECONDS - t1)) s"
    if ((${#failed[@]})); then
      echo "scripts/sanitize.sh tsan: failures in ${failed[*]}" >&2
      exit 1
    fi
    ;;
  *) echo "scripts/sanitize.sh: unknown kind '$kind' (asan or tsan)" >&2; exit 2 ;;
esac
