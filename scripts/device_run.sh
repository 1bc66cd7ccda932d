#!/usr/bin/env bash
# One full device run on the GPU machine (see NOTES-device.md): build the `cuda` preset with
# many jobs, run the CUDA parity tests, write a report under $OUT (or build/device-out).
# Usage (through the device tool): bash scripts/device_run.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/device-out}
mkdir -p "$OUT"
{
  echo "== machine"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1; nproc; date -u
  echo "== configure + build (cuda preset)"
} > "$OUT/report.txt"
# The device image lacks the PCRE2 and utf8proc dev packages: the run carries Debian's .deb
# files in .debs/ (scripts/fetch_device_debs.sh) and unpacks them into a private prefix, never
# over the system's own libraries.
PREFIX=/tmp/debs
if [ -d .debs ]; then
  for f in .debs/*.deb; do dpkg -x "$f" "$PREFIX"; done
  export PKG_CONFIG_SYSROOT_DIR=$PREFIX PKG_CONFIG_PATH=$PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig
  export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
cmake -S . -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  >> "$OUT/report.txt" 2>&1
cmake --build build/cuda -j "$(nproc)" --target test_cuda_parity bench_cuda_ops >> "$OUT/build.log" 2>&1
echo "build exit $?" >> "$OUT/report.txt"
echo "== parity tests" >> "$OUT/report.txt"
./build/cuda/tests/test_cuda_parity 2>&1 | tee -a "$OUT/report.txt"
echo "== kernel lab" >> "$OUT/report.txt"
./build/cuda/bench/bench_cuda_ops 2>&1 | tee -a "$OUT/report.txt"
