// Quantisers to the release checkpoint formats (the inverse of kernels::dequant_row).
//
// Purpose: FP8 e4m3 with ue8m0 scales (32x32 blocks, or 32 channels of a row) and MXFP4
// (e2m1 pairs, ue8m0 per 32 inputs of a row), and bf16. Scales are powers of two,
// 2^ceil(log2(amax / max_code)) of each block (max_code 448 for e4m3, 6 for e2m1); values round
// to nearest, ties to even (e2m1 with the reference's tie rule), after clamping to the code
// range. A block of zeros gets the smallest scale. Quantising already-quantised values gives
// back the same values. The FP8/MXFP4 rule is kernels::quantize_weight_rows, the one the
// backends' quantize_weight op follows (the device's random release weights are these bytes).
// Threading: pure functions (the result's storage is owned by `owner`).
#pragma once

#include "model/weights.h"

namespace deepinfer::model {

Mat quantize_matrix(const Mat& m, kernels::WeightFormat to, Weights& owner);

}  // namespace deepinfer::model
