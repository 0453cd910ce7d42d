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
# Tokenizers and chat templates too: every vocabulary's vectors and random texts, damaged templates.
ninja -C build-asan -j"$(nproc)" gguf_test model_test tokenizer_test tokenizer_vocab_vectors_test \
  tokenizer_spm_tokenizer_test jinja_template_test jinja_published_templates_test
(cd build-asan && ctest --output-on-failure \
  -R '^(gguf_test|model_test|tokenizer_test|tokenizer_vocab_vectors_test|tokenizer_spm_tokenizer_test|jinja_template_test|jinja_published_templates_test)$')
