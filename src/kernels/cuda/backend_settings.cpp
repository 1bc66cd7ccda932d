// Settings::from_env: the only read of the environment in src/kernels (backend_settings.h).
#include "kernels/cuda/backend_settings.h"

#include <cstdlib>

namespace deepinfer::kernels::cuda {

namespace {
// On unless `name` is set to 0.
bool on_unless_zero(const char* name) {
  const char* e = std::getenv(name);
  return !(e && e[0] == '0');
}
}  // namespace

Settings Settings::from_env() {
  Settings s;
  s.pdl = on_unless_zero("DEEPINFER_CUDA_PDL");
  s.clusters = on_unless_zero("DEEPINFER_CUDA_CLUSTER");
  s.inline_upload = on_unless_zero("DEEPINFER_CUDA_INLINE_UPLOAD");
  return s;
}

}  // namespace deepinfer::kernels::cuda
