// CUDA backend: the per-kernel attribute cache (func_attr_at_least) the launch helpers of
// cuda_common.cuh use for the shared-memory and non-portable cluster opt-ins.
#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::kernels::cuda {

void func_attr_at_least(const void* kern, cudaFuncAttribute attr, int value) {
  struct Set {
    const void* kern;
    int dev;
    cudaFuncAttribute attr;
    int value;  // the value set so far
  };
  static std::vector<Set> set;
  int dev = 0;
  DI_CUDA_CHECK(cudaGetDevice(&dev));
  auto it = std::find_if(set.begin(), set.end(), [&](const Set& o) { return o.kern == kern && o.dev == dev && o.attr == attr; });
  if (it != set.end() && it->value >= value) return;
  DI_CUDA_CHECK(cudaFuncSetAttribute(kern, attr, value));
  if (it == set.end()) set.push_back({kern, dev, attr, value});
  else it->value = value;
}

}  // namespace deepinfer::kernels::cuda
