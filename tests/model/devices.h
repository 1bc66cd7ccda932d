// The backends a model test runs on: the CPU reference, the CPU with graphs emulated (so the
// model's graph path runs without a GPU), plus CUDA in a DEEPINFER_CUDA build.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/backend.h"

namespace deepinfer::testing {

inline std::vector<std::string> devices() {
  std::vector<std::string> d{"cpu", "cpu-graphs"};  // the CPU, and the CPU with graphs emulated
  if (kernels::cuda_built()) d.push_back("cuda");
  return d;
}

// A device as a test-name suffix ("cpu-graphs" -> "cpu_graphs").
inline std::string device_name(const ::testing::TestParamInfo<std::string>& p) {
  std::string s = p.param;
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s;
}

}  // namespace deepinfer::testing
