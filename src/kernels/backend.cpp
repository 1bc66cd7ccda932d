#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"

namespace deepinfer::kernels {

void Backend::upload_batch(const UploadItem* items, int64_t n) {
  std::vector<CopyDesc> copies;
  int64_t max_bytes = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (items[i].bytes <= 0) continue;
    if (!items[i].from_device) {
      upload(items[i].dst, items[i].src, items[i].bytes);
      continue;
    }
    copies.push_back({.dst = items[i].dst, .src = items[i].src, .bytes = items[i].bytes});
    max_bytes = std::max(max_bytes, items[i].bytes);
  }
  if (copies.empty()) return;
  const int64_t nc = static_cast<int64_t>(copies.size());
  if (host_memory()) return copy_batch({.descs = copies.data(), .n = nc, .max_bytes = max_bytes});
  Buf<CopyDesc> d(*this);
  d.upload(copies);
  copy_batch({.descs = d.data(), .n = nc, .max_bytes = max_bytes});
}

void Backend::upload_ahead(void* dst, int64_t bytes, const std::function<void(uint8_t*)>& fill) {
  std::vector<uint8_t> h(static_cast<size_t>(std::max<int64_t>(bytes, 0)));
  fill(h.data());
  upload(dst, h.data(), bytes);
}

void Backend::grouped_matmul(const GroupedMatmulArgs& a) {
  DI_CHECK(!a.w2 == !a.y2, "grouped matmul: a second product needs both w2 and y2");
  if (a.x_rows) {  // the gather first, then the product of the gathered rows
    DI_CHECK(a.x_src_rows > 0 || a.rows == 0, "grouped matmul: x_rows without x_src_rows");
    Buf<float> xg(*this, a.rows * a.k);
    gather_rows({.src = a.x, .idx = a.x_rows, .dst = xg.data(), .rows = a.rows, .width = a.k});
    GroupedMatmulArgs g = a;
    g.x = xg.data();
    g.x_rows = nullptr;
    g.x_src_rows = 0;
    return grouped_matmul(g);
  }
  std::vector<int32_t> off(static_cast<size_t>(a.experts + 1));
  download(off.data(), a.offsets, (a.experts + 1) * static_cast<int64_t>(sizeof(int32_t)));
  DI_CHECK(off[0] >= 0 && off[static_cast<size_t>(a.experts)] <= a.rows, "grouped matmul: offsets outside the rows");
  for (int64_t e = 0; e < a.experts; ++e) {
    const int64_t r0 = off[static_cast<size_t>(e)], m = off[static_cast<size_t>(e) + 1] - r0;
    DI_CHECK(m >= 0, "grouped matmul: offsets not ascending");
    if (m <= 0) continue;
    matmul({.x = a.x + r0 * a.k, .w = a.w[e], .y = a.y + r0 * a.n, .m = m, .n = a.n, .k = a.k});
    if (a.w2) matmul({.x = a.x + r0 * a.k, .w = a.w2[e], .y = a.y2 + r0 * a.n, .m = m, .n = a.n, .k = a.k});
  }
}

void Backend::hc_mixes_collapse(const HcMixesArgs& m, const HcCollapseArgs& c) {
  DI_CHECK(mixes_collapse_apart(m, c), "hc_mixes_collapse: the collapse reads the pre the mixes write");
  hc_mixes(m);
  hc_collapse(c);
}
void Backend::route(const RouterArgs& r, const MoePermuteArgs& p) {
  DI_CHECK(route_paired(r, p), "route: the permutation does not take the router's choices");
  router(r);
  moe_permute(p);
}
void Backend::moe_combine_expand(const MoeCombineArgs& c, const HcExpandArgs& e) {
  DI_CHECK(combine_expand_paired(c, e), "moe_combine_expand: the expand does not take the combine's output");
  moe_combine(c);
  hc_expand(e);
}

void Backend::norm_rope_quant(const OpBatch<NormRopeQuantArgs>& b) {
  for (int64_t i = 0; i < b.n; ++i) {
    const NormRopeQuantArgs& a = b.items[i];
    rms_norm({.x = a.x, .w = a.w, .y = a.x, .rows = a.rows, .dim = a.dim, .eps = a.eps});
    if (a.rope_dim > 0)
      rope({.x = a.x, .cos = a.cos, .sin = a.sin, .rows = a.rows, .heads = 1, .head_dim = a.dim, .rope_dim = a.rope_dim});
    if (a.block > 0)
      fake_quant({.x = a.x, .rows = a.rows, .dim = a.dim, .block = a.block, .kind = a.kind, .codes = a.codes, .scales = a.scales});
  }
}

void Backend::indexer_scores_batch(const OpBatch<IndexerScoreArgs>& b) {
  for (int64_t i = 0; i < b.n; ++i) indexer_scores(b.items[i]);
}
void Backend::candidate_blocks_batch(const OpBatch<CandidateBlocksArgs>& b) {
  for (int64_t i = 0; i < b.n; ++i) candidate_blocks(b.items[i]);
}
void Backend::topk_mask_batch(const OpBatch<TopkMaskArgs>& b) {
  for (int64_t i = 0; i < b.n; ++i) topk_mask(b.items[i]);
}

void Backend::multi_matmul(const MultiMatmulArgs& a) {
  DI_CHECK(a.count >= 0 && a.count <= kMaxMatmulOuts, "multi matmul: " + std::to_string(a.count) + " outputs");
  for (int i = 0; i < a.count; ++i)
    matmul({.x = a.x, .w = a.outs[i].w, .y = a.outs[i].y, .m = a.m, .n = a.outs[i].n, .k = a.k});
}

#ifndef DEEPINFER_HAS_CUDA
std::unique_ptr<Backend> make_cuda_backend(int, Precision, bool) {
  throw Error("device 'cuda': this build has no CUDA backend (configure with -DDEEPINFER_CUDA=ON, preset 'cuda')");
}
bool cuda_built() { return false; }
#else
bool cuda_built() { return true; }
#endif

std::unique_ptr<Backend> make_backend(const std::string& device, int cpu_threads, const std::string& dtype,
                                      bool batch_invariant) {
  if (dtype != "float32" && dtype != "bfloat16")
    throw Error("dtype '" + dtype + "': expected float32 or bfloat16");
  const Precision p = dtype == "bfloat16" ? Precision::kBF16 : Precision::kFloat32;
  if (device == "cpu") return make_cpu_backend(cpu_threads, p);
  if (device == "cuda") return make_cuda_backend(0, p, batch_invariant);
  if (device == "cuda-check") return make_cross_check_backend(make_cuda_backend(0, p, batch_invariant));
  if (device == "cuda-profile") return make_profiling_backend(make_cuda_backend(0, p, batch_invariant));
  if (device == "cpu-profile") return make_profiling_backend(make_cpu_backend(cpu_threads, p));
  if (device == "cpu-graphs") return make_graph_emulation_backend(make_cpu_backend(cpu_threads, p));
  if (device.rfind("cuda:", 0) == 0) {
    const std::string idx = device.substr(5);
    if (!idx.empty() && idx.size() < 4 && idx.find_first_not_of("0123456789") == std::string::npos)
      return make_cuda_backend(std::stoi(idx), p, batch_invariant);
  }
  throw Error("device '" + device + "': expected cpu, cuda, cuda:N, cuda-check, cuda-profile, cpu-profile or cpu-graphs");
}

}  // namespace deepinfer::kernels
