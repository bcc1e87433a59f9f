#!/usr/bin/env bash
# The README's test command: set up, build, run every test not labelled "slow".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ctest --preset default "$@"
