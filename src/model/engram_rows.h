// Engram table rows staged from host memory: the rows one step reads, packed into one compact
// block in the table's stored format, for a device backend that keeps the tables on the host.
//
// Purpose: the hash-bucket tables are too large for device memory beside the other weights, so
// the host gathers the step's rows (values and that row's ue8m0 scales, or floats) into a
// contiguous block, uploads it, and the device dequantises the block's rows 0..n-1 with the
// same gather_weight_rows it would run on a resident table (bitwise the same rows).
// Invariants: the block is laid out as a [n, t.cols] WeightView of t's format: values
// [n, row value bytes], then scales [n, row scale bytes] from a 16-byte aligned offset.
// Formats with per-row storage only: F32, BF16, FP8Row32, MXFP4.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace deepinfer::model {

// Bytes one table row takes in its stored format (values and scales): what a step moves per
// hashed row. Throws Error for a format whose scales span rows (kFP8Block32).
int64_t table_row_bytes(const kernels::WeightView& t);

// Packs rows ids[0..n) of host-memory table t into `out` (resized) and returns the block's view
// with `base` as its address (the device copy of out, or out.data() itself).
kernels::WeightView stage_table_rows(const kernels::WeightView& t, const int64_t* ids, int64_t n, std::vector<uint8_t>& out);
kernels::WeightView staged_view(const kernels::WeightView& t, int64_t n, const void* base);

}  // namespace deepinfer::model
