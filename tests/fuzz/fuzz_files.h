// Shared by the file-format fuzz targets (tests/fuzz/fuzz_{config,safetensors,npy,tokenizer}.cpp)
// and their deterministic CI counterpart (tests/loader/test_mini_fuzz_files.cpp): each takes
// a file's bytes through one reader. Bad input must end in deepinfer::Error; anything else (a
// crash, a sanitizer report, another exception, a hang or a huge allocation) is a bug. What a
// reader accepts is then used a little, so that a bad view (a tensor pointing outside the
// file, an id outside the table) is touched.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/npy.h"
#include "loader/config.h"
#include "loader/safetensors.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::fuzz {

// Returns true when the reader accepted the input.
inline bool config_bytes(const std::string& text) {
  try {
    const loader::ModelConfig c = loader::parse_config(text, "fuzz/config.json");
    int64_t sum = 0;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) sum += c.ratio(i) + c.kv_source_of(i) + c.index_source_of(i);
    if (c.compress_ratios.size() != static_cast<size_t>(c.num_hidden_layers + c.num_nextn_predict_layers)) __builtin_trap();
    if (c.rope_dim(c.rope_main) != c.qk_rope_head_dim || sum == INT64_MIN) __builtin_trap();
    return true;
  } catch (const Error&) {
    return false;
  }
}

inline bool safetensors_bytes(const std::string& bytes) {
  try {
    const auto* base = reinterpret_cast<const uint8_t*>(bytes.data());
    const auto ts = loader::parse_safetensors(base, bytes.size(), "fuzz.safetensors");
    uint64_t total = 0;
    for (const auto& [name, t] : ts) {
      if (t.data < base || t.data + t.nbytes > base + bytes.size()) __builtin_trap();
      uint8_t x = 0;
      for (uint64_t i = 0; i < t.nbytes; ++i) x ^= t.data[i];
      total += t.nbytes + x;
    }
    return total < ~uint64_t{0};
  } catch (const Error&) {
    return false;
  }
}

inline bool npy_bytes(const std::string& bytes) {
  try {
    std::istringstream in(bytes);
    const core::NpyArray a = core::read_npy(in, "fuzz.npy");
    if (a.bytes.size() > bytes.size()) __builtin_trap();  // never more than the file holds
    return true;
  } catch (const Error&) {
    return false;
  }
}

inline bool tokenizer_bytes(const std::string& text) {
  try {
    auto t = tokenizer::Tokenizer::from_json_text(text, "fuzz/tokenizer.json");
    const std::vector<int32_t> ids = t->encode("Hello, world! <s> 123 \xC3\xA9 \xF0\x9F\x98\x80", true);
    for (int32_t id : ids)
      if (id < 0 || id >= t->vocab_size()) __builtin_trap();
    std::vector<int32_t> all;
    for (int32_t id = 0; id < t->vocab_size() && id < 4096; ++id) all.push_back(id);
    (void)t->decode(all, false);
    (void)t->decode(ids, true);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace deepinfer::fuzz
