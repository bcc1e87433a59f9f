#!/usr/bin/env bash
# Configures and builds the release preset into build/ (the CLI lands at build/lattice).
#   scripts/build.sh                       everything (tests, benchmarks)
#   scripts/build.sh lattice               only the named targets (the demo needs only `lattice`)
#   scripts/build.sh --target lattice      the same, in cmake's own words; other cmake --build
#                                          options pass through
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
for a in "$@"; do
  case "$a" in
    -*) args+=("$a") ;;
    *) if [[ ${#args[@]} -gt 0 && ${args[-1]} == --target ]]; then args+=("$a"); else args+=(--target "$a"); fi ;;
  esac
done
cmake --preset release >/dev/null
cmake --build --preset release "${args[@]}"
