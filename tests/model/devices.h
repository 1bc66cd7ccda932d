// The backends a model test runs on: the CPU reference, plus CUDA in a DEEPINFER_CUDA build.
#pragma once

#include <string>
#include <vector>

#include "kernels/backend.h"

namespace deepinfer::testing {

inline std::vector<std::string> devices() {
  std::vector<std::string> d{"cpu"};
  if (kernels::cuda_built()) d.push_back("cuda");
  return d;
}

}  // namespace deepinfer::testing
