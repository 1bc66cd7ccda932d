// Backend decorators for kernel work. CrossCheck runs every op on a device backend and replays
// the discrete ones (rounding to FP8/FP4, expert routing, candidate blocks, top-k) on the CPU
// reference with the same inputs, reporting any disagreement on stderr (`--device
// cuda-check`). Profile times every op kind (`--device cuda-profile`, `cpu-profile`).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <cstring>
#include <vector>

#include "kernels/backend.h"

namespace deepinfer::kernels {

namespace {

// Forwards every op to `d_`, through around() (a hook for decorators).
class Forwarding : public Backend {
 public:
  explicit Forwarding(std::unique_ptr<Backend> dev) : d_(std::move(dev)) {}
  bool host_memory() const override { return d_->host_memory(); }
  int64_t memory_available() const override { return d_->memory_available(); }
  Precision precision() const override { return d_->precision(); }
  void* alloc(int64_t b) override { return d_->alloc(b); }
  void release(void* p) override { d_->release(p); }
  void upload(void* dst, const void* src, int64_t b) override {
    around("upload", [this, dst, src, b] { d_->upload(dst, src, b); });
  }
  // (As an upload: a decorator that refuses uploads, e.g. while capturing, refuses it too.)
  void upload_batch(const UploadItem* items, int64_t n) override {
    std::vector<UploadItem> v(items, items + n);
    around("upload", [this, v] { d_->upload_batch(v.data(), static_cast<int64_t>(v.size())); });
  }
  void upload_ahead(void* dst, int64_t b, const std::function<void(uint8_t*)>& fill) override {
    around("upload", [this, dst, b, fill] { d_->upload_ahead(dst, b, fill); });
  }
  void await_uploads() override {
    around("await_uploads", [this] { d_->await_uploads(); });
  }
  void download(void* dst, const void* src, int64_t b) override {
    around("download", [this, dst, src, b] { d_->download(dst, src, b); });
  }
  void copy(void* dst, const void* src, int64_t b) override { around("copy", [this, dst, src, b] { d_->copy(dst, src, b); }); }
  void zero(void* p, int64_t b) override { around("zero", [this, p, b] { d_->zero(p, b); }); }
  void synchronize() override { d_->synchronize(); }
// The op's arguments are copied into the closure (a decorator may run it later).
#define DI_FORWARD(op, Args) \
  void op(const Args& a) override { around(#op, [this, a] { d_->op(a); }); }
  DI_FORWARD(matmul, MatmulArgs)
  DI_FORWARD(rms_norm, RmsNormArgs)
  DI_FORWARD(rope, RopeArgs)
  DI_FORWARD(fake_quant, FakeQuantArgs)
  DI_FORWARD(hc_mixes, HcMixesArgs)
  DI_FORWARD(hc_collapse, HcCollapseArgs)
  DI_FORWARD(hc_expand, HcExpandArgs)
  DI_FORWARD(attention, AttentionArgs)
  DI_FORWARD(compress_pool, CompressPoolArgs)
  DI_FORWARD(indexer_scores, IndexerScoreArgs)
  DI_FORWARD(candidate_blocks, CandidateBlocksArgs)
  DI_FORWARD(topk_mask, TopkMaskArgs)
  DI_FORWARD(router, RouterArgs)
  DI_FORWARD(swiglu, SwigluArgs)
  DI_FORWARD(engram_gate, EngramGateArgs)
  DI_FORWARD(gather_weight_rows, GatherWeightRowsArgs)
  DI_FORWARD(scale, ScaleArgs)
  DI_FORWARD(gather_rows, GatherRowsArgs)
  DI_FORWARD(moe_combine, MoeCombineArgs)
  DI_FORWARD(dequant_packed, DequantPackedArgs)
  DI_FORWARD(fill_random, RandomFillArgs)
  DI_FORWARD(quantize_weight, QuantizeWeightArgs)
  DI_FORWARD(copy_batch, CopyBatchArgs)
  DI_FORWARD(dequant_packed_batch, DequantPackedBatchArgs)
  DI_FORWARD(moe_permute, MoePermuteArgs)
  DI_FORWARD(sample_rows, SampleRowsArgs)
  DI_FORWARD(grouped_matmul, GroupedMatmulArgs)
  DI_FORWARD(multi_matmul, MultiMatmulArgs)
#undef DI_FORWARD
// A batch's items are copied too (the array is the caller's).
#define DI_FORWARD_BATCH(op, Args)                                                            \
  void op(const OpBatch<Args>& b) override {                                                \
    std::vector<Args> items(b.items, b.items + b.n);                                        \
    around(#op, [this, items] { d_->op({.items = items.data(), .n = static_cast<int64_t>(items.size())}); }); \
  }
  DI_FORWARD_BATCH(indexer_scores_batch, IndexerScoreArgs)
  DI_FORWARD_BATCH(candidate_blocks_batch, CandidateBlocksArgs)
  DI_FORWARD_BATCH(topk_mask_batch, TopkMaskArgs)
#undef DI_FORWARD_BATCH

 protected:
  virtual void around(const char*, const std::function<void()>& f) { f(); }
  std::unique_ptr<Backend> d_;
};

// Wall time per op kind, the device synchronised after each op (so launches do not overlap);
// the table goes to stderr when the backend is destroyed.
class Profile final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  ~Profile() override {
    std::vector<std::pair<std::string, Stat>> v(stats_.begin(), stats_.end());
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.s > b.second.s; });
    double total = 0;
    for (const auto& [k, st] : v) total += st.s;
    std::fprintf(stderr, "profile (%s, synchronised per op): %.3f s in %zu op kinds\n", d_->name(), total, v.size());
    for (const auto& [k, st] : v)
      std::fprintf(stderr, "  %-20s %9lld calls %10.3f ms %5.1f%%  %8.1f us/call\n", k.c_str(), st.n, st.s * 1e3,
                   100.0 * st.s / total, st.s / static_cast<double>(st.n) * 1e6);
  }
  const char* name() const override { return "profile"; }

 private:
  struct Stat {
    long long n = 0;
    double s = 0;
  };
  void around(const char* op, const std::function<void()>& f) override {
    d_->synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    d_->synchronize();
    Stat& st = stats_[op];
    ++st.n;
    st.s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::map<std::string, Stat> stats_;
};

class CrossCheck final : public Forwarding {
 public:
  CrossCheck(std::unique_ptr<Backend> dev, std::unique_ptr<Backend> cpu) : Forwarding(std::move(dev)), c_(std::move(cpu)) {}
  ~CrossCheck() override {
    std::fprintf(stderr, "cross-check: %lld checked ops, %lld disagreed\n", checked_, failed_);
    if (closest_op_ > 0)
      std::fprintf(stderr, "cross-check: closest quantiser input to a rounding boundary: %.3g of its block's amax (op #%lld)\n",
                   closest_, closest_op_);
  }
  const char* name() const override { return "cuda-check"; }
  CrossCheckCounts counts() const { return {checked_, failed_, closest_}; }

  // The rounding of the device's inputs against the CPU's; and how near those inputs are to
  // a rounding boundary (where another summation order may legitimately round the other way).
  void fake_quant(const FakeQuantArgs& a) override {
    const int64_t n = a.rows * a.dim;
    std::vector<float> x = get(a.x, n);
    if (a.block > 0 && a.dim % a.block == 0)
      for (int64_t b = 0; b < n / a.block; ++b) {
        const double m = quant_margin(a.kind, x.data() + b * a.block, a.block);
        if (m < closest_) closest_ = m, closest_op_ = checked_ + 1;
      }
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
  // The codes and scales of the chunk's rows, against the CPU's from the same floats.
  void quantize_weight(const QuantizeWeightArgs& a) override {
    d_->quantize_weight(a);
    if (a.rows <= 0 || a.cols <= 0) return;
    const bool block32 = a.format == WeightFormat::kFP8Block32;
    const int64_t code_cols = a.format == WeightFormat::kMXFP4 ? (a.cols + 1) / 2 : a.cols, sc_cols = (a.cols + 31) / 32;
    const int64_t sc_row0 = block32 ? a.row0 / 32 : a.row0, sc_rows = block32 ? (a.rows + 31) / 32 : a.rows;
    std::vector<float> x = get(a.x, a.rows * a.cols);
    std::vector<uint8_t> codes(static_cast<size_t>(a.rows * code_cols)), scales(static_cast<size_t>(sc_rows * sc_cols));
    QuantizeWeightArgs h = a;
    h.x = x.data();
    h.row0 = 0;
    h.codes = codes.data();
    h.scales = scales.data();
    c_->quantize_weight(h);
    const int64_t bad = diff(codes, get(a.codes + a.row0 * code_cols, a.rows * code_cols)) +
                        diff(scales, get(a.scales + sc_row0 * sc_cols, sc_rows * sc_cols));
    report("quantize_weight", bad, a.rows * code_cols + sc_rows * sc_cols);
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
  void moe_permute(const MoePermuteArgs& a) override {
    d_->moe_permute(a);
    const int64_t R = a.n * a.k, rows = R + (a.shared ? a.n : 0), offs = a.experts + (a.shared ? 2 : 1);
    std::vector<int32_t> ids = get(a.ids, R), off(static_cast<size_t>(offs)), tok(static_cast<size_t>(rows)),
        slot(static_cast<size_t>(R));
    std::vector<float> w = get(a.weights, R), pw(static_cast<size_t>(rows));
    MoePermuteArgs h = a;
    h.ids = ids.data();
    h.weights = w.data();
    h.offsets = off.data();
    h.perm_token = tok.data();
    h.perm_weight = pw.data();
    h.slot_row = slot.data();
    c_->moe_permute(h);
    const int64_t bad = diff(off, get(a.offsets, offs)) + diff(tok, get(a.perm_token, rows)) +
                        diff(slot, get(a.slot_row, R)) + diff(pw, get(a.perm_weight, rows));
    report("moe_permute", bad, offs + R + 2 * rows);
  }
  void sample_rows(const SampleRowsArgs& a) override {
    d_->sample_rows(a);
    std::vector<float> x = get(a.x, a.rows * a.cols);
    std::vector<DrawParams> p = a.params ? get(a.params, a.rows) : std::vector<DrawParams>(static_cast<size_t>(a.rows));
    std::vector<int32_t> ids(static_cast<size_t>(a.rows));
    c_->sample_rows({.x = x.data(), .params = p.data(), .ids = ids.data(), .rows = a.rows, .cols = a.cols});
    report("sample_rows", diff(ids, get(a.ids, a.rows)), a.rows);  // logprobs: values, not decisions
  }
// The op on the device, then check(a) for it alone and for each item of its batch form.
#define DI_CHECKED(op, Args)                                      \
  void op(const Args& a) override {                               \
    d_->op(a);                                                    \
    check(a);                                                     \
  }                                                               \
  void op##_batch(const OpBatch<Args>& b) override {              \
    d_->op##_batch(b);                                            \
    for (int64_t i = 0; i < b.n; ++i) check(b.items[i]);          \
  }
  DI_CHECKED(candidate_blocks, CandidateBlocksArgs)
  DI_CHECKED(topk_mask, TopkMaskArgs)
#undef DI_CHECKED

 private:
  // The device's candidate blocks / top-k (already computed) against the CPU's on its inputs.
  void check(const CandidateBlocksArgs& a) {
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
  void check(const TopkMaskArgs& a) {
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
  template <class T>
  std::vector<T> get(const T* p, int64_t n) {
    std::vector<T> v(static_cast<size_t>(n));
    if (n > 0) d_->download(v.data(), p, n * static_cast<int64_t>(sizeof(T)));
    return v;
  }
  template <class T>  // elements whose bits differ
  static int64_t diff(const std::vector<T>& a, const std::vector<T>& b) {
    int64_t d = 0;
    for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
    return d;
  }
  void report(const char* op, int64_t bad, int64_t n) {
    ++checked_;
    if (bad == 0) return;
    ++failed_;
    std::fprintf(stderr, "cross-check: op #%lld %s: %lld of %lld outputs differ from the CPU reference\n", checked_, op,
                 static_cast<long long>(bad), static_cast<long long>(n));
  }
  std::unique_ptr<Backend> c_;
  long long checked_ = 0, failed_ = 0, closest_op_ = 0;
  double closest_ = INFINITY;
};

// Graphs on a backend without them (`cpu-graphs`): a capture records each op, its arguments
// copied, instead of running it; a replay runs the records in order. The CUDA backend's rules
// hold and are enforced the same way: memory allocated while capturing is the pool's until the
// pool is freed (releasing it is a no-op), and uploads, downloads, awaiting uploads,
// synchronising or releasing memory from outside the capture abort. So the model's use of graphs (row buckets, padding,
// buffers that must keep their addresses) is tested where there is no GPU.
class EmulatedGraphs final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  ~EmulatedGraphs() override {
    for (size_t i = 0; i < pools_.size(); ++i) free_graph_pool(static_cast<int64_t>(i));
  }
  const char* name() const override { return "graphs"; }
  void* alloc(int64_t b) override {
    void* p = d_->alloc(b);
    if (capturing_ >= 0) pools_[static_cast<size_t>(capturing_)].push_back(p);
    return p;
  }
  void release(void* p) override {
    for (const auto& pool : pools_)
      if (std::find(pool.begin(), pool.end(), p) != pool.end()) return;  // freed with its pool
    if (capturing_ >= 0 && p) refuse("releasing memory allocated outside it");
    d_->release(p);
  }
  void synchronize() override {
    if (capturing_ >= 0) refuse("synchronising");
    d_->synchronize();
  }
  bool graphs() const override { return true; }
  int64_t new_graph_pool() override {
    pools_.emplace_back();
    return static_cast<int64_t>(pools_.size()) - 1;
  }
  void begin_capture(int64_t pool) override {
    if (capturing_ >= 0) refuse("a nested capture");
    if (pool < 0 || pool >= static_cast<int64_t>(pools_.size())) refuse("a graph pool that does not exist");
    capturing_ = pool;
    recording_.clear();
  }
  int64_t end_capture() override {
    if (capturing_ < 0) refuse("end_capture without begin_capture");
    graphs_.push_back({capturing_, std::move(recording_)});
    recording_.clear();
    capturing_ = -1;
    return static_cast<int64_t>(graphs_.size()) - 1;
  }
  void replay(int64_t g) override {
    if (g < 0 || g >= static_cast<int64_t>(graphs_.size()) || graphs_[static_cast<size_t>(g)].pool < 0)
      refuse("replaying a graph that does not exist");
    for (const auto& op : graphs_[static_cast<size_t>(g)].ops) op();
  }
  void free_graph_pool(int64_t pool) override {
    if (pool == capturing_) refuse("freeing the pool being captured into");
    for (auto& g : graphs_)
      if (g.pool == pool) g = {-1, {}};
    std::vector<void*> mem = std::move(pools_[static_cast<size_t>(pool)]);
    pools_[static_cast<size_t>(pool)].clear();
    for (void* p : mem) d_->release(p);
  }

 private:
  void around(const char* op, const std::function<void()>& f) override {
    if (capturing_ < 0) return f();
    if (!std::strcmp(op, "upload") || !std::strcmp(op, "download") || !std::strcmp(op, "await_uploads")) refuse(op);
    recording_.push_back(f);
  }
  [[noreturn]] static void refuse(const char* what) {
    std::fprintf(stderr, "deepinfer: graph capture (emulated): %s is not allowed here\n", what);
    std::abort();
  }
  struct Graph {
    int64_t pool = -1;
    std::vector<std::function<void()>> ops;
  };
  std::vector<std::vector<void*>> pools_;
  std::vector<Graph> graphs_;
  std::vector<std::function<void()>> recording_;
  int64_t capturing_ = -1;
};

}  // namespace

std::unique_ptr<Backend> make_graph_emulation_backend(std::unique_ptr<Backend> device) {
  return std::make_unique<EmulatedGraphs>(std::move(device));
}

std::unique_ptr<Backend> make_profiling_backend(std::unique_ptr<Backend> device) {
  return std::make_unique<Profile>(std::move(device));
}

CrossCheckCounts cross_check_counts(const Backend& b) {
  const auto* c = dynamic_cast<const CrossCheck*>(&b);
  return c ? c->counts() : CrossCheckCounts{};
}

std::unique_ptr<Backend> make_cross_check_backend(std::unique_ptr<Backend> device) {
  return std::make_unique<CrossCheck>(std::move(device), make_cpu_backend(1));
}

}  // namespace deepinfer::kernels
