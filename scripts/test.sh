#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test: the full suite, then the damaged-input
# tests again under AddressSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
(cd build && ctest -j"$(nproc)" --output-on-failure --timeout 600)
# Damaged GGUF files and other bad input must give errors, never memory errors.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKVSTASH_SANITIZE=address > build-asan-configure.log 2>&1 || { cat build-asan-configure.log; exit 1; }
ninja -C build-asan -j"$(nproc)" gguf_test model_test tokenizer_test
(cd build-asan && ctest --output-on-failure -R '^(gguf_test|model_test|tokenizer_test)$')
