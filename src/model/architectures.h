// The GGUF architectures this engine runs, each mapped from its metadata onto a ModelConfig
// (model_config.h): the only place that knows what `qwen3` or `qwen3moe` means.
//
// Thread safety: pure functions of the file.
#pragma once

#include "gguf/gguf.h"
#include "kvstash/status.h"
#include "model/model_config.h"

namespace kvstash {

// "llama, qwen2, qwen3, qwen3moe": for error messages.
const char* supported_architectures();

// Fills `c` from the file's metadata (and the presence of optional tensors such as Q/K/V biases):
// the shape, and one LayerSpec per layer. n_vocab is left to the caller (it is token_embd's row
// count). Errors: kUnsupported for an architecture, rope scaling or attention layout this engine
// does not run, naming it and what is supported; kCorrupt for missing or out-of-range keys.
Status describe_architecture(const gguf::File& f, ModelConfig* c);

}  // namespace kvstash
