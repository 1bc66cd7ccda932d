// A Backend that runs every op on a device backend and replays the discrete ones (rounding
// to FP8/FP4, expert routing, candidate blocks, top-k) on the CPU reference with the same
// inputs, reporting any disagreement on stderr. A debugging aid for kernel work
// (`--device cuda-check`); it synchronises after every checked op.
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/backend.h"

namespace deepinfer::kernels {

namespace {

class CrossCheck final : public Backend {
 public:
  CrossCheck(std::unique_ptr<Backend> dev, std::unique_ptr<Backend> cpu) : d_(std::move(dev)), c_(std::move(cpu)) {}
  ~CrossCheck() override { std::fprintf(stderr, "cross-check: %lld checked ops, %lld disagreed\n", checked_, failed_); }
  const char* name() const override { return "cuda-check"; }

  bool host_memory() const override { return d_->host_memory(); }
  void* alloc(int64_t b) override { return d_->alloc(b); }
  void release(void* p) override { d_->release(p); }
  void upload(void* dst, const void* src, int64_t b) override { d_->upload(dst, src, b); }
  void download(void* dst, const void* src, int64_t b) override { d_->download(dst, src, b); }
  void copy(void* dst, const void* src, int64_t b) override { d_->copy(dst, src, b); }
  void zero(void* p, int64_t b) override { d_->zero(p, b); }
  void synchronize() override { d_->synchronize(); }

  void matmul(const MatmulArgs& a) override { d_->matmul(a); }
  void rms_norm(const RmsNormArgs& a) override { d_->rms_norm(a); }
  void rope(const RopeArgs& a) override { d_->rope(a); }
  void hc_mixes(const HcMixesArgs& a) override { d_->hc_mixes(a); }
  void hc_collapse(const HcCollapseArgs& a) override { d_->hc_collapse(a); }
  void hc_expand(const HcExpandArgs& a) override { d_->hc_expand(a); }
  void attention(const AttentionArgs& a) override { d_->attention(a); }
  void compress_pool(const CompressPoolArgs& a) override { d_->compress_pool(a); }
  void indexer_scores(const IndexerScoreArgs& a) override { d_->indexer_scores(a); }
  void swiglu(const SwigluArgs& a) override { d_->swiglu(a); }
  void engram_gate(const EngramGateArgs& a) override { d_->engram_gate(a); }
  void gather_weight_rows(const GatherWeightRowsArgs& a) override { d_->gather_weight_rows(a); }
  void scale(const ScaleArgs& a) override { d_->scale(a); }
  void gather_rows(const GatherRowsArgs& a) override { d_->gather_rows(a); }
  void moe_combine(const MoeCombineArgs& a) override { d_->moe_combine(a); }
  void dequant_packed(const DequantPackedArgs& a) override { d_->dequant_packed(a); }
  void fill_random(const RandomFillArgs& a) override { d_->fill_random(a); }
  Precision precision() const override { return d_->precision(); }

  void fake_quant(const FakeQuantArgs& a) override {
    const int64_t n = a.rows * a.dim;
    std::vector<float> x = get(a.x, n);
    d_->fake_quant(a);
    FakeQuantArgs h = a;
    h.x = x.data();
    h.codes = nullptr;
    h.scales = nullptr;
    c_->fake_quant(h);
    const std::vector<float> got = get(a.x, n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += std::memcmp(&got[i], &x[i], 4) != 0;
    report("fake_quant", bad, n);
  }
  void router(const RouterArgs& a) override {
    d_->router(a);
    RouterArgs h = a;
    std::vector<float> logits = get(a.logits, a.rows * a.experts), bias = a.bias ? get(a.bias, a.experts) : std::vector<float>{};
    std::vector<int32_t> ids(static_cast<size_t>(a.rows * a.top_k)), got_ids = get(a.ids, a.rows * a.top_k);
    std::vector<float> w(ids.size());
    h.logits = logits.data();
    h.bias = a.bias ? bias.data() : nullptr;
    h.ids = ids.data();
    h.weights = w.data();
    c_->router(h);
    int64_t bad = 0;
    for (int64_t r = 0; r < a.rows; ++r)
      for (int64_t k = 0; k < a.top_k; ++k) {
        bool found = false;
        for (int64_t j = 0; j < a.top_k; ++j) found = found || got_ids[r * a.top_k + j] == ids[r * a.top_k + k];
        bad += !found;
      }
    report("router", bad, a.rows * a.top_k);
  }
  void candidate_blocks(const CandidateBlocksArgs& a) override {
    d_->candidate_blocks(a);
    std::vector<float> sc = get(a.scores, a.s * a.t);
    std::vector<int64_t> pos = get(a.q_pos, a.s);
    std::vector<uint8_t> keep(static_cast<size_t>(a.s * a.t)), got = get(a.keep, a.s * a.t);
    CandidateBlocksArgs h = a;
    h.scores = sc.data();
    h.q_pos = pos.data();
    h.keep = keep.data();
    c_->candidate_blocks(h);
    report("candidate_blocks", diff(keep, got), a.s * a.t);
  }
  void topk_mask(const TopkMaskArgs& a) override {
    d_->topk_mask(a);
    std::vector<float> sc = get(a.scores, a.s * a.t);
    std::vector<uint8_t> rs = a.restrict_to ? get(a.restrict_to, a.s * a.t) : std::vector<uint8_t>{};
    std::vector<uint8_t> sel(static_cast<size_t>(a.s * a.t)), got = get(a.selected, a.s * a.t);
    TopkMaskArgs h = a;
    h.scores = sc.data();
    h.restrict_to = a.restrict_to ? rs.data() : nullptr;
    h.selected = sel.data();
    c_->topk_mask(h);
    report("topk_mask", diff(sel, got), a.s * a.t);
  }

 private:
  template <class T>
  std::vector<T> get(const T* p, int64_t n) {
    std::vector<T> v(static_cast<size_t>(n));
    if (n > 0) d_->download(v.data(), p, n * static_cast<int64_t>(sizeof(T)));
    return v;
  }
  static int64_t diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    int64_t d = 0;
    for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
    return d;
  }
  void report(const char* op, int64_t bad, int64_t n) {
    ++checked_;
    if (bad == 0) return;
    ++failed_;
    std::fprintf(stderr, "cross-check: op #%lld %s: %lld of %lld outputs differ from the CPU reference\n", checked_, op,
                 static_cast<long long>(bad), static_cast<long long>(n));
  }
  std::unique_ptr<Backend> d_, c_;
  long long checked_ = 0, failed_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cross_check_backend(std::unique_ptr<Backend> device) {
  return std::make_unique<CrossCheck>(std::move(device), make_cpu_backend(1));
}

}  // namespace deepinfer::kernels
