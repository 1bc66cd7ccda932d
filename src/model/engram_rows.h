// Engram table rows for one step: the row ids every Engram layer's gather reads and, for tables
// kept in host memory, the rows themselves, packed on the host into one block for one upload.
//
// Purpose: the hash-bucket tables are too large for device memory beside the other weights, so
// the host gathers the step's rows (values and that row's ue8m0 scales, or floats) into a
// contiguous block, uploads it, and the device dequantises the block's rows 0..n-1 with the
// same gather_weight_rows it would run on a resident table (bitwise the same rows). Hash ids
// depend only on token ids, so a step's block for every Engram layer is packed and sent before
// the layers run (EngramStep), and the Engram stages read it in place (graphable).
// Invariants: a staged table's rows are laid out as a [n, t.cols] WeightView of t's format:
// values [n, row value bytes], then scales [n, row scale bytes] from a 16-byte aligned offset.
// Formats with per-row storage only: F32, BF16, FP8Row32, MXFP4.
// Threading: pure functions; EngramStep is immutable after construction.
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

// The block of one step of n_pad rows (graph padding included) for every Engram layer j, table
// tables[j], cols hashed rows per token: layer j's gather reads rows ids(j) [n_pad, cols] of
// table(j). Tables read in place: the ids are the hash ids (padding rows: row 0). Staged
// tables: the rows those hash ids name are packed per layer and the ids, shared by the layers,
// name the packed rows 0 .. n_pad * cols - 1 in order. Parts start 256-byte aligned.
class EngramStep {
 public:
  EngramStep(std::vector<kernels::WeightView> tables, bool staged, int64_t cols, int64_t n_pad);
  int64_t bytes() const { return bytes_; }
  // Writes the block into out[0, bytes()) from hash ids [n, layers, cols] (n <= n_pad); a hash
  // id outside its table is a broken invariant (the hasher's ids are in range).
  void pack(const int64_t* hash_ids, int64_t n, uint8_t* out) const;
  // Layer j's gather inputs with the block at `base`.
  const int64_t* ids(size_t j, const uint8_t* base) const;
  kernels::WeightView table(size_t j, const uint8_t* base) const;

 private:
  std::vector<kernels::WeightView> tables_;
  bool staged_;
  int64_t cols_, n_pad_, bytes_ = 0;
  std::vector<int64_t> ids_at_, rows_at_;  // per layer, byte offsets in the block
};

}  // namespace deepinfer::model
