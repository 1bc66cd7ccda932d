// Release checkpoint formats: FP8 / MXFP4 weights read as stored, `deepinfer quantize`
// round trips, and the format's bad-input errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/npy.h"
#include "engine/load_model.h"
#include "kernels/backend.h"
#include "loader/checkpoint.h"
#include "loader/safetensors.h"
#include "model/info.h"
#include "model/quantize.h"
#include "model/weights.h"
#include "runner/batch_runner.h"
#include "tensor_bytes.h"

using namespace deepinfer;
namespace fs = std::filesystem;

namespace {
std::string fixture(const std::string& n) { return std::string(DEEPINFER_TEST_DATA) + "/v41/" + n; }

std::vector<float> logits_of(const std::string& dir) {
  auto be = kernels::make_cpu_backend(2);
  auto lm = engine::load_model(dir, *be);
  auto toks = core::read_npy_ints(dir + "/golden/tokens.npy");
  std::vector<float> out(toks.size() * 1024);
  auto st = lm.model->new_state();
  runner::BatchRunner(*lm.model).forward(toks.data(), static_cast<int64_t>(toks.size()), st, out.data());
  return out;
}

void copy_aux(const std::string& from, const std::string& to) {
  fs::create_directories(to + "/golden");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(from + "/" + f, to + "/" + f, fs::copy_options::overwrite_existing);
  for (const auto& e : fs::directory_iterator(from + "/golden"))
    fs::copy_file(e.path(), to + "/golden/" + e.path().filename().string(), fs::copy_options::overwrite_existing);
}
}  // namespace

// full-q (the release format) dequantised to a float checkpoint, then re-quantised with the
// quantizer `deepinfer quantize` uses: the same stored values, bitwise the same logits.
TEST(Quantize, FloatCheckpointRequantisesToTheFixture) {
  auto ck = loader::Checkpoint::open(fixture("full-q"));
  model::Weights w = model::load_weights(*ck);
  EXPECT_EQ(w.layers[2].attn.wq_a.format, kernels::WeightFormat::kFP8Block32);
  EXPECT_EQ(w.layers[2].ffn.w1[0].format, kernels::WeightFormat::kMXFP4);
  EXPECT_EQ(w.layers[1].engram.table.format, kernels::WeightFormat::kFP8Row32);
  EXPECT_EQ(w.embed.format, kernels::WeightFormat::kBF16);
  // Stored, not widened: the weights take about the file's bytes.
  EXPECT_LT(w.owned_floats * 4, static_cast<int64_t>(fs::file_size(fixture("full-q") + "/model.safetensors")) / 2);

  const std::string fdir = ::testing::TempDir() + "/fullq_float", qdir = ::testing::TempDir() + "/fullq_requant";
  copy_aux(fixture("full-q"), fdir);
  copy_aux(fixture("full-q"), qdir);
  model::dequantize_all(ck->config(), w);
  loader::write_safetensors(fdir + "/model.safetensors", model::export_tensors(ck->config(), w));
  std::ifstream in(fixture("full-q") + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  std::ofstream(fdir + "/config.json") << cfg["text_config"].dump(2);  // a flat, unquantised config
  // Float logits equal the release-format logits (the stored values are exact in float).
  auto ref = logits_of(fixture("full-q"));
  auto flt = logits_of(fdir);
  EXPECT_EQ(std::memcmp(ref.data(), flt.data(), ref.size() * 4), 0);

  // Re-quantise the float checkpoint.
  auto fck = loader::Checkpoint::open(fdir);
  model::Weights fw = model::load_weights(*fck);
  model::quantize_release(fck->config(), fw);
  auto tensors = model::export_tensors(fck->config(), fw);
  loader::write_safetensors(qdir + "/model.safetensors", tensors);
  std::ofstream(qdir + "/config.json") << cfg.dump(2);
  auto again = logits_of(qdir);
  EXPECT_EQ(std::memcmp(ref.data(), again.data(), ref.size() * 4), 0);
  // Every re-quantised value equals the fixture's (scales of blocks whose largest value does
  // not reach the top code may legitimately differ by a power of two, values may not).
  auto qck = loader::Checkpoint::open(qdir);
  model::Weights qw = model::load_weights(*qck);
  auto orig_ck = loader::Checkpoint::open(fixture("full-q"));  // the weights map its file: keep it open
  model::Weights orig = model::load_weights(*orig_ck);
  auto same_values = [&](const model::Mat& a, const model::Mat& b) {
    ASSERT_EQ(a.format, b.format);
    std::vector<float> ra(static_cast<size_t>(a.cols)), rb(ra.size());
    for (int64_t r = 0; r < a.rows; ++r) {
      kernels::dequant_row(a, r, ra.data());
      kernels::dequant_row(b, r, rb.data());
      ASSERT_EQ(std::memcmp(ra.data(), rb.data(), ra.size() * 4), 0) << "row " << r;
    }
  };
  same_values(qw.layers[2].attn.wq_b, orig.layers[2].attn.wq_b);
  same_values(qw.layers[5].ffn.w2[3], orig.layers[5].ffn.w2[3]);
  same_values(qw.layers[4].engram.table, orig.layers[4].engram.table);
  same_values(qw.head, orig.head);
}

TEST(Quantize, FormatsDequantiseExactlyAndRoundTrip) {
  // Values that are already on each grid survive quantisation unchanged; partial blocks at
  // the edges (rows and columns not multiples of 32) are handled.
  model::Weights owner;
  const int64_t R = 37, C = 45;
  std::vector<float> x(static_cast<size_t>(R * C));
  for (int64_t i = 0; i < R * C; ++i) x[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  model::Mat f = model::Mat::f32(x.data(), R, C);
  for (auto fmt : {kernels::WeightFormat::kFP8Block32, kernels::WeightFormat::kFP8Row32, kernels::WeightFormat::kMXFP4,
                   kernels::WeightFormat::kBF16}) {
    model::Mat q = model::quantize_matrix(f, fmt, owner);
    model::Mat dq = model::quantize_matrix(q, kernels::WeightFormat::kF32, owner);
    model::Mat q2 = model::quantize_matrix(dq, fmt, owner);
    std::vector<float> a(static_cast<size_t>(C)), b(a.size());
    double max_err = 0;
    for (int64_t r = 0; r < R; ++r) {
      kernels::dequant_row(q, r, a.data());
      kernels::dequant_row(q2, r, b.data());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
      for (int64_t c = 0; c < C; ++c) max_err = std::max(max_err, static_cast<double>(std::fabs(a[c] - x[r * C + c])));
    }
    const double bound = fmt == kernels::WeightFormat::kMXFP4 ? 1.0 : fmt == kernels::WeightFormat::kBF16 ? 0.02 : 0.13;
    EXPECT_LT(max_err, bound) << static_cast<int>(fmt);
    EXPECT_GT(kernels::weight_bytes(f), kernels::weight_bytes(q));
  }
}

TEST(Quantize, Mxfp4NibbleOrderAndMatmulIsExact) {
  // One row [1, 2] at scale 1: low nibble = column 0 (code 2 = 1.0), high nibble = column 1 (code 4 = 2.0).
  uint8_t packed[1] = {static_cast<uint8_t>(0x2 | (0x4 << 4))};
  uint8_t scale[1] = {127};
  kernels::WeightView w{kernels::WeightFormat::kMXFP4, packed, scale, 1, 2};
  float row[2];
  kernels::dequant_row(w, 0, row);
  EXPECT_EQ(row[0], 1.0f);
  EXPECT_EQ(row[1], 2.0f);
  // A quantised matmul gives exactly the float matmul over the dequantised weights.
  model::Weights owner;
  const int64_t N = 40, K = 70;
  std::vector<float> wf(static_cast<size_t>(N * K)), xs(static_cast<size_t>(3 * K));
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = std::cos(0.1f * static_cast<float>(i));
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.2f * static_cast<float>(i));
  auto be = kernels::make_cpu_backend(2);
  for (auto fmt : {kernels::WeightFormat::kFP8Block32, kernels::WeightFormat::kMXFP4, kernels::WeightFormat::kBF16}) {
    model::Mat q = model::quantize_matrix(model::Mat::f32(wf.data(), N, K), fmt, owner);
    model::Mat dq = model::quantize_matrix(q, kernels::WeightFormat::kF32, owner);
    std::vector<float> y1(static_cast<size_t>(3 * N)), y2(y1.size());
    be->matmul({.x = xs.data(), .w = q, .y = y1.data(), .m = 3, .n = N, .k = K});
    be->matmul({.x = xs.data(), .w = dq, .y = y2.data(), .m = 3, .n = N, .k = K});
    EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 4), 0);
  }
}

TEST(Quantize, ScaleOfTheWrongShapeOrMissingIsAClearError) {
  auto src = loader::SafetensorsFile(fixture("full-q") + "/model.safetensors");
  auto rewrite = [&](const std::string& dir, auto mutate) {
    fs::create_directories(dir);
    copy_aux(fixture("full-q"), dir);
    fs::copy_file(fixture("full-q") + "/config.json", dir + "/config.json", fs::copy_options::overwrite_existing);
    std::vector<loader::TensorToWrite> ts;
    for (const auto& [name, t] : src.tensors())
      ts.push_back({name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
    mutate(ts);
    loader::write_safetensors(dir + "/model.safetensors", ts);
  };
  auto error_of = [&](const std::string& dir) {
    try {
      auto ck = loader::Checkpoint::open(dir);
      model::load_weights(*ck);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string d1 = ::testing::TempDir() + "/q_bad_scale";
  rewrite(d1, [](std::vector<loader::TensorToWrite>& ts) {
    for (auto& t : ts)
      if (t.name == "layers.2.attn.wq_a.scale") {
        t.shape = {2, 1};
        t.bytes.resize(2);
      }
  });
  std::string e1 = error_of(d1);
  EXPECT_NE(e1.find("layers.2.attn.wq_a.scale"), std::string::npos) << e1;
  EXPECT_NE(e1.find("[2, 2]"), std::string::npos) << e1;
  const std::string d2 = ::testing::TempDir() + "/q_no_scale";
  rewrite(d2, [](std::vector<loader::TensorToWrite>& ts) {
    ts.erase(std::remove_if(ts.begin(), ts.end(), [](const auto& t) { return t.name == "layers.3.ffn.experts.1.w2.scale"; }),
             ts.end());
  });
  std::string e2 = error_of(d2);
  EXPECT_NE(e2.find("layers.3.ffn.experts.1.w2.scale"), std::string::npos) << e2;
  const std::string d3 = ::testing::TempDir() + "/q_bad_packed";
  rewrite(d3, [](std::vector<loader::TensorToWrite>& ts) {
    for (auto& t : ts)
      if (t.name == "layers.2.ffn.experts.0.w1.weight") {
        t.shape = {32, 64};  // unpacked width: wrong for MXFP4
        t.bytes.resize(32 * 64);
      }
  });
  std::string e3 = error_of(d3);
  EXPECT_NE(e3.find("MXFP4"), std::string::npos) << e3;
}

TEST(StateFormats, ReleasedBytesPerTokenAndMeasuredState) {
  // The released schedule: ~890 bytes of compressed state per token (FP4 compressed KV with
  // e4m3 scales per 16, FP4 indexer keys with ue8m0 per 32), FP8 windows.
  auto released = loader::parse_config("{}", "released");
  const model::StateBytes b = model::state_bytes(released);
  EXPECT_NEAR(b.per_token_quant, 890.0, 0.5);
  EXPECT_NEAR(b.per_token_stored, 890.0, 0.5);
  // The state a sequence actually holds matches the estimate the cache budgets with.
  auto lm_be = kernels::make_cpu_backend(2);
  auto lm = engine::load_model(fixture("ced"), *lm_be);
  auto st = lm.model->new_state();
  auto toks = core::read_npy_ints(fixture("ced") + "/golden/tokens.npy");
  std::vector<float> lg(toks.size() * 1024);
  runner::BatchRunner(*lm.model).forward(toks.data(), static_cast<int64_t>(toks.size()), st, lg.data());
  const model::StateBytes fb = model::state_bytes(lm.model->config());
  const double expect = fb.fixed_stored + fb.per_token_stored * static_cast<double>(toks.size());
  // Partial groups sit in float buffers: allow their few hundred bytes.
  EXPECT_NEAR(static_cast<double>(st.bytes()), expect, 1024.0) << st.bytes();
  EXPECT_LT(static_cast<double>(st.bytes()), fb.fixed_fp32 + fb.per_token_fp32 * static_cast<double>(toks.size()));
}

TEST(Quantize, RandomLoadHonoursQuantizationConfig) {
  std::ifstream in(fixture("full-q") + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  auto c = loader::parse_config(cfg.dump(), "full-q");
  ASSERT_TRUE(c.quantization.present);
  EXPECT_EQ(c.quantization.expert_dtype, "fp4");
  model::Weights w = model::random_weights(c, 3);
  EXPECT_EQ(w.layers[0].attn.wq_b.format, kernels::WeightFormat::kFP8Block32);
  EXPECT_EQ(w.layers[3].ffn.w2[1].format, kernels::WeightFormat::kMXFP4);
  EXPECT_EQ(w.layers[1].engram.table.format, kernels::WeightFormat::kFP8Row32);
  EXPECT_EQ(w.head.format, kernels::WeightFormat::kBF16);
  EXPECT_EQ(w.layers[0].hc_attn_fn.format, kernels::WeightFormat::kF32);
}

namespace {

// The stored rule written out from its definition (scale 2^ceil(log2(amax / max code)) by
// core::pow2_ceil, ue8m0 code by the exponent; values clamped, then rounded), for finite inputs.
std::pair<std::vector<uint8_t>, std::vector<uint8_t>> reference_quantize(const std::vector<float>& x, int64_t R, int64_t C,
                                                                        kernels::WeightFormat f) {
  const bool block32 = f == kernels::WeightFormat::kFP8Block32, fp4 = f == kernels::WeightFormat::kMXFP4;
  const int64_t sc_cols = (C + 31) / 32, packed = (C + 1) / 2, sr = block32 ? (R + 31) / 32 : R;
  const float max_code = fp4 ? 6.0f : 448.0f;
  std::vector<uint8_t> q(static_cast<size_t>(R * (fp4 ? packed : C)), 0), sc(static_cast<size_t>(sr * sc_cols));
  for (int64_t br = 0; br < sr; ++br)
    for (int64_t bc = 0; bc < sc_cols; ++bc) {
      const int64_t r0 = block32 ? br * 32 : br, r1 = block32 ? std::min(R, r0 + 32) : br + 1;
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = bc * 32; c < std::min(C, bc * 32 + 32); ++c) amax = std::max(amax, std::fabs(x[r * C + c]));
      const uint8_t code = amax > 0.0f ? static_cast<uint8_t>(std::ilogb(core::pow2_ceil(amax / max_code)) + 127) : 0;
      sc[br * sc_cols + bc] = code;
      const float s = std::ldexp(1.0f, code - 127);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = bc * 32; c < std::min(C, bc * 32 + 32); ++c) {
          const float v = std::clamp(x[r * C + c] / s, -max_code, max_code);
          if (!fp4) q[r * C + c] = core::f32_to_e4m3(v);
          else q[r * packed + c / 2] |= static_cast<uint8_t>(core::f32_to_e2m1(v) << (c % 2 ? 4 : 0));
        }
    }
  return {q, sc};
}

// Normal values scaled by a power of two per row (2^-140 .. 2^100), with zeros, signed zeros
// and exact ties (1.0625 and 0.25 at scale 1 next to 448 and 6).
std::vector<float> quantize_input(int64_t R, int64_t C, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> x(static_cast<size_t>(R * C));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) x[r * C + c] = std::ldexp(d(g), static_cast<int>((r * 37) % 241) - 140);
  for (int64_t c = 0; c < std::min<int64_t>(C, 32); ++c) x[c] = c == 0 ? 448.0f : c == 1 ? 6.0f : c % 3 == 0 ? 1.0625f : c % 3 == 1 ? 0.25f : -0.0f;
  if (R > 1)
    for (int64_t c = 0; c < std::min<int64_t>(C, 32); ++c) x[C + c] = 0.0f;
  return x;
}

}  // namespace

// The backends' quantize_weight (here the CPU's, over its threads, whole and in row chunks)
// gives quantize_matrix's bytes, and both the rule written out from its definition.
TEST(Quantize, WeightOpEqualsQuantizeMatrix) {
  auto be = kernels::make_cpu_backend(2);
  for (const auto f : {kernels::WeightFormat::kFP8Block32, kernels::WeightFormat::kFP8Row32, kernels::WeightFormat::kMXFP4})
    for (const auto& [R, C] : {std::pair<int64_t, int64_t>{70, 45}, {33, 64}, {1, 7}, {100, 77}, {64, 31}}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(f)) + " [" + std::to_string(R) + " x " + std::to_string(C) + "]");
      const std::vector<float> x = quantize_input(R, C, static_cast<uint32_t>(R * C));
      model::Weights owner;
      const model::Mat m = model::quantize_matrix(model::Mat::f32(x.data(), R, C), f, owner);
      const int64_t sc_bytes = kernels::weight_scale_bytes(m), code_bytes = kernels::weight_bytes(m) - sc_bytes;
      const std::vector<uint8_t> want_q(static_cast<const uint8_t*>(m.data), static_cast<const uint8_t*>(m.data) + code_bytes);
      const std::vector<uint8_t> want_s(m.scale, m.scale + sc_bytes);
      const auto [ref_q, ref_s] = reference_quantize(x, R, C, f);
      EXPECT_EQ(want_q, ref_q);
      EXPECT_EQ(want_s, ref_s);
      for (const int64_t step : {R, int64_t{32}, int64_t{64}}) {
        std::vector<uint8_t> q(static_cast<size_t>(code_bytes), 0xA5), s(static_cast<size_t>(sc_bytes), 0xA5);
        for (int64_t r0 = 0; r0 < R; r0 += step)
          be->quantize_weight({.x = x.data() + r0 * C, .rows = std::min(step, R - r0), .cols = C, .row0 = r0, .format = f,
                               .codes = q.data(), .scales = s.data()});
        EXPECT_EQ(q, want_q) << "chunks of " << step << " rows";
        EXPECT_EQ(s, want_s) << "chunks of " << step << " rows";
      }
    }
}

TEST(Quantize, WeightOpRefusesABlockChunkOffTheGrid) {
  auto be = kernels::make_cpu_backend(1);  // no worker threads (the death test forks)
  std::vector<float> x(64 * 32, 1.0f);
  std::vector<uint8_t> q(x.size()), s(2);
  EXPECT_DEATH(be->quantize_weight({.x = x.data(), .rows = 32, .cols = 32, .row0 = 16, .format = kernels::WeightFormat::kFP8Block32,
                                    .codes = q.data(), .scales = s.data()}),
               "starts at a multiple of 32 rows");
}

// random_weights_on (what a device backend runs: fill_random, then quantize_weight in row
// chunks into the final buffers) on the CPU backend gives the host path's bytes, tensor by
// tensor: release formats (chunks of one 32-row block, and of several), and bf16 without a
// quantization_config.
TEST(Quantize, RandomWeightsOnABackendEqualTheHostPath) {
  std::ifstream in(fixture("full-q") + "/config.json");
  const auto c = loader::parse_config(nlohmann::json::parse(in).dump(), "full-q");
  ASSERT_TRUE(c.quantization.present);
  auto plain = c;
  plain.quantization = {};
  auto be = kernels::make_cpu_backend(2);
  struct Run {
    const loader::ModelConfig* cfg;
    kernels::WeightFormat fmt;
    int64_t chunk;
  };
  for (const Run& run : {Run{&c, kernels::WeightFormat::kF32, 1}, Run{&c, kernels::WeightFormat::kF32, 4096},
                         Run{&plain, kernels::WeightFormat::kBF16, 1}, Run{&plain, kernels::WeightFormat::kF32, 1}}) {
    SCOPED_TRACE("quantization " + std::to_string(run.cfg->quantization.present) + ", chunk " + std::to_string(run.chunk));
    model::Weights host = model::random_weights(*run.cfg, 9, nullptr, run.fmt);
    model::Weights made = model::random_weights_on(*run.cfg, 9, *be, run.fmt, run.chunk);
    EXPECT_FALSE(made.on_backend);  // the CPU backend's memory is the host's
    const auto a = deepinfer::testing::tensor_bytes(*run.cfg, host, *be), b = deepinfer::testing::tensor_bytes(*run.cfg, made, *be);
    ASSERT_EQ(a.size(), b.size());
    int64_t quantised = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].name, b[i].name);
      EXPECT_EQ(a[i].format, b[i].format) << a[i].name;
      EXPECT_TRUE(a[i].bytes == b[i].bytes) << a[i].name << " differs";
      quantised += a[i].format >= static_cast<int>(kernels::WeightFormat::kFP8Block32);
    }
    if (run.cfg->quantization.present) EXPECT_GT(quantised, 100);
    else EXPECT_EQ(quantised, 0);
  }
}
