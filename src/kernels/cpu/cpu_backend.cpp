#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "kernels/cpu/cpu_ops.h"

namespace deepinfer::kernels {

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads) : pool_(n_threads) {}
  const char* name() const override { return "cpu"; }
  void matmul(const MatmulArgs& a) override { cpu::matmul(pool_, a); }
  void rms_norm(const RmsNormArgs& a) override { cpu::rms_norm(pool_, a); }
  void rope(const RopeArgs& a) override { cpu::rope(pool_, a); }
  void fake_quant(const FakeQuantArgs& a) override { cpu::fake_quant(pool_, a); }
  void hc_mixes(const HcMixesArgs& a) override { cpu::hc_mixes(pool_, a); }
  void hc_collapse(const HcCollapseArgs& a) override { cpu::hc_collapse(pool_, a); }
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
  void dequant_packed(const DequantPackedArgs& a) override { cpu::dequant_packed(pool_, a); }
  void fill_random(const RandomFillArgs& a) override { cpu::fill_random(pool_, a); }

  // Host memory, 64-byte aligned.
  bool host_memory() const override { return true; }
  void* alloc(int64_t bytes) override {
    return ::operator new(static_cast<size_t>(std::max<int64_t>(bytes, 1)), std::align_val_t(64));
  }
  void release(void* p) override { ::operator delete(p, std::align_val_t(64)); }
  void upload(void* dst, const void* src, int64_t bytes) override { copy(dst, src, bytes); }
  void download(void* dst, const void* src, int64_t bytes) override { copy(dst, src, bytes); }
  void copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  void zero(void* p, int64_t bytes) override {
    if (bytes > 0) std::memset(p, 0, static_cast<size_t>(bytes));
  }

 private:
  core::ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads) { return std::make_unique<CpuBackend>(n_threads); }

}  // namespace deepinfer::kernels
