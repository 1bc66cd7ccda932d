// libFuzzer target: run-batch's --resume reader (api::read_resume_bytes) on arbitrary output-file
// bytes (tests/fuzz/run_fuzz.sh). It must keep only whole lines (the torn tail counted and
// dropped) or throw deepinfer::Error; anything else is a bug.
#include <string_view>

#include "api/batch_output.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto r = deepinfer::api::read_resume_bytes(bytes, "out.jsonl");
    if (r.keep_bytes + r.torn_bytes != size) __builtin_trap();
    if (r.keep_bytes > 0 && bytes[r.keep_bytes - 1] != '\n') __builtin_trap();
    if (bytes.find('\n', r.keep_bytes) != std::string_view::npos) __builtin_trap();
    if (r.custom_ids.size() != r.is_error.size()) __builtin_trap();
  } catch (const deepinfer::Error&) {
    // a complete line that is not a run-batch output line: refused clearly
  }
  return 0;
}
