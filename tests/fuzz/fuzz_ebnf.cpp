// libFuzzer target: the ebnf front end, then compile and match (tests/fuzz/run_fuzz.sh).
#include <string>

#include "grammar/ebnf_parser.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    deepinfer::grammar::fuzz::exercise(deepinfer::grammar::parse_ebnf(text), data, size);
  } catch (const deepinfer::Error&) {
    // bad input, reported clearly: fine
  }
  return 0;
}
