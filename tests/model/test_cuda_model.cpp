// CUDA-only model tests: random weights made on the device equal the CPU's (float32, bf16 and
// the release formats, and a random release-format model runs as on the CPU), the bf16
// tensor-core matmul against the CPU on bf16-rounded inputs, and every golden fixture with
// bf16 weights and activations (dtype bfloat16) against the CPU's emulation of the same
// precision: the window-only fixture within 2e-2 with greedy tokens identical where the
// margin exceeds the error; the fixtures with FP4 state through the cross-check backend (every
// discrete decision equal to the CPU's on the same inputs). Distances to the float32
// reference are printed. Engram tables in host memory against tables in device memory, bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/npy.h"
#include "engine/load_model.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v41.h"
#include "model/quantize.h"
#include "model/weights.h"
#include "runner/batch_runner.h"
#include "tensor_bytes.h"
#include "tokenizer/tokenizer.h"

using namespace deepinfer;

namespace {

double rel_err(const std::vector<float>& ours, const std::vector<float>& ref) {
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(ref[i])));
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(ours[i] - ref[i])));
  }
  return max_diff / max_ref;
}

TEST(CudaModel, RandomFillMatchesTheCpu) {
  auto gpu = kernels::make_cuda_backend(0);
  auto cpu = kernels::make_cpu_backend(2);
  const int64_t n = 1 << 20;
  for (auto fmt : {kernels::WeightFormat::kF32, kernels::WeightFormat::kBF16}) {
    for (float mean : {0.0f, 1.0f}) {
      const int64_t bytes = n * (fmt == kernels::WeightFormat::kF32 ? 4 : 2);
      kernels::Buf<uint8_t> d(*gpu, bytes);
      std::vector<uint8_t> h(static_cast<size_t>(bytes)), got(h.size());
      const kernels::RandomFillArgs a{.format = fmt, .n = n, .seed = 77, .mean = mean, .std = 0.03f};
      auto ad = a, ah = a;
      ad.out = d.data();
      ah.out = h.data();
      gpu->fill_random(ad);
      cpu->fill_random(ah);
      gpu->download(got.data(), d.data(), bytes);
      // Box-Muller in double: the device's log/cos may differ from glibc's in the last bits of
      // a double, which changes the float only when it sits on a rounding boundary.
      int64_t differ = 0;
      const int64_t width = fmt == kernels::WeightFormat::kF32 ? 4 : 2;
      for (int64_t i = 0; i < n; ++i) differ += std::memcmp(&h[i * width], &got[i * width], width) != 0;
      EXPECT_LE(differ, n / 100000) << "format " << static_cast<int>(fmt) << " mean " << mean;
    }
  }
}

// Random release-format weights made on the GPU (fill_random, then quantize_weight in row chunks
// into the final buffers) against the host path (float32, then quantize_release), every tensor
// byte for byte. Exactly, against the host's quantisation of the GPU's own float32 fills (the
// same streams without the quantization_config), so no quantiser difference can hide; against
// the host path itself, a tensor may differ only where the device's Box-Muller gave another
// float than the host's (the fill's known last-bit difference, counted and bounded as
// RandomFillMatchesTheCpu bounds it). Chunks of one 32-row block, and the default.
TEST(CudaModel, RandomReleaseWeightsMatchTheHost) {
  const loader::ModelConfig c = loader::load_config(std::string(DEEPINFER_TEST_DATA) + "/v41/full-q/config.json");
  ASSERT_TRUE(c.quantization.present);
  loader::ModelConfig plain = c;
  plain.quantization = {};
  auto gpu = kernels::make_cuda_backend(0);
  auto cpu = kernels::make_cpu_backend(2);
  model::Weights host = model::random_weights(c, 9), host_f32 = model::random_weights(plain, 9);
  model::Weights dev_f32 = model::random_weights_on(plain, 9, *gpu);
  const auto h = deepinfer::testing::tensor_bytes(c, host, *cpu), hf = deepinfer::testing::tensor_bytes(plain, host_f32, *cpu);
  const auto df = deepinfer::testing::tensor_bytes(plain, dev_f32, *gpu);
  for (const int64_t chunk : {int64_t{1}, model::kRandomChunkFloats}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    model::Weights dev = chunk == model::kRandomChunkFloats ? model::random_weights(c, 9, gpu.get())
                                                            : model::random_weights_on(c, 9, *gpu, kernels::WeightFormat::kF32, chunk);
    EXPECT_TRUE(dev.on_backend);
    const auto d = deepinfer::testing::tensor_bytes(c, dev, *gpu);
    ASSERT_EQ(d.size(), h.size());
    ASSERT_EQ(df.size(), h.size());
    int64_t fills = 0, fills_differ = 0, quantised = 0, tensors_differ = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      ASSERT_EQ(d[i].name, h[i].name);
      EXPECT_EQ(d[i].format, h[i].format) << d[i].name;
      // The GPU's floats and the host's, for this tensor.
      const int64_t n = d[i].rows * d[i].cols;
      std::vector<float> xd(static_cast<size_t>(n)), xh(xd.size());
      std::memcpy(xd.data(), df[i].bytes.data(), xd.size() * 4);
      std::memcpy(xh.data(), hf[i].bytes.data(), xh.size() * 4);
      int64_t differ = 0;
      for (int64_t j = 0; j < n; ++j) differ += std::memcmp(&xd[j], &xh[j], 4) != 0;
      fills += n;
      fills_differ += differ;
      // Exact: the host's bytes of the GPU's floats.
      std::vector<uint8_t> want = df[i].bytes;
      if (d[i].format > static_cast<int>(kernels::WeightFormat::kF32)) {
        model::Weights owner;
        const auto f = static_cast<kernels::WeightFormat>(d[i].format);
        const model::Mat q = model::quantize_matrix(model::Mat::f32(xd.data(), d[i].rows, d[i].cols), f, owner);
        const int64_t sc = kernels::weight_scale_bytes(q);
        want.assign(static_cast<const uint8_t*>(q.data), static_cast<const uint8_t*>(q.data) + kernels::weight_bytes(q) - sc);
        want.insert(want.end(), q.scale, q.scale + sc);
        quantised += f != kernels::WeightFormat::kBF16;
      }
      EXPECT_TRUE(d[i].bytes == want) << d[i].name << ": the GPU's bytes are not the host's quantisation of its floats";
      // Against the host path: equal wherever the fills agree.
      const bool same = d[i].bytes == h[i].bytes;
      tensors_differ += !same;
      if (differ == 0) {
        EXPECT_TRUE(same) << d[i].name << " differs from the host path although its float fill agrees";
      }
    }
    std::printf("[random release weights, chunk %lld] %zu tensors (%lld FP8/MXFP4), %lld of %lld fill values differ from "
                "the host's, %lld tensors differ from the host path\n",
                static_cast<long long>(chunk), d.size(), static_cast<long long>(quantised), static_cast<long long>(fills_differ),
                static_cast<long long>(fills), static_cast<long long>(tensors_differ));
    EXPECT_GT(quantised, 100);
    EXPECT_LE(fills_differ, fills / 100000);
  }
}

// A random release-format model loaded on the GPU (its weights made there) runs a forward whose
// logits follow the CPU's run of the same random model (a loose bound: FP8/FP4 state rounding
// near a midpoint moves the float32 logits by ~1e-4; garbage weights would move them by O(1)).
TEST(CudaModel, RandomReleaseModelRunsLikeTheCpu) {
  const std::string dir = std::string(DEEPINFER_TEST_DATA) + "/v41/full-q";
  auto gpu = kernels::make_cuda_backend(0);
  auto cpu = kernels::make_cpu_backend(2);
  auto lg = engine::load_model(dir, *gpu, engine::LoadFormat::kRandom, 5);
  auto lc = engine::load_model(dir, *cpu, engine::LoadFormat::kRandom, 5);
  const std::vector<int64_t> tokens = core::read_npy_ints(dir + "/golden/tokens.npy");
  const int64_t V = lc.model->config().vocab_size, n = static_cast<int64_t>(tokens.size());
  std::vector<float> og(static_cast<size_t>(n * V)), oc(og.size());
  auto sg = lg.model->new_state();
  auto sc = lc.model->new_state();
  runner::BatchRunner(*lg.model).forward(tokens.data(), n, sg, og.data());
  runner::BatchRunner(*lc.model).forward(tokens.data(), n, sc, oc.data());
  const double err = rel_err(og, oc);
  std::printf("[random full-q] GPU logits vs the CPU's: rel err %.3g\n", err);
  EXPECT_LE(err, 1e-2);
}


// The memory plan load_model checks against the GPU's free memory counts exactly the bytes the
// load allocates on the device: random bf16 weights made there, the release checkpoint uploaded
// as stored, and random release-format weights made and quantised on the device.
TEST(CudaModel, MemoryPlanIsTheDeviceBytesAllocated) {
  const std::string data = std::string(DEEPINFER_TEST_DATA) + "/v41/";
  struct Case {
    std::string fixture;
    engine::LoadFormat format;
  };
  for (const Case& k : {Case{"full", engine::LoadFormat::kRandom}, Case{"full-q", engine::LoadFormat::kAuto},
                        Case{"full-q", engine::LoadFormat::kRandom}}) {
    SCOPED_TRACE(k.fixture);
    auto gpu = kernels::make_cuda_backend(0, kernels::Precision::kBF16);
    engine::LoadedModel lm = engine::load_model(data + k.fixture, *gpu, k.format);
    int64_t allocated = 0;
    for (const auto& b : lm.model->weights().device) allocated += b.bytes();
    EXPECT_EQ(lm.memory.device_weight_bytes(), allocated);
    EXPECT_GT(lm.available.device, lm.memory.device_needed());
    EXPECT_EQ(lm.memory.options.device, "cuda");
  }
  // Too little free memory (injected): refused before the load, naming both figures.
  auto gpu = kernels::make_cuda_backend(0);
  engine::MemoryOptions m;
  m.available.device = 4096;
  m.device = "cuda:0";
  try {
    engine::load_model(data + "full-q", *gpu, engine::LoadFormat::kAuto, 0, m);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the model does not fit on cuda:0: it needs "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("but 4.1 KB is free"), std::string::npos) << e.what();
  }
}

// Engram tables in host memory (the default: each step uploads the rows it reads as a compact
// block) give the logits of tables in device memory bitwise: the release checkpoint (FP8-row
// tables) and the float one, random release weights (tables made on the device, downloaded),
// float32 and bf16, the golden tokens in one chunk and in chunks of 7.
TEST(CudaModel, EngramHostTablesGiveTheDeviceTablesLogitsBitwise) {
  const std::string data = std::string(DEEPINFER_TEST_DATA) + "/v41/";
  struct Case {
    std::string fixture;
    engine::LoadFormat format;
    kernels::Precision precision;
  };
  for (const Case& k : {Case{"full", engine::LoadFormat::kAuto, kernels::Precision::kFloat32},
                        Case{"full-q", engine::LoadFormat::kAuto, kernels::Precision::kFloat32},
                        Case{"full-q", engine::LoadFormat::kAuto, kernels::Precision::kBF16},
                        Case{"full-q", engine::LoadFormat::kRandom, kernels::Precision::kBF16}}) {
    SCOPED_TRACE(k.fixture + (k.format == engine::LoadFormat::kRandom ? " random" : "") +
                 (k.precision == kernels::Precision::kBF16 ? " bf16" : " float32"));
    const std::vector<int64_t> toks = core::read_npy_ints(data + k.fixture + "/golden/tokens.npy");
    const int64_t n = static_cast<int64_t>(toks.size());
    auto run = [&](bool host_tables, int64_t chunk) {
      auto gpu = kernels::make_cuda_backend(0, k.precision);
      engine::MemoryOptions m;
      m.engram_tables_on_host = host_tables;
      engine::LoadedModel lm = engine::load_model(data + k.fixture, *gpu, k.format, 3, m);
      EXPECT_EQ(lm.model->weights().engram_tables_on_host, host_tables);
      const int64_t V = lm.model->config().vocab_size;
      std::vector<float> out(static_cast<size_t>(n * V));
      auto st = lm.model->new_state();
      runner::BatchRunner r(*lm.model);
      for (int64_t done = 0; done < n; done += chunk)
        r.forward(toks.data() + done, std::min(chunk, n - done), st, out.data() + done * V);
      return out;
    };
    for (int64_t chunk : {n, int64_t{7}}) {
      const std::vector<float> dev = run(false, chunk), host = run(true, chunk);
      ASSERT_EQ(dev.size(), host.size());
      for (float v : dev) ASSERT_TRUE(std::isfinite(v));
      EXPECT_EQ(std::memcmp(dev.data(), host.data(), dev.size() * sizeof(float)), 0) << "chunk " << chunk;
    }
  }
}

TEST(CudaModel, Bf16MatmulMatchesTheCpuOnRoundedInputs) {
  auto gpu = kernels::make_cuda_backend(0, kernels::Precision::kBF16);
  auto cpu = kernels::make_cpu_backend(2);
  const int64_t m = 37, n = 300, k = 1280;
  std::vector<float> x(static_cast<size_t>(m * k)), xr(x.size());
  std::vector<uint16_t> w(static_cast<size_t>(n * k));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
    xr[i] = core::bf16_to_f32(core::f32_to_bf16(x[i]));
  }
  for (size_t i = 0; i < w.size(); ++i) w[i] = core::f32_to_bf16(std::cos(0.11f * static_cast<float>(i)) * 0.05f);
  std::vector<float> ref(static_cast<size_t>(m * n)), got(ref.size());
  cpu->matmul({.x = xr.data(), .w = {kernels::WeightFormat::kBF16, w.data(), nullptr, n, k}, .y = ref.data(), .m = m, .n = n, .k = k});
  kernels::Buf<float> dx(*gpu), dy(*gpu, m * n);
  kernels::Buf<uint16_t> dw(*gpu);
  dx.upload(x);
  dw.upload(w);
  gpu->matmul({.x = dx.data(), .w = {kernels::WeightFormat::kBF16, dw.data(), nullptr, n, k}, .y = dy.data(), .m = m, .n = n, .k = k});
  got = dy.download();
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(ref[i])));
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(ref[i] - got[i])));
  }
  EXPECT_LE(max_diff / max_ref, 1e-5);
}

// The fixture's model with bf16 weights (release checkpoints keep their FP8/FP4 codes, exact
// in bf16) on `be`; all-row logits of `tokens`.
std::vector<float> bf16_logits(const std::string& dir, kernels::Backend& be, const std::vector<int64_t>& tokens) {
  auto ck = loader::Checkpoint::open(dir);
  model::Weights w = model::load_weights(*ck);
  if (!ck->config().quantization.present) model::convert_matmul_weights(ck->config(), w, kernels::WeightFormat::kBF16);
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (std::filesystem::exists(dir + "/tokenizer.json")) tok = tokenizer::Tokenizer::load(dir);
  model::DeepseekV41 m(ck->config(), std::move(w), be, engine::make_engram_hasher(ck->config(), tok.get(), dir));
  const int64_t V = m.config().vocab_size, n = static_cast<int64_t>(tokens.size());
  std::vector<float> out(static_cast<size_t>(n * V));
  auto st = m.new_state();
  runner::BatchRunner(m).forward(tokens.data(), n, st, out.data());
  return out;
}

loader::ModelConfig ck_config(const std::string& dir) { return loader::Checkpoint::open(dir)->config(); }

class GoldenBf16 : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenBf16, LogitsAndGreedyTokens) {
  const std::string dir = std::string(DEEPINFER_TEST_DATA) + "/v41/" + GetParam();
  auto gpu = kernels::make_cuda_backend(0, kernels::Precision::kBF16);
  auto cpu = kernels::make_cpu_backend(2, kernels::Precision::kBF16);  // the same rounding, emulated
  auto cpu32 = kernels::make_cpu_backend(2);
  const std::vector<int64_t> tokens = core::read_npy_ints(dir + "/golden/tokens.npy");
  const std::vector<float> ref = core::read_npy_f32(dir + "/golden/logits_full.npy");
  const std::vector<float> ours = bf16_logits(dir, *gpu, tokens);
  const std::vector<float> emulated = bf16_logits(dir, *cpu, tokens);
  const std::vector<float> weights_only = bf16_logits(dir, *cpu32, tokens);
  const double err = rel_err(ours, emulated);
  std::printf("[%s bf16] rel err vs the CPU's bf16 emulation %.3g; vs the float32 reference %.3g (bf16 weights with "
              "float32 activations: %.3g)\n",
              GetParam().c_str(), err, rel_err(ours, ref), rel_err(weights_only, ref));
  const loader::ModelConfig cfg = ck_config(dir);
  bool fp4_state = false;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) fp4_state = fp4_state || cfg.ratio(l) > 0;
  if (fp4_state) {
    // Where FP4 compressed KV and indexer keys are rounded, the tensor cores' accumulation
    // (not IEEE round-per-add) moves products by ~1e-6 relative and flips FP4 codes that sit
    // near a rounding midpoint; in these tiny random models that moves the logits by 0.08-0.18
    // against the CPU's emulation (docs/lab/device-runs.md), so neither a 2e-2 bound nor greedy
    // identity can be asserted end to end. What is asserted: run through the cross-check
    // backend, every discrete decision of the bf16 GPU run (FP8/FP4 rounding, routing,
    // candidate blocks, top-k) equals the CPU reference's on the same inputs.
    auto checked = kernels::make_cross_check_backend(kernels::make_cuda_backend(0, kernels::Precision::kBF16));
    bf16_logits(dir, *checked, tokens);
    const kernels::CrossCheckCounts c = kernels::cross_check_counts(*checked);
    std::printf("[%s bf16] cross-check: %lld discrete ops, %lld disagreed\n", GetParam().c_str(),
                static_cast<long long>(c.checked), static_cast<long long>(c.disagreed));
    EXPECT_GT(c.checked, 0);
    EXPECT_EQ(c.disagreed, 0);
    return;
  }
  // Window-only fixture: the logits within 2e-2 of the emulation, and greedy tokens (teacher-
  // forced on the reference's continuation) equal to the emulation's wherever its top-2
  // margin exceeds twice that bound.
  EXPECT_LE(err, 2e-2);
  const int64_t V = static_cast<int64_t>(ref.size() / tokens.size());
  std::vector<int64_t> seq = core::read_npy_ints(dir + "/golden/greedy_prompt.npy");
  const std::vector<int64_t> expect = core::read_npy_ints(dir + "/golden/greedy_tokens.npy");
  const int64_t n_prompt = static_cast<int64_t>(seq.size());
  seq.insert(seq.end(), expect.begin(), expect.end() - 1);
  const std::vector<float> lg = bf16_logits(dir, *gpu, seq), lc = bf16_logits(dir, *cpu, seq);
  double max_ref = 0;
  for (float v : lc) max_ref = std::max(max_ref, static_cast<double>(std::fabs(v)));
  int64_t checked = 0, same = 0;
  for (size_t i = 0; i < expect.size(); ++i) {
    const float* row = lg.data() + (n_prompt - 1 + static_cast<int64_t>(i)) * V;
    const float* crow = lc.data() + (n_prompt - 1 + static_cast<int64_t>(i)) * V;
    std::vector<float> sorted(crow, crow + V);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] <= 2.0 * 2e-2 * max_ref) continue;
    ++checked;
    const int64_t top = std::max_element(row, row + V) - row, ctop = std::max_element(crow, crow + V) - crow;
    same += top == ctop;
    EXPECT_EQ(top, ctop) << "greedy step " << i;
  }
  std::printf("[%s bf16] greedy: %lld of %zu steps outside the error margin, %lld identical\n", GetParam().c_str(),
              static_cast<long long>(checked), expect.size(), static_cast<long long>(same));
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(V41, GoldenBf16, ::testing::Values("swa", "ced-1src", "ced", "ced-reindex", "full", "full-q"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string s = p.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
