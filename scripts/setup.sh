#!/usr/bin/env bash
# Installs what lattice needs to build and test, from Debian's packages (and, for the
# llama.cpp cross-check tests and the serve tests, node-llama-cpp and openai from the npm registry). Idempotent.
# chromium: the serve dashboard's test loads GET / in headless Chromium (tests/serve/dashboard_process_test.cc).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
pkgs=(build-essential cmake ninja-build ccache pkg-config git
      libgtest-dev libgmock-dev libbenchmark-dev
      nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libsodium-dev libssl-dev
      libibverbs-dev iproute2 procps libboost-dev curl
      # lattice discover: Avahi's embeddable mDNS core (no daemon: one responder per network namespace)
      libavahi-core-dev
      # lattice train: PyTorch (CPU) as the gradient oracle of tests/train (capability "torch")
      # and the peer of bench/train_vs_torch.sh, with OpenBLAS so its matmuls are not the
      # reference BLAS; the King James Bible as the training corpus (scripts/kjv_corpus.sh).
      python3-torch python3-numpy libopenblas0-pthread bible-kjv bible-kjv-text
      # serve: the dashboard's browser test (tests/serve/dashboard_process_test.cc, capability "browser")
      chromium)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
fi
# The external oracles (llama.cpp through node-llama-cpp, the openai client) need Node.js: from
# Debian when it is missing (a Node.js already installed, e.g. with its own npm, is kept).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 nodejs npm >/dev/null
fi
nm="$here/tests/node/node_modules"
if [ -f "$here/tests/node/package.json" ] && { [ ! -d "$nm/openai" ] || [ ! -d "$nm/node-llama-cpp" ]; }; then
  if ! (cd "$here/tests/node" && { npm ci --silent --no-audit --no-fund >/dev/null 2>&1 ||
                                   npm install --silent --no-audit --no-fund >/dev/null 2>&1; }); then
    echo "setup: npm install in tests/node failed; the llama.cpp and openai-client tests need it" >&2
    echo "       (run 'cd tests/node && npm ci' to see why)" >&2
    exit 1
  fi
fi
