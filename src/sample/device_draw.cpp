#include "sample/device_draw.h"

#include <algorithm>

#include "kernels/buffer.h"

namespace deepinfer::sample {

DeviceDraws draw_on_backend(kernels::Backend& be, const float* x, int64_t rows, int64_t cols,
                            const std::vector<kernels::DrawParams>& params) {
  DeviceDraws out;
  bool any_lp = false;
  for (const kernels::DrawParams& d : params) {
    any_lp = any_lp || d.logprobs >= 0;
    out.max_logprobs = std::max<int64_t>(out.max_logprobs, d.logprobs);
  }
  // Every row plain greedy: no params (the backend then needs no scratch for weights).
  const bool all_greedy = !any_lp && std::all_of(params.begin(), params.end(), [](const kernels::DrawParams& d) {
    return d.temperature < kernels::kDrawGreedyTemperature;
  });
  const int64_t max_lp = out.max_logprobs;
  kernels::Buf<int32_t> ids(be, rows);
  kernels::Buf<kernels::DrawParams> d_params(be);
  if (!all_greedy) d_params.upload(params);
  kernels::Buf<float> lp(be, any_lp ? rows : 0), top_lp(be, any_lp ? rows * max_lp : 0);
  kernels::Buf<int32_t> top_ids(be, any_lp ? rows * max_lp : 0);
  be.sample_rows({.x = x, .params = all_greedy ? nullptr : d_params.data(), .ids = ids.data(), .rows = rows, .cols = cols,
                  .logprob = any_lp ? lp.data() : nullptr, .top_ids = any_lp ? top_ids.data() : nullptr,
                  .top_logprobs = any_lp ? top_lp.data() : nullptr, .max_logprobs = max_lp});
  out.ids = ids.download();
  if (any_lp) {
    out.logprob = lp.download();
    out.top_logprobs = top_lp.download();
    out.top_ids = top_ids.download();
  }
  return out;
}

}  // namespace deepinfer::sample
