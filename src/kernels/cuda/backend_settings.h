// The CUDA backend's settings: what a device run may switch off to diagnose it, each on by
// default and giving the same bits either way. Read once from the environment when a backend
// is made (Settings::from_env, in make_cuda_backend) and held by that backend, which hands them
// to every op function with its stream (cuda::Stream, cuda_common.cuh); nothing else in
// src/kernels reads the environment. Variables (each on unless set to 0):
//   DEEPINFER_CUDA_PDL=0            pdl off
//   DEEPINFER_CUDA_CLUSTER=0        clusters off
//   DEEPINFER_CUDA_INLINE_UPLOAD=0  inline_upload off
#pragma once

#include <memory>

#include "kernels/backend.h"

namespace deepinfer::kernels::cuda {

struct Settings {
  // Programmatic dependent launches: every launch carries the attribute, so a kernel's setup
  // and block dispatch overlap its predecessor's last blocks (DI_PDL_ENTRY, cuda_common.cuh).
  bool pdl = true;
  // Split work added up inside thread-block clusters (distributed shared memory) where a launch
  // offers it: the decode products' k segments, the decode attention's splits. Off: through
  // global memory (a workspace and tile counters, or the combine launch).
  bool clusters = true;
  // Uploads of up to kInlineCopyMax bytes, and upload_batch's items within its limits, carried
  // in a launch's parameters. Off: through the pinned staging ring (and upload_batch's default).
  bool inline_upload = true;

  static Settings from_env();
};

// A CUDA backend with the given settings (make_cuda_backend in backend.h reads them from the
// environment).
std::unique_ptr<Backend> make_cuda_backend(int device, Precision precision, bool batch_invariant, const Settings& settings);

}  // namespace deepinfer::kernels::cuda
