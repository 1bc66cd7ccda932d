// libFuzzer target: the chat encoding on conversations built from the bytes (roles, contents,
// tool calls, tools, deep and non-UTF-8 values), then the tokenizer on the text it renders.
#include <cstdio>

#include "fuzz/input_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tok = deepinfer::tokenizer::Tokenizer::load(DEEPINFER_TEST_DATA "/v41/full/tokenizer.json");
  const std::string bug = deepinfer::fuzz::check_chat(*tok, data, size);
  if (!bug.empty()) {
    std::fprintf(stderr, "fuzz_chat_encoding: %s\n", bug.c_str());
    __builtin_trap();
  }
  return 0;
}
