#include <memory>

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

 private:
  core::ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads) { return std::make_unique<CpuBackend>(n_threads); }

}  // namespace deepinfer::kernels
