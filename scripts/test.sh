#!/usr/bin/env bash
# Set up, build with warnings as errors, run every test; then build and run the tests again
# under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export CTEST_PARALLEL_LEVEL=${CTEST_PARALLEL_LEVEL:-2}
# ccache keyed on paths relative to the checkout, so another clone of the tree reuses its objects.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
echo "== Release build (warnings as errors) and tests"
cmake --preset ci >/dev/null
cmake --build --preset ci
ctest --preset ci
echo "== ASan/UBSan build and tests"
cmake --preset debug-asan >/dev/null
cmake --build --preset debug-asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --preset debug-asan
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  # No GPU here: compile the CUDA backend, the GPU tests, the CLI and the GPU benchmarks so they
  # cannot rot (they run on the device machine through scripts/device_run.sh).
  echo "== CUDA backend compile check (sm_90a)"
  export PATH=$PATH:/usr/local/cuda/bin
  cmake --preset cuda >/dev/null
  cmake --build --preset cuda --target deepinfer_kernels_cuda test_cuda_parity test_cuda_model deepinfer bench_device bench_cuda_ops \
    wgmma_probe
  # The CUPTI timeline tool (device_run.sh trace) where the toolkit has CUPTI.
  if cmake --build --preset cuda --target help 2>/dev/null | grep -q di_kernel_trace; then
    cmake --build --preset cuda --target di_kernel_trace
  fi
fi
