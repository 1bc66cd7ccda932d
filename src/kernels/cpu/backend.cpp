// The CPU backend object: the ops of cpu_ops.h on the backend's thread pool, host memory.
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include <unistd.h>

#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/cpu_ops.h"

namespace deepinfer::kernels {

namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(int n_threads, Precision precision) : pool_(n_threads), precision_(precision) {}
  const char* name() const override { return "cpu"; }
  Precision precision() const override { return precision_; }
  void matmul(const MatmulArgs& a) override {
    if (a.groups > 1) {  // one product per group, each exactly as a single product
      for (int64_t g = 0; g < a.groups; ++g) {
        MatmulArgs b = a;
        b.groups = 1;
        b.x = a.x + g * a.x_group_stride;
        b.y = a.y + g * a.y_group_stride;
        b.ldx = a.ldx ? a.ldx : (a.groups - 1) * a.x_group_stride + a.k;  // the columns every group touches
        b.ldy = a.ldy ? a.ldy : (a.groups - 1) * a.y_group_stride + a.n;
        b.w_row0 = a.w_row0 + g * a.n;
        matmul(b);
      }
      return;
    }
    if (precision_ == Precision::kFloat32 || a.f32) return cpu::matmul(pool_, a);
    // bf16 emulation (what the CUDA tensor-core path computes, in float32 here): x and the
    // used weight rows rounded to bf16 first.
    const int64_t ldx = a.ldx ? a.ldx : a.k;
    std::vector<float> x(static_cast<size_t>(a.m * a.k));
    for (int64_t r = 0; r < a.m; ++r)
      for (int64_t c = 0; c < a.k; ++c) x[r * a.k + c] = core::bf16_to_f32(core::f32_to_bf16(a.x[r * ldx + c]));
    MatmulArgs b = a;
    b.x = x.data();
    b.ldx = a.k;
    std::vector<uint16_t> w;
    if (a.w.format != WeightFormat::kBF16) {
      w.resize(static_cast<size_t>(a.n * a.k));
      std::vector<float> row(static_cast<size_t>(a.k));
      for (int64_t n = 0; n < a.n; ++n) {
        dequant_row(a.w, a.w_row0 + n, row.data());
        for (int64_t c = 0; c < a.k; ++c) w[n * a.k + c] = core::f32_to_bf16(row[c]);
      }
      b.w = {WeightFormat::kBF16, w.data(), nullptr, a.n, a.k};
      b.w_row0 = 0;
    }
    cpu::matmul(pool_, b);
  }
  void rms_norm(const RmsNormArgs& a) override { cpu::rms_norm(pool_, a); }
  void rope(const RopeArgs& a) override { cpu::rope(pool_, a); }
  void fake_quant(const FakeQuantArgs& a) override { cpu::fake_quant(pool_, a); }
  void hc_mixes(const HcMixesArgs& a) override { cpu::hc_mixes(pool_, a); }
  void hc_collapse(const HcCollapseArgs& a) override {
    cpu::hc_collapse(pool_, a);
    if (a.norm_y) cpu::rms_norm(pool_, {.x = a.y, .w = a.norm_w, .y = a.norm_y, .rows = a.rows, .dim = a.dim, .eps = a.norm_eps});
  }
  void hc_expand(const HcExpandArgs& a) override { cpu::hc_expand(pool_, a); }
  void attention(const AttentionArgs& a) override { cpu::attention(pool_, a); }
  void compress_pool(const CompressPoolArgs& a) override { cpu::compress_pool(pool_, a); }
  void indexer_scores(const IndexerScoreArgs& a) override { cpu::indexer_scores(pool_, a); }
  void candidate_blocks(const CandidateBlocksArgs& a) override { cpu::candidate_blocks(pool_, a); }
  void topk_mask(const TopkMaskArgs& a) override { cpu::topk_mask(pool_, a); }
  void router(const RouterArgs& a) override { cpu::router(pool_, a); }
  void swiglu(const SwigluArgs& a) override { cpu::swiglu(pool_, a); }
  void engram_gate(const EngramGateArgs& a) override { cpu::engram_gate(pool_, a); }
  void gather_weight_rows(const GatherWeightRowsArgs& a) override { cpu::gather_weight_rows(pool_, a); }
  void scale(const ScaleArgs& a) override { cpu::scale(pool_, a); }
  void gather_rows(const GatherRowsArgs& a) override { cpu::gather_rows(pool_, a); }
  void moe_combine(const MoeCombineArgs& a) override { cpu::moe_combine(pool_, a); }
  void moe_permute(const MoePermuteArgs& a) override { cpu::moe_permute(pool_, a); }
  void sample_rows(const SampleRowsArgs& a) override { cpu::sample_rows(pool_, a); }
  void dequant_packed(const DequantPackedArgs& a) override { cpu::dequant_packed(pool_, a); }
  void fill_random(const RandomFillArgs& a) override { cpu::fill_random(pool_, a); }
  void quantize_weight(const QuantizeWeightArgs& a) override { cpu::quantize_weight(pool_, a); }
  void copy_batch(const CopyBatchArgs& a) override { cpu::copy_batch(pool_, a); }
  void dequant_packed_batch(const DequantPackedBatchArgs& a) override { cpu::dequant_packed_batch(pool_, a); }

  // Host memory, 64-byte aligned.
  bool host_memory() const override { return true; }
  int64_t memory_available() const override {
    return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
  }
  void* alloc(int64_t bytes) override {
    return ::operator new(static_cast<size_t>(std::max<int64_t>(bytes, 1)), std::align_val_t(64));
  }
  void release(void* p) override { ::operator delete(p, std::align_val_t(64)); }
  void upload(void* dst, const void* src, int64_t bytes) override { copy(dst, src, bytes); }
  void upload_ahead(void* dst, int64_t, const std::function<void(uint8_t*)>& fill) override {
    fill(static_cast<uint8_t*>(dst));
  }
  void download(void* dst, const void* src, int64_t bytes) override { copy(dst, src, bytes); }
  void copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  void zero(void* p, int64_t bytes) override {
    if (bytes > 0) std::memset(p, 0, static_cast<size_t>(bytes));
  }

 private:
  core::ThreadPool pool_;
  Precision precision_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads, Precision precision) {
  return std::make_unique<CpuBackend>(n_threads, precision);
}

}  // namespace deepinfer::kernels
