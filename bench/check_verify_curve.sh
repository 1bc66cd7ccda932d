#!/usr/bin/env bash
# ctest of bench_device's verify curve (bench/CMakeLists.txt): runs `"$@" --verify-curve 1` with
# --batches 1,3 and the default draft counts (0..5), and checks that it succeeds and prints a
# row for every (batch, k) and each batch's best k, labelled as computed.
set -uo pipefail
out=$("$@" --verify-curve 1 --batches 1,3)
rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || { echo "FAIL: bench_device exit $rc"; exit 1; }
for B in 1 3; do
  for k in 0 1 2 3 4 5; do
    n=$(grep -cE "^verify batch +$B k $k: step +[0-9.]+ ms .*tokens verified.*roofline.*speed-up at acceptance 3\.50: x[0-9.]+, 5\.50: x[0-9.]+ \(computed, not measured\)$" <<< "$out")
    [ "$n" -eq 1 ] || { echo "FAIL: $n rows for batch $B, k $k"; exit 1; }
  done
  n=$(grep -cE "^verify batch +$B best k: acceptance 3\.50: k [0-5] x[0-9.]+, acceptance 5\.50: k [0-5] x[0-9.]+ \(computed, not measured\)$" <<< "$out")
  [ "$n" -eq 1 ] || { echo "FAIL: no best k for batch $B"; exit 1; }
  grep -qE "^verify batch +$B, context +[0-9]+: plain decode [0-9.]+ ms with the draft stages off, [0-9.]+ ms on .*draft round [0-9.]+ ms" <<< "$out" ||
    { echo "FAIL: no plain decode and draft round line for batch $B"; exit 1; }
done
echo PASS
