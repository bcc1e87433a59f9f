#!/usr/bin/env bash
# Writes the King James Bible as plain text (Debian's bible-kjv-text, read with bible-kjv's
# `bible`), verse numbers removed, one verse per paragraph line as the package wraps it:
# the corpus `lattice train` is demonstrated and benchmarked on (docs/TRAIN.md).
#
#   scripts/kjv_corpus.sh [OUT]      (default build/kjv.txt; prints the path)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/build/kjv.txt}
if ! command -v bible >/dev/null; then
  echo "kjv_corpus: 'bible' is missing (apt-get install bible-kjv bible-kjv-text, or scripts/setup.sh)" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
bible "Genesis 1:1-Revelation 22:21" | sed -e 's/^ *[0-9]* //' > "$out.tmp"
mv "$out.tmp" "$out"
echo "$out"
