// The CUDA backend object (sm_90a): one stream and one cuBLAS handle per backend; matmul
// through cuBLAS SGEMM (float32, no TF32), quantised weights dequantised on the device first.
// All pointers in the op args are device pointers; the runner owns device memory.
// Memory: stream-ordered allocations (cudaMallocAsync from the device's default pool, kept
// cached); uploads go through a pinned staging ring so the host source may be freed at once
// and the stream is synchronised only when the ring is full; upload_ahead's copies run on a
// second stream, which the compute stream waits for at await_uploads.
// Settings (backend_settings.h): read when the backend is made, held here and handed to every
// op function with the stream (cuda::Stream).
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/cuda_ops.h"

#define DI_CUBLAS_CHECK(expr)                                                                    \
  do {                                                                                           \
    cublasStatus_t st_ = (expr);                                                                 \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                          \
      std::fprintf(stderr, "deepinfer: cuBLAS error %d at %s:%d: %s\n", static_cast<int>(st_),   \
                   __FILE__, __LINE__, #expr);                                                   \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

namespace deepinfer::kernels {

namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, Precision precision, bool invariant, const cuda::Settings& settings)
      : precision_(precision), invariant_(invariant), settings_(settings) {
    DI_CUDA_CHECK(cudaSetDevice(device));
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cstream_ = {stream_, &settings_};
    DI_CUBLAS_CHECK(cublasCreate(&blas_));
    DI_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    DI_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH));  // true float32, no TF32
    DI_CUBLAS_CHECK(cublasCreate(&blas_tc_));                          // bf16 on tensor cores
    DI_CUBLAS_CHECK(cublasSetStream(blas_tc_, stream_));
    DI_CUBLAS_CHECK(cublasSetMathMode(blas_tc_, CUBLAS_DEFAULT_MATH));
    // Fixed cuBLAS workspaces, so a captured product allocates nothing.
    for (auto [h, ws] : {std::pair{blas_, &blas_ws_}, {blas_tc_, &blas_tc_ws_}}) {
      DI_CUDA_CHECK(cudaMalloc(ws, kBlasWorkspace));
      DI_CUBLAS_CHECK(cublasSetWorkspace(h, *ws, kBlasWorkspace));
    }
    // The split products' tile counters (each launch leaves them zeroed).
    DI_CUDA_CHECK(cudaMalloc(&gemm_counters_, cuda::kGemmCounters * sizeof(int)));
    DI_CUDA_CHECK(cudaMemsetAsync(gemm_counters_, 0, cuda::kGemmCounters * sizeof(int), stream_));  // before any op
    // Keep freed pool memory cached instead of returning it to the driver at every sync.
    cudaMemPool_t pool = nullptr;
    DI_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t keep = UINT64_MAX;
    DI_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  ~CudaBackend() override {
    if (copy_stream_) cudaStreamSynchronize(copy_stream_);
    cudaStreamSynchronize(stream_);
    for (auto& [w, t] : tables_) release(t.dev);
    for (size_t i = 0; i < pools_.size(); ++i)
      if (pools_[i]) free_graph_pool(static_cast<int64_t>(i));
    cudaFree(blas_ws_);
    cudaFree(blas_tc_ws_);
    cudaFree(gemm_counters_);
    for (auto& [cls, list] : free_)
      for (void* p : list) cudaFree(p);
    if (staging_) cudaFreeHost(staging_);
    cublasDestroy(blas_);
    cublasDestroy(blas_tc_);
    if (copy_stream_) {
      cudaEventDestroy(ahead_from_);
      cudaEventDestroy(ahead_done_);
      cudaStreamDestroy(copy_stream_);
    }
    cudaStreamDestroy(stream_);
  }
  const char* name() const override { return "cuda"; }

  bool host_memory() const override { return false; }
  int64_t memory_available() const override {
    size_t free = 0, total = 0;
    DI_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return static_cast<int64_t>(free);
  }
  // Stream-ordered: the memory may be used by ops issued after alloc and before release
  // (every op runs on the one stream, so a block released now is free for any later op).
  // Blocks up to kCacheMax bytes come from per-size-class free lists, so the model's many
  // per-step scratch buffers cost no driver call; larger ones go to the pool directly.
  void* alloc(int64_t bytes) override {
    check_size(bytes, "alloc");
    const size_t n = static_cast<size_t>(std::max<int64_t>(bytes, 1));
    if (capturing_) return capturing_->take(n);
    if (n > kCacheMax) {
      void* p = nullptr;
      DI_CUDA_CHECK(cudaMallocAsync(&p, n, stream_));
      return p;
    }
    const size_t cls = size_class(n);
    auto& free_list = free_[cls];
    void* p = nullptr;
    if (!free_list.empty()) {
      p = free_list.back();
      free_list.pop_back();
    } else {
      DI_CUDA_CHECK(cudaMallocAsync(&p, cls, stream_));
    }
    cached_[p] = cls;
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    // A block an upload sent ahead may still be writing is not handed on before it lands.
    if (!capturing_) await_uploads();
    auto it = cached_.find(p);
    if (capturing_ && !capturing_->owns(p)) refuse("releasing memory allocated outside it");
    if (it == cached_.end()) {
      for (const auto& pool : pools_)
        if (pool && pool->owns(p)) return;  // a graph pool's: freed with the pool
      DI_CUDA_CHECK(cudaFreeAsync(p, stream_));
      return;
    }
    free_[it->second].push_back(p);
    cached_.erase(it);
  }
  // A batch's launch is sized by its largest item, so only items of at most kBatchRows rows
  // (decode-sized) share one; larger ones (prefill chunks in a mixed step), a lone small item,
  // and items the launch does not take (`fits` false) run as calls of `one` (the op alone).
  // The shared launch reads the items' args from device memory, uploaded once.
  static constexpr int64_t kBatchRows = 16;
  template <class Args, class Fits, class Launch>
  void run_batch(const OpBatch<Args>& b, void (Backend::*one)(const Args&), Fits fits, Launch launch) {
    std::vector<Args> small;
    for (int64_t i = 0; i < b.n; ++i) {
      if (b.items[i].s <= kBatchRows) small.push_back(b.items[i]);
      else (this->*one)(b.items[i]);
    }
    const int64_t n = static_cast<int64_t>(small.size());
    if (n == 1 || (n > 1 && !fits(small.data(), n))) {
      for (const Args& a : small) (this->*one)(a);
      return;
    }
    if (n == 0) return;
    Args* d = scratch<Args>(n);
    upload(d, small.data(), n * static_cast<int64_t>(sizeof(Args)));
    launch(small.data(), d, n, cstream_);
    release(d);
  }
  // Stream-ordered scratch for an op (the caching allocator's blocks).
  template <class T>
  T* scratch(int64_t count) {
    return static_cast<T*>(alloc(count * static_cast<int64_t>(sizeof(T))));
  }
  // Up to cuda::kInlineCopyMax bytes travel in a launch's parameters. Larger ones are copied
  // into the pinned ring at once (src may be reused when this returns), then to the device in
  // stream order. A full ring waits for the stream, then restarts at 0 (grown first when this
  // one upload is larger than the whole ring).
  void upload(void* dst, const void* src, int64_t bytes) override {
    check_size(bytes, "upload");
    if (capturing_) refuse("an upload");
    if (bytes == 0) return;
    // The smallest in the launch's own parameters: no staging, no host read while it runs.
    if (cuda::inline_copy(dst, src, bytes, cstream_)) return;
    const size_t n = static_cast<size_t>(bytes);
    uint8_t* stage = stage_room(n);
    std::memcpy(stage, src, n);
    // Small uploads by a kernel reading the pinned ring: it joins the programmatic launch chain
    // (measured: batch-1 decode 6.73 -> 6.64 ms, batch 64 34.6 -> 33.9 ms, about 8 uploads per
    // layer); larger ones, and those to an address not 16-byte aligned (the kernel would read
    // the host memory a byte at a time), by the copy engine.
    if (n <= kKernelUploadMax && reinterpret_cast<uintptr_t>(dst) % 16 == 0) cuda::host_copy(dst, stage, bytes, cstream_);
    else DI_CUDA_CHECK(cudaMemcpyAsync(dst, stage, n, cudaMemcpyHostToDevice, stream_));
  }
  // Packed straight into the pinned ring, then copied by the copy engine on a stream of its own
  // once the compute stream reaches this point; await_uploads puts the compute stream behind it.
  void upload_ahead(void* dst, int64_t bytes, const std::function<void(uint8_t*)>& fill) override {
    check_size(bytes, "upload");
    if (capturing_) refuse("an upload");
    if (bytes == 0) return;
    const size_t n = static_cast<size_t>(bytes);
    uint8_t* stage = stage_room(n);
    fill(stage);
    if (!copy_stream_) {
      DI_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
      DI_CUDA_CHECK(cudaEventCreateWithFlags(&ahead_from_, cudaEventDisableTiming));
      DI_CUDA_CHECK(cudaEventCreateWithFlags(&ahead_done_, cudaEventDisableTiming));
    }
    DI_CUDA_CHECK(cudaEventRecord(ahead_from_, stream_));
    DI_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, ahead_from_, 0));
    DI_CUDA_CHECK(cudaMemcpyAsync(dst, stage, n, cudaMemcpyHostToDevice, copy_stream_));
    DI_CUDA_CHECK(cudaEventRecord(ahead_done_, copy_stream_));
    ahead_pending_ = true;
  }
  void await_uploads() override {
    if (capturing_) refuse("waiting for an upload");
    if (!ahead_pending_) return;
    DI_CUDA_CHECK(cudaStreamWaitEvent(stream_, ahead_done_, 0));
    ahead_pending_ = false;
  }
  void upload_batch(const UploadItem* items, int64_t n) override {
    if (capturing_) refuse("an upload");
    for (int64_t i = 0; i < n; ++i) check_size(items[i].bytes, "upload");
    if (!cuda::inline_scatter(items, n, cstream_)) Backend::upload_batch(items, n);
  }
  void download(void* dst, const void* src, int64_t bytes) override {
    check_size(bytes, "download");
    if (capturing_) refuse("a download");
    if (bytes == 0) return;
    await_uploads();  // what was sent ahead lands first
    DI_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_));
    synchronize();
  }
  void copy(void* dst, const void* src, int64_t bytes) override {
    check_size(bytes, "copy");
    if (bytes == 0) return;
    DI_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_));
  }
  void zero(void* p, int64_t bytes) override {
    check_size(bytes, "zero");
    if (bytes == 0) return;
    DI_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), stream_));
  }

  void gather_weight_rows(const GatherWeightRowsArgs& a) override { cuda::gather_weight_rows(a, cstream_); }
  void scale(const ScaleArgs& a) override { cuda::scale(a, cstream_); }
  void gather_rows(const GatherRowsArgs& a) override { cuda::gather_rows(a, cstream_); }
  void moe_combine(const MoeCombineArgs& a) override { cuda::moe_combine(a, cstream_); }
  void dequant_packed(const DequantPackedArgs& a) override { cuda::dequant_packed(a, cstream_); }

  Precision precision() const override { return precision_; }
  void fill_random(const RandomFillArgs& a) override { cuda::fill_random(a, cstream_); }
  void copy_batch(const CopyBatchArgs& a) override { cuda::copy_batch(a, cstream_); }
  void dequant_packed_batch(const DequantPackedBatchArgs& a) override { cuda::dequant_packed_batch(a, cstream_); }

  // y = x · wᵀ through cuBLAS: float32 SGEMM (pedantic) or bf16 GemmEx on tensor cores.
  // Batch-invariant mode runs every product as fixed-shape tiles of kTile rows (the last one
  // zero-padded) from contiguous temporaries, so cuBLAS chooses the same kernel, and so the
  // same reduction order, for a row whatever else is in the batch.
  void matmul(const MatmulArgs& a) override { gemm(a, precision_ == Precision::kBF16 && !a.f32); }
  void moe_permute(const MoePermuteArgs& a) override { cuda::moe_permute(a, cstream_); }
  // Every expert in one launch, the offsets read on the device (no host round trip): bf16
  // tensor cores when every expert is stored as bf16, else float32 math from any format.
  // With a second product (w2, y2): both in one launch on the tensor cores (x rounded once).
  // Gathered rows (x_rows): on the tensor cores x's rows are rounded once and the kernel reads
  // them through the index; otherwise gathered first.
  void grouped_matmul(const GroupedMatmulArgs& a) override {
    if (!a.w2 != !a.y2) {
      std::fprintf(stderr, "deepinfer: grouped matmul: a second product needs both w2 and y2\n");
      std::abort();
    }
    if (a.x_rows && a.x_src_rows <= 0 && a.rows > 0) {
      std::fprintf(stderr, "deepinfer: grouped matmul: x_rows without x_src_rows\n");
      std::abort();
    }
    if (a.rows == 0) return;
    bool tensor_cores = precision_ == Precision::kBF16 && cuda::gemm_bf16_fits(a.n, a.k) && a.experts > 0;
    const WeightFormat wf = a.experts > 0 ? a.w[0].format : WeightFormat::kBF16;  // every expert's, on the tensor cores
    for (const WeightView* w : {a.w, a.w2}) {
      if (!w) continue;
      for (int64_t e = 0; e < a.experts; ++e) {
        const WeightView& v = w[e];
        if (v.rows < a.n || v.cols != a.k) {
          std::fprintf(stderr, "deepinfer: grouped matmul: expert %lld is [%lld, %lld], not [>= %lld, %lld]\n",
                       static_cast<long long>(e), static_cast<long long>(v.rows), static_cast<long long>(v.cols),
                       static_cast<long long>(a.n), static_cast<long long>(a.k));
          std::abort();
        }
        tensor_cores = tensor_cores && v.format == wf && cuda::gemm_bf16_reads(v.format, v.data, v.scale, 0, a.k);
      }
    }
    const WeightView* table = expert_table(a.w, a.experts);
    const WeightView* table2 = a.w2 ? expert_table(a.w2, a.experts) : nullptr;
    if (!tensor_cores && a.x_rows) return Backend::grouped_matmul(a);  // gathers, then comes back
    if (!tensor_cores) {
      cuda::grouped_gemm_any(a.x, table, a.offsets, a.y, a.rows, a.n, a.k, a.experts, precision_ == Precision::kBF16,
                             cstream_);
      if (table2)
        cuda::grouped_gemm_any(a.x, table2, a.offsets, a.y2, a.rows, a.n, a.k, a.experts,
                               precision_ == Precision::kBF16, cstream_);
      return;
    }
    cuda::Bf16Gemm p{.ldx = a.k, .w_format = wf, .w_table = table, .offsets = a.offsets, .x_rows = a.x_rows, .y = a.y, .ldy = a.n,
                     .m = static_cast<int>(a.rows), .n = static_cast<int>(a.n), .k = static_cast<int>(a.k),
                     .experts = static_cast<int>(a.experts)};
    if (table2) {
      p.parts = 2;
      p.part_list[0] = {.w_table = table, .y = a.y, .ldy = a.n, .n = static_cast<int>(a.n)};
      p.part_list[1] = {.w_table = table2, .y = a.y2, .ldy = a.n, .n = static_cast<int>(a.n)};
    }
    gemm_bf16_from(p, a.x, a.x_rows ? a.x_src_rows : a.rows, a.k, a.k);
  }
  // One launch when every output takes the bf16 decode tiling, else one product each.
  static_assert(kMaxMatmulOuts <= cuda::kMaxBf16Parts, "every output of a multi_matmul is a part of one launch");
  void multi_matmul(const MultiMatmulArgs& a) override {
    if (a.count < 0 || a.count > kMaxMatmulOuts) {
      std::fprintf(stderr, "deepinfer: multi matmul: %d outputs\n", a.count);
      std::abort();
    }
    cuda::Bf16Gemm p{.ldx = a.k, .m = static_cast<int>(a.m), .k = static_cast<int>(a.k), .counters = gemm_counters_,
                     .parts = a.count};
    bool one = precision_ == Precision::kBF16 && a.count > 1 && a.m > 0;
    if (one) p.w_format = a.outs[0].w.format;  // every part's, in one launch
    for (int i = 0; i < a.count && one; ++i) {
      const MatmulOut& o = a.outs[i];
      one = o.w.format == p.w_format && cuda::gemm_bf16_reads(o.w.format, o.w.data, o.w.scale, 0, a.k) && o.w.rows >= o.n &&
            o.w.cols == a.k && reinterpret_cast<uintptr_t>(o.y) % 8 == 0;
      p.part_list[i] = {.w_dense = o.w.data, .w_scale = o.w.scale, .y = o.y, .ldy = o.n, .n = static_cast<int>(o.n)};
    }
    if (one && cuda::gemm_bf16_parts_fit(p) && cuda::gemm_bf16_takes_f32(p) && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
        a.k % 4 == 0)
      return gemm_bf16_from(p, a.x, a.m, a.k, a.k);
    // One product each. Where the kernel does not read float32 x itself, every bf16 product reads
    // x rounded to bf16: rounded once for all of them (the same copy each would make).
    if (precision_ != Precision::kBF16 || a.count < 2 || cuda::gemm_bf16_takes_f32(p)) return Backend::multi_matmul(a);
    auto* xb = scratch<__nv_bfloat16>(a.m * a.k);
    cuda::to_bf16(a.x, a.m, a.m, a.k, a.k, xb, cstream_);
    for (int i = 0; i < a.count; ++i) gemm({.x = a.x, .w = a.outs[i].w, .y = a.outs[i].y, .m = a.m, .n = a.outs[i].n, .k = a.k}, true, xb);
    release(xb);
  }
  void hc_mixes(const HcMixesArgs& a) override {
    if (a.rows == 0) return;
    float* part = scratch<float>(cuda::hc_mixes_scratch(a.rows));
    cuda::hc_mixes(a, part, gemm_counters_, cstream_);
    release(part);
  }
  // The fused ops: one launch each where the shapes allow (else, inside, the ops they stand for).
  void hc_mixes_collapse(const HcMixesArgs& m, const HcCollapseArgs& c) override {
    if (m.rows == 0) return hc_collapse(c);
    if (!mixes_collapse_apart(m, c)) {
      std::fprintf(stderr, "deepinfer: hc_mixes_collapse: the collapse reads the pre the mixes write\n");
      std::abort();
    }
    float* part = scratch<float>(cuda::hc_mixes_scratch(m.rows));
    cuda::hc_mixes_collapse(m, c, part, gemm_counters_, cstream_);
    release(part);
  }
  void route(const RouterArgs& r, const MoePermuteArgs& p) override {
    cuda::route(r, p, cstream_);
  }
  void norm_rope_quant(const OpBatch<NormRopeQuantArgs>& b) override {
    cuda::norm_rope_quant(b.items, b.n, cstream_);
  }
  void moe_combine_expand(const MoeCombineArgs& c, const HcExpandArgs& e) override {
    cuda::moe_combine_expand(c, e, cstream_);
  }

 private:
  // Runs p with x (float32, rows of row stride ldx, w_cols columns used) read in place when the
  // kernel rounds it itself, else rounded into a contiguous bf16 copy first (xb: that copy,
  // already made).
  void gemm_bf16_from(cuda::Bf16Gemm p, const float* x, int64_t rows, int64_t w_cols, int64_t ldx,
                      const __nv_bfloat16* xb = nullptr) {
    if (cuda::gemm_bf16_takes_f32(p) && reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0 &&
        p.x_group_stride % 4 == 0) {
      p.x_f32 = x;
      p.ldx = ldx;
    } else if (xb) {
      p.x = xb;
      p.ldx = w_cols;
    } else {
      auto* xcopy = scratch<__nv_bfloat16>(rows * w_cols);
      cuda::to_bf16(x, rows, rows, w_cols, ldx, xcopy, cstream_);
      p.x = xcopy;
      p.ldx = w_cols;
    }
    const int64_t ws = cuda::gemm_bf16_workspace(p);
    p.part = ws ? scratch<float>(ws) : nullptr;
    cuda::gemm_bf16(p, cstream_);
    release(p.part);
    if (p.x && p.x != xb) release(const_cast<__nv_bfloat16*>(p.x));
  }
  static bool stored_format(WeightFormat f) { return f == WeightFormat::kFP8Block32 || f == WeightFormat::kMXFP4; }
  // xb: x already rounded to bf16, contiguous (one group, its k columns), or null.
  void gemm(const MatmulArgs& a, bool bf16, const __nv_bfloat16* xb = nullptr) {
    if (a.m == 0 || a.n == 0) return;
    const int64_t G = std::max<int64_t>(1, a.groups);
    // FP8 / MXFP4 weights the bf16 GEMM cannot read as stored, or products of more than
    // kStoredRows rows (compute-bound: the bf16 warpgroup tiling on 128 x 256 tiles is faster
    // than the stored one on 128 x 128, which decodes each slice once: an l40-e128 prefill of
    // 8 x 4096 took 6.78 s this way, 7.13 s reading every dense product as stored): dequantised
    // to bf16 (exact) and multiplied as bf16 weights are (the same bits as reading them gives).
    // The GEMM then reads weights an earlier launch wrote (fresh_weights_: none before its
    // programmatic wait).
    if (bf16 && stored_format(a.w.format) && cuda::gemm_bf16_fits(a.n, a.k) &&
        (a.m > kStoredRows || !(cuda::gemm_bf16_reads(a.w.format, a.w.data, a.w.scale, a.w_row0, a.k) &&
                                 (G == 1 || cuda::gemm_bf16_reads(a.w.format, a.w.data, a.w.scale, a.w_row0 + a.n, a.k))))) {
      auto* wtmp = scratch<uint16_t>(G * a.n * a.k);
      cuda::dequant_bf16(a.w, a.w_row0, G * a.n, wtmp, cstream_);
      MatmulArgs b = a;
      b.w = {WeightFormat::kBF16, wtmp, nullptr, G * a.n, a.k};
      b.w_row0 = 0;
      fresh_weights_ = true;
      gemm(b, bf16, xb);
      fresh_weights_ = false;
      release(wtmp);
      return;
    }
    // Columns of x and y the product touches (all groups).
    const int64_t xw = G > 1 ? (G - 1) * a.x_group_stride + a.k : a.k;
    const int64_t yw = G > 1 ? (G - 1) * a.y_group_stride + a.n : a.n;
    const int64_t xs = G > 1 ? a.x_group_stride : 0, ys = G > 1 ? a.y_group_stride : 0;
    const int64_t ldx = a.ldx ? a.ldx : xw, ldy = a.ldy ? a.ldy : yw;
    // bf16 weights: the mma kernel, whose rows never depend on the batch (no tiles, no
    // padding), for every product in invariant mode and for decode-sized ones otherwise
    // (cuBLAS is faster on large products). FP8 / MXFP4 weights: the same kernel reading their
    // codes, up to kStoredRows rows (the same bits as on the weights dequantised to bf16).
    const bool stored = stored_format(a.w.format);
    const auto* wb = static_cast<const __nv_bfloat16*>(a.w.data) + a.w_row0 * a.k;
    const bool own = a.w.format == WeightFormat::kBF16
                         ? (invariant_ || a.m <= kOwnGemmRows) && cuda::gemm_bf16_reads(a.w.format, wb, nullptr, 0, a.k)
                         : stored;  // (readable: checked above)
    if (bf16 && own && cuda::gemm_bf16_fits(a.n, a.k) && xs % 8 == 0 && ldy % 2 == 0 && ys % 2 == 0 &&
        reinterpret_cast<uintptr_t>(a.y) % 8 == 0) {
      cuda::Bf16Gemm p{.w_format = a.w.format, .w_dense = stored ? a.w.data : wb, .w_scale = a.w.scale,
                       .w_row0 = stored ? a.w_row0 : 0, .y = a.y, .ldy = ldy, .m = static_cast<int>(a.m),
                       .n = static_cast<int>(a.n), .k = static_cast<int>(a.k), .groups = static_cast<int>(G),
                       .x_group_stride = xs, .w_group_stride = a.n * a.k, .y_group_stride = ys, .counters = gemm_counters_,
                       .w_fresh = fresh_weights_};
      return gemm_bf16_from(p, a.x, a.m, xw, ldx, G == 1 && xw == a.k ? xb : nullptr);
    }
    const int64_t esz = bf16 ? 2 : 4;
    // Weights: used in place when stored as the math's type, else dequantised to a temporary.
    const void* w = nullptr;
    void* wtmp = nullptr;
    if (!bf16 && a.w.format == WeightFormat::kF32) {
      w = static_cast<const float*>(a.w.data) + a.w_row0 * a.k;
    } else if (bf16 && a.w.format == WeightFormat::kBF16) {
      w = static_cast<const uint16_t*>(a.w.data) + a.w_row0 * a.k;
    } else {
      wtmp = scratch<uint8_t>(G * a.n * a.k * esz);
      if (bf16) cuda::dequant_bf16(a.w, a.w_row0, G * a.n, wtmp, cstream_);
      else cuda::dequant(a.w, a.w_row0, G * a.n, static_cast<float*>(wtmp), cstream_);
      w = wtmp;
    }
    const int64_t tile = invariant_ ? (bf16 ? kTileBf16 : kTileF32) : a.m;
    const int64_t mp = (a.m + tile - 1) / tile * tile;
    // Activations: bf16 always converts into a contiguous temporary; float32 copies only in
    // invariant mode (padded, contiguous), else reads x in place.
    const void* x = a.x;
    int64_t ldxx = ldx;
    void* xtmp = nullptr;
    if (bf16 && xb && G == 1 && xw == a.k && mp == a.m) {
      x = xb;
      ldxx = xw;
    } else if (bf16 || invariant_) {
      xtmp = scratch<uint8_t>(mp * xw * esz);
      if (!bf16 && mp > a.m) DI_CUDA_CHECK(cudaMemsetAsync(static_cast<uint8_t*>(xtmp) + a.m * xw * esz, 0,
                                                  static_cast<size_t>((mp - a.m) * xw * esz), stream_));
      if (bf16) cuda::to_bf16(a.x, a.m, mp, xw, ldx, xtmp, cstream_);  // rows >= m zeroed
      else DI_CUDA_CHECK(cudaMemcpy2DAsync(xtmp, static_cast<size_t>(xw * 4), a.x, static_cast<size_t>(ldx * 4),
                                           static_cast<size_t>(xw * 4), static_cast<size_t>(a.m), cudaMemcpyDeviceToDevice,
                                           stream_));
      x = xtmp;
      ldxx = xw;
    }
    // Output: straight into y unless padded rows or a row stride need a temporary.
    float* y = a.y;
    int64_t ldyy = ldy;
    float* ytmp = nullptr;
    if (invariant_ && (mp > a.m || ldy != yw)) {
      ytmp = scratch<float>(mp * yw);
      y = ytmp;
      ldyy = yw;
    }
    // Row-major y[m, n] = x[m, k] · w[n, k]ᵀ is column-major yᵀ = w · xᵀ; groups as a
    // strided batch (weights n rows apart, x and y columns apart).
    const float one = 1.0f, zero = 0.0f;
    const int n = static_cast<int>(a.n), k = static_cast<int>(a.k), lx = static_cast<int>(ldxx), ly = static_cast<int>(ldyy);
    for (int64_t r0 = 0; r0 < mp; r0 += tile) {
      const void* xr = static_cast<const uint8_t*>(x) + r0 * ldxx * esz;
      float* yr = y + r0 * ldyy;
      const int mt = static_cast<int>(tile);
      if (bf16)
        DI_CUBLAS_CHECK(cublasGemmStridedBatchedEx(blas_tc_, CUBLAS_OP_T, CUBLAS_OP_N, n, mt, k, &one, w, CUDA_R_16BF, k, a.n * a.k,
                                                   xr, CUDA_R_16BF, lx, xs, &zero, yr, CUDA_R_32F, ly, ys, static_cast<int>(G),
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      else
        DI_CUBLAS_CHECK(cublasSgemmStridedBatched(blas_, CUBLAS_OP_T, CUBLAS_OP_N, n, mt, k, &one, static_cast<const float*>(w),
                                                  k, a.n * a.k, static_cast<const float*>(xr), lx, xs, &zero, yr, ly, ys,
                                                  static_cast<int>(G)));
    }
    if (ytmp) {
      // Back into y: all columns at once when the groups are adjacent, else group by group
      // (the columns between groups stay untouched).
      const int64_t parts = G > 1 && ys != a.n ? G : 1, width = parts > 1 ? a.n : yw;
      for (int64_t g = 0; g < parts; ++g)
        DI_CUDA_CHECK(cudaMemcpy2DAsync(a.y + g * ys, static_cast<size_t>(ldy * 4), ytmp + g * ys, static_cast<size_t>(yw * 4),
                                        static_cast<size_t>(width * 4), static_cast<size_t>(a.m), cudaMemcpyDeviceToDevice,
                                        stream_));
      release(ytmp);
    }
    release(xtmp);
    release(wtmp);
  }

 public:
  void rms_norm(const RmsNormArgs& a) override { cuda::rms_norm(a, cstream_); }
  void rope(const RopeArgs& a) override { cuda::rope(a, cstream_); }
  void fake_quant(const FakeQuantArgs& a) override { cuda::fake_quant(a, cstream_); }
  void quantize_weight(const QuantizeWeightArgs& a) override { cuda::quantize_weight(a, cstream_); }
  void hc_collapse(const HcCollapseArgs& a) override { cuda::hc_collapse(a, cstream_); }
  void hc_expand(const HcExpandArgs& a) override { cuda::hc_expand(a, cstream_); }
  void attention(const AttentionArgs& a) override { cuda::attention(a, precision_ == Precision::kBF16, temp_, cstream_); }
  void compress_pool(const CompressPoolArgs& a) override { cuda::compress_pool(a, cstream_); }
  void indexer_scores(const IndexerScoreArgs& a) override { cuda::indexer_scores(a, cstream_); }
  void candidate_blocks(const CandidateBlocksArgs& a) override { cuda::candidate_blocks(a, cstream_); }
  void topk_mask(const TopkMaskArgs& a) override { cuda::topk_mask(a, cstream_); }
  // Batches: one launch over the decode-sized items (see run_batch).
  void indexer_scores_batch(const OpBatch<IndexerScoreArgs>& b) override {
    run_batch(b, &Backend::indexer_scores, cuda::indexer_scores_batch_fits, cuda::indexer_scores_batch);
  }
  void candidate_blocks_batch(const OpBatch<CandidateBlocksArgs>& b) override {
    run_batch(b, &Backend::candidate_blocks, [](const CandidateBlocksArgs*, int64_t n) { return cuda::select_batch_fits(n); },
              cuda::candidate_blocks_batch);
  }
  void topk_mask_batch(const OpBatch<TopkMaskArgs>& b) override {
    run_batch(b, &Backend::topk_mask, [](const TopkMaskArgs*, int64_t n) { return cuda::select_batch_fits(n); },
              cuda::topk_mask_batch);
  }
  void router(const RouterArgs& a) override { cuda::router(a, cstream_); }
  void sample_rows(const SampleRowsArgs& a) override {
    void* scratch = alloc(cuda::sample_rows_scratch_bytes(a));
    cuda::sample_rows(a, scratch, cstream_);
    release(scratch);
  }
  void swiglu(const SwigluArgs& a) override { cuda::swiglu(a, cstream_); }
  void engram_gate(const EngramGateArgs& a) override { cuda::engram_gate(a, cstream_); }
  void synchronize() override {
    if (capturing_) refuse("synchronising");
    await_uploads();  // the copy stream's uploads read the ring too
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    staging_off_ = 0;  // every staged copy has completed
  }

  bool graphs() const override { return true; }
  int64_t new_graph_pool() override {
    pools_.push_back(std::make_unique<GraphPool>());
    return static_cast<int64_t>(pools_.size()) - 1;
  }
  // Relaxed capture: a pool may grow (cudaMalloc) while capturing.
  void begin_capture(int64_t pool) override {
    if (capturing_) refuse("a nested capture");
    capturing_ = pool_at(pool);
    capturing_->reset();
    DI_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  }
  int64_t end_capture() override {
    if (!capturing_) refuse("end_capture without begin_capture");
    cudaGraph_t g = nullptr;
    DI_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
    cudaGraphExec_t exec = nullptr;
    DI_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    DI_CUDA_CHECK(cudaGraphDestroy(g));
    capturing_->graphs.push_back(static_cast<int64_t>(graphs_.size()));
    graphs_.push_back(exec);
    capturing_ = nullptr;
    return static_cast<int64_t>(graphs_.size()) - 1;
  }
  void replay(int64_t graph) override {
    if (graph < 0 || graph >= static_cast<int64_t>(graphs_.size()) || !graphs_[static_cast<size_t>(graph)])
      refuse("replaying a graph that does not exist");
    DI_CUDA_CHECK(cudaGraphLaunch(graphs_[static_cast<size_t>(graph)], stream_));
  }
  void free_graph_pool(int64_t pool) override {
    GraphPool* p = pool_at(pool);
    if (p == capturing_) refuse("freeing the pool being captured into");
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (int64_t g : p->graphs) {
      DI_CUDA_CHECK(cudaGraphExecDestroy(graphs_[static_cast<size_t>(g)]));
      graphs_[static_cast<size_t>(g)] = nullptr;
    }
    for (auto& c : p->chunks) DI_CUDA_CHECK(cudaFree(c.first));
    pools_[static_cast<size_t>(pool)].reset();
  }

 private:
  // The device copy of an expert weight table (the views w[0 .. experts)), kept per host
  // array and refreshed when its contents change.
  const WeightView* expert_table(const WeightView* w, int64_t experts) {
    ExpertTable& t = tables_[w];
    const auto same = [](const WeightView& x, const WeightView& y) {
      return x.format == y.format && x.data == y.data && x.scale == y.scale && x.rows == y.rows && x.cols == y.cols;
    };
    if (!std::equal(w, w + experts, t.views.begin(), t.views.end(), same)) {
      release(t.dev);
      t.views.assign(w, w + experts);
      const int64_t bytes = experts * static_cast<int64_t>(sizeof(WeightView));
      t.dev = alloc(bytes);
      upload(t.dev, t.views.data(), bytes);
    }
    return static_cast<const WeightView*>(t.dev);
  }
  // A graph pool: chunks of device memory handed out in order during a capture (from the start
  // at every capture: a pool's graphs never run together), freed with the pool.
  struct GraphPool {
    std::vector<std::pair<void*, size_t>> chunks;
    size_t chunk = 0, off = 0;
    std::vector<int64_t> graphs;
    void reset() { chunk = off = 0; }
    void* take(size_t n) {
      n = (n + 255) & ~size_t{255};
      while (chunk < chunks.size() && off + n > chunks[chunk].second) {
        ++chunk;
        off = 0;
      }
      if (chunk == chunks.size()) {
        const size_t size = std::max(n, size_t{64} << 20);
        void* p = nullptr;
        DI_CUDA_CHECK(cudaMalloc(&p, size));
        chunks.emplace_back(p, size);
        off = 0;
      }
      void* p = static_cast<uint8_t*>(chunks[chunk].first) + off;
      off += n;
      return p;
    }
    bool owns(const void* p) const {
      for (const auto& [base, size] : chunks)
        if (p >= base && p < static_cast<const uint8_t*>(base) + size) return true;
      return false;
    }
  };
  GraphPool* pool_at(int64_t pool) {
    if (pool < 0 || pool >= static_cast<int64_t>(pools_.size()) || !pools_[static_cast<size_t>(pool)])
      refuse("a graph pool that does not exist");
    return pools_[static_cast<size_t>(pool)].get();
  }
  [[noreturn]] static void refuse(const char* what) {
    std::fprintf(stderr, "deepinfer: CUDA graph capture: %s is not allowed here\n", what);
    std::abort();
  }
  std::vector<std::unique_ptr<GraphPool>> pools_;
  std::vector<cudaGraphExec_t> graphs_;
  GraphPool* capturing_ = nullptr;
  static constexpr size_t kBlasWorkspace = size_t{32} << 20;
  void* blas_ws_ = nullptr;
  void* blas_tc_ws_ = nullptr;

  struct ExpertTable {
    std::vector<WeightView> views;
    void* dev = nullptr;
  };
  std::unordered_map<const WeightView*, ExpertTable> tables_;

  // Rows per cuBLAS call in batch-invariant mode: bf16 tiles large enough that prefill stays
  // compute-bound, float32 tiles small enough that decode is not.
  static constexpr int64_t kTileBf16 = 256, kTileF32 = 64;
  static constexpr int64_t kOwnGemmRows = 64;  // non-invariant mode: the mma kernel up to here
  // Dense FP8 / MXFP4 products read as stored up to here: the runner's graph buckets (up to 256
  // rows) never hold a dequantised temporary in their pools.
  static constexpr int64_t kStoredRows = 256;
  bool fresh_weights_ = false;  // gemm: the weights are a temporary an earlier launch wrote
  static constexpr size_t kCacheMax = size_t{64} << 20;  // 64 MiB
  // Eight size classes per power of two (at most 12.5% rounding), 512 bytes at least.
  static size_t size_class(size_t n) {
    if (n <= 512) return 512;
    size_t base = 512;
    while (base * 2 < n) base *= 2;
    const size_t step = base / 8;
    return base + (n - base + step - 1) / step * step;
  }
  std::unordered_map<size_t, std::vector<void*>> free_;  // by class size
  std::unordered_map<void*, size_t> cached_;
  // n bytes of the pinned ring, each staged copy 256-byte aligned. A full ring waits for every
  // copy from it (the streams), then restarts at 0 (grown first when this one upload is larger
  // than the whole ring).
  uint8_t* stage_room(size_t n) {
    if (staging_off_ + n > staging_cap_) {
      synchronize();
      if (n > staging_cap_) {
        if (staging_) DI_CUDA_CHECK(cudaFreeHost(staging_));
        staging_ = nullptr;
        // Room for twice the request: a step's earlier uploads beside its largest one keep
        // the next step of that size from synchronising before it packs.
        staging_cap_ = std::max(2 * n, std::max(kStagingInitial, 2 * staging_cap_));
        DI_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging_), staging_cap_));
      }
    }
    uint8_t* stage = staging_ + staging_off_;
    staging_off_ += (n + 255) & ~size_t{255};
    return stage;
  }
  static constexpr size_t kStagingInitial = size_t{8} << 20;  // 8 MiB, grown on demand
  static constexpr size_t kKernelUploadMax = size_t{64} << 10;  // uploads read by a kernel up to here
  static void check_size(int64_t bytes, const char* what) {
    if (bytes < 0) {
      std::fprintf(stderr, "deepinfer: CUDA %s of a negative size (%lld bytes)\n", what, static_cast<long long>(bytes));
      std::abort();
    }
  }

  cudaStream_t stream_ = nullptr;
  int* gemm_counters_ = nullptr;
  cublasHandle_t blas_ = nullptr, blas_tc_ = nullptr;
  Precision precision_ = Precision::kFloat32;
  bool invariant_ = true;
  // The settings this backend was made with, and its stream with them (what the op functions get).
  cuda::Settings settings_;
  cuda::Stream cstream_;
  uint8_t* staging_ = nullptr;  // pinned host ring for uploads
  size_t staging_cap_ = 0, staging_off_ = 0;
  // upload_ahead's copies: their stream, the compute stream's point they start from, their end.
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t ahead_from_ = nullptr, ahead_done_ = nullptr;
  bool ahead_pending_ = false;  // an upload_ahead not awaited yet
  // The ops' temporaries from alloc / release (the cached blocks).
  struct BackendTemp final : cuda::Temp {
    explicit BackendTemp(CudaBackend& b) : be(b) {}
    void* take(size_t bytes) override { return be.alloc(static_cast<int64_t>(bytes)); }
    void give(void* p) override { be.release(p); }
    CudaBackend& be;
  } temp_{*this};
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, Precision precision, bool batch_invariant) {
  return std::make_unique<CudaBackend>(device, precision, batch_invariant, cuda::Settings::from_env());
}

std::unique_ptr<Backend> cuda::make_cuda_backend(int device, Precision precision, bool batch_invariant,
                                                 const Settings& settings) {
  return std::make_unique<CudaBackend>(device, precision, batch_invariant, settings);
}

}  // namespace deepinfer::kernels
