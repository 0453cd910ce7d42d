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
  nodejs                     # the official OpenAI Node SDK's tests (sdk-tests/)
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
# npm: Debian's package where no npm came with nodejs (NodeSource's nodejs ships its own).
if ! command -v npm >/dev/null; then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y npm
fi
# The client SDKs the tests drive, exactly as their lockfiles pin them; reinstalled only when a
# lockfile changed.
root=$(cd "$(dirname "$0")/.." && pwd)
for sdk in "$root"/sdk-tests/*/; do
  [ -f "$sdk/package-lock.json" ] || continue
  if ! cmp -s "$sdk/package-lock.json" "$sdk/node_modules/.kvstash-installed-lock" 2>/dev/null; then
    echo "installing the SDK in $sdk (npm ci)"
    (cd "$sdk" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$sdk/package-lock.json" "$sdk/node_modules/.kvstash-installed-lock"
  fi
done
