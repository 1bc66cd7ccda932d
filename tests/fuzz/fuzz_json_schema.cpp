// libFuzzer target: the json_schema front end, then compile and match (tests/fuzz/run_fuzz.sh).
#include <string>

#include "grammar/json_schema.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    deepinfer::grammar::fuzz::exercise(deepinfer::grammar::json_schema_to_grammar(text), data, size);
  } catch (const deepinfer::Error&) {
    // bad input, reported clearly: fine
  }
  return 0;
}
