// libFuzzer target: Tokenizer::encode (and decode) of arbitrary bytes with the fixture
// tokenizer (tests/data/v41/full/tokenizer.json). See input_fuzz.h for what is checked.
#include <cstdio>

#include "fuzz/input_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tok = deepinfer::tokenizer::Tokenizer::load(DEEPINFER_TEST_DATA "/v41/full/tokenizer.json");
  const std::string bug = deepinfer::fuzz::check_encode(*tok, std::string_view(reinterpret_cast<const char*>(data), size));
  if (!bug.empty()) {
    std::fprintf(stderr, "fuzz_tokenizer_encode: %s\n", bug.c_str());
    __builtin_trap();
  }
  return 0;
}
