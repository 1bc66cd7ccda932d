// The CUDA backend object (sm_90a): one stream and one cuBLAS handle per backend; matmul
// through cuBLAS SGEMM (float32, no TF32), quantised weights dequantised on the device first.
// All pointers in the op args are device pointers; the runner owns device memory.
#include <cublas_v2.h>

#include <memory>

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
  explicit CudaBackend(int device) {
    DI_CUDA_CHECK(cudaSetDevice(device));
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DI_CUBLAS_CHECK(cublasCreate(&blas_));
    DI_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    DI_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH));  // true float32, no TF32
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }
  const char* name() const override { return "cuda"; }

  void matmul(const MatmulArgs& a) override {
    if (a.m == 0 || a.n == 0) return;
    const int64_t ldx = a.ldx ? a.ldx : a.k, ldy = a.ldy ? a.ldy : a.n;
    const float* w = a.w.f32();
    float* tmp = nullptr;
    if (w) {
      w += a.w_row0 * a.k;
    } else {
      DI_CUDA_CHECK(cudaMallocAsync(&tmp, static_cast<size_t>(a.n * a.k) * sizeof(float), stream_));
      cuda::dequant(a.w, a.w_row0, a.n, tmp, stream_);
      w = tmp;
    }
    // Row-major y[m, n] = x[m, k] · w[n, k]ᵀ is column-major yᵀ = w · xᵀ.
    const float one = 1.0f, zero = 0.0f;
    DI_CUBLAS_CHECK(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(a.n), static_cast<int>(a.m),
                                static_cast<int>(a.k), &one, w, static_cast<int>(a.k), a.x, static_cast<int>(ldx), &zero, a.y,
                                static_cast<int>(ldy)));
    if (tmp) DI_CUDA_CHECK(cudaFreeAsync(tmp, stream_));
  }
  void rms_norm(const RmsNormArgs& a) override { cuda::rms_norm(a, stream_); }
  void rope(const RopeArgs& a) override { cuda::rope(a, stream_); }
  void fake_quant(const FakeQuantArgs& a) override { cuda::fake_quant(a, stream_); }
  void hc_mixes(const HcMixesArgs& a) override { cuda::hc_mixes(a, stream_); }
  void hc_collapse(const HcCollapseArgs& a) override { cuda::hc_collapse(a, stream_); }
  void hc_expand(const HcExpandArgs& a) override { cuda::hc_expand(a, stream_); }
  void attention(const AttentionArgs& a) override { cuda::attention(a, stream_); }
  void compress_pool(const CompressPoolArgs& a) override { cuda::compress_pool(a, stream_); }
  void indexer_scores(const IndexerScoreArgs& a) override { cuda::indexer_scores(a, stream_); }
  void candidate_blocks(const CandidateBlocksArgs& a) override { cuda::candidate_blocks(a, stream_); }
  void topk_mask(const TopkMaskArgs& a) override { cuda::topk_mask(a, stream_); }
  void router(const RouterArgs& a) override { cuda::router(a, stream_); }
  void swiglu(const SwigluArgs& a) override { cuda::swiglu(a, stream_); }
  void engram_gate(const EngramGateArgs& a) override { cuda::engram_gate(a, stream_); }
  void synchronize() override { DI_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

}  // namespace deepinfer::kernels
