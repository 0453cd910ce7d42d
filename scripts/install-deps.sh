#!/usr/bin/env bash
# Installs the Debian (bookworm) packages kvstash needs to build, test and run.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-14-dev   # the fuzz targets: clang 14 and its libFuzzer/ASan/UBSan runtimes (scripts/fuzz.sh)
  ccache                     # compiler cache: the three build passes (and later runs) reuse objects
  libopenblas-dev            # sgemm for prefill
  libssl-dev                 # SHA-256 (cache keys, model fingerprints)
  libicu-dev                 # Unicode classes for the tokenizer's pre-tokenizers
  nlohmann-json3-dev libcli11-dev libcpp-httplib-dev
  libboost-dev               # Boost.Beast / Asio (header-only): the server's HTTP layer
  libhiredis-dev libxxhash-dev libzstd-dev
  libsodium-dev              # ed25519 node identity: signed response records and manifests
  libopendht-dev             # peer sharing: DHT discovery of chunk providers (issue 13)
  libisal-dev                # peer sharing: erasure-coded fragments (ISA-L Reed-Solomon)
  libhnswlib-dev             # semantic response cache: the per-namespace HNSW index (header-only)
  libgtest-dev
  redis-server redis-tools   # real Redis (and Redis Cluster) for the KV store's tests
  chromium                   # renders the bench report in its screenshot test
  curl python3               # the demo's client side
  python3-jinja2             # the oracle the chat-template tests compare against
)
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${missing[@]}"
fi
