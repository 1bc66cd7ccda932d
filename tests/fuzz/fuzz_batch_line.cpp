// libFuzzer target: one run-batch line -> a Request or an error (api::parse_batch_line), and
// its output line. See input_fuzz.h for what is checked.
#include <cstdio>

#include "fuzz/input_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bug = deepinfer::fuzz::check_batch_line(std::string(reinterpret_cast<const char*>(data), size));
  if (!bug.empty()) {
    std::fprintf(stderr, "fuzz_batch_line: %s\n", bug.c_str());
    __builtin_trap();
  }
  return 0;
}
