// For the tests that read llama.cpp's golden outputs (model/golden_test.cc, engine/golden_test.cc;
// recorded by scripts/record-golden.sh): what llama-server's ignore_eos never samples.
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "gguf/gguf.h"

namespace kvstash::testing {

// The file's eos/eot ids and the token spellings llama.cpp's vocabulary loader marks
// end-of-generation (phi3's "</s>", "<|end|>", ...).
inline std::vector<std::int32_t> llama_cpp_end_of_generation_ids(const gguf::File& file) {
  std::vector<std::int32_t> ids;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"}) {
    if (auto id = file.get_uint(key)) ids.push_back(static_cast<std::int32_t>(*id));
  }
  if (const gguf::Value* tokens = file.find("tokenizer.ggml.tokens")) {
    const auto& items = std::get<gguf::Array>(tokens->data).items;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string& t = std::get<std::string>(items[i].data);
      for (const char* eog : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>",
                              "<|endoftext|>", "</s>", "<|eom_id|>", "<|end_of_text|>", "<eos>"}) {
        if (t == eog) ids.push_back(static_cast<std::int32_t>(i));
      }
    }
  }
  return ids;
}

}  // namespace kvstash::testing
