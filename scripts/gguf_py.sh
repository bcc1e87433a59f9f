#!/usr/bin/env bash
# Prints a directory to put on PYTHONPATH that holds llama.cpp's GGUF library (gguf-py, MIT),
# so tests can write GGUF files the way llama.cpp's converters do.
#
# gguf-py is not vendored: the npm package node-llama-cpp (tests/node, installed by
# scripts/setup.sh) ships llama.cpp's source as a git bundle, and this script extracts gguf-py
# from it once, into <build dir>/gguf-py/<bundle commit>/. Later calls only print the path.
# Safe to run concurrently (each extraction goes to a temporary directory renamed into place).
#
#   usage: scripts/gguf_py.sh [build dir]        (default: <repo>/build)
#   PYTHONPATH=$(scripts/gguf_py.sh) python3 -c 'import gguf'
#
# The library needs numpy (Debian: python3-numpy, which setup.sh installs). Exits 1 with a
# message on stderr when the bundle or git is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
bundle=$here/tests/node/node_modules/node-llama-cpp/llama/gitRelease.bundle
if [ ! -f "$bundle" ]; then
  echo "gguf_py.sh: $bundle is missing (run scripts/setup.sh: it installs tests/node's npm modules)" >&2
  exit 1
fi
command -v git >/dev/null || { echo "gguf_py.sh: git is needed to read $bundle" >&2; exit 1; }
commit=$(git bundle list-heads "$bundle" | awk '$2 == "HEAD" {print $1; exit}')
[ -n "$commit" ] || { echo "gguf_py.sh: $bundle has no HEAD" >&2; exit 1; }
out=$build/gguf-py/$commit
if [ ! -f "$out/gguf/__init__.py" ]; then
  mkdir -p "$build/gguf-py"
  tmp=$(mktemp -d "$build/gguf-py/.extract.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  git init -q --bare "$tmp/git"
  git --git-dir="$tmp/git" fetch -q "$bundle" "$commit"
  mkdir "$tmp/tree"
  git --git-dir="$tmp/git" archive "$commit" gguf-py/gguf gguf-py/LICENSE | tar -x -C "$tmp/tree"
  # Rename into place; if another run got there first, keep its copy.
  mv -T "$tmp/tree/gguf-py" "$out" 2>/dev/null || [ -f "$out/gguf/__init__.py" ]
fi
echo "$out"
