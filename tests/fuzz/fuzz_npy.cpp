// libFuzzer target: a npy file's bytes through its reader (tests/fuzz/run_fuzz.sh).
#include <string>

#include "fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65536) return 0;
  deepinfer::fuzz::npy_bytes(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
