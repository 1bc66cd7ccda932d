// Golden tests: the reference's logits for every fixture, in three chunkings, and its
// greedy continuation reproduced by argmax decoding; on the CPU backend and, in a CUDA
// build, on the CUDA backend too (weights, activations and caches in device memory).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/npy.h"
#include "engine/load_model.h"
#include "kernels/backend.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v41.h"
#include "model/devices.h"
#include "runner/batch_runner.h"

using namespace deepinfer;

namespace {

struct Fixture {
  std::string dir;
  std::unique_ptr<kernels::Backend> be;
  engine::LoadedModel lm;
  model::DeepseekV41* m = nullptr;
  std::unique_ptr<runner::BatchRunner> run;
  Fixture(const std::string& name, const std::string& device) : dir(std::string(DEEPINFER_TEST_DATA) + "/v41/" + name) {
    be = kernels::make_backend(device, 2);
    lm = engine::load_model(dir, *be);
    m = lm.model.get();
    run = std::make_unique<runner::BatchRunner>(*m);
  }
  std::string golden(const std::string& f) const { return dir + "/golden/" + f; }
};

// Relative error max|ours - ref| / max|ref| of the logits when fed in the given chunks.
double run_chunks(Fixture& fx, const std::vector<int64_t>& chunks, int64_t* n_out = nullptr) {
  std::vector<int64_t> tokens = core::read_npy_ints(fx.golden("tokens.npy"));
  std::vector<int64_t> shape;
  std::vector<float> ref = core::read_npy_f32(fx.golden("logits_full.npy"), &shape);
  const int64_t n = static_cast<int64_t>(tokens.size()), V = fx.m->config().vocab_size;
  EXPECT_EQ(shape, (std::vector<int64_t>{n, V}));
  std::vector<float> ours(static_cast<size_t>(n * V));
  model::SequenceState st = fx.m->new_state();
  int64_t done = 0;
  size_t ci = 0;
  while (done < n) {
    int64_t c = std::min(chunks[std::min(ci, chunks.size() - 1)], n - done);
    fx.run->forward(tokens.data() + done, c, st, ours.data() + done * V);
    done += c;
    ++ci;
  }
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(ref[i])));
    double d = std::fabs(static_cast<double>(ours[i]) - ref[i]);
    if (!(d <= max_diff)) max_diff = std::isnan(d) ? INFINITY : d;
  }
  if (n_out) *n_out = n;
  return max_diff / max_ref;
}

using Param = std::tuple<std::string, std::string>;  // fixture, device
class Golden : public ::testing::TestWithParam<Param> {
 protected:
  std::string name() const { return std::get<0>(GetParam()) + "/" + std::get<1>(GetParam()); }
  Fixture make() const { return Fixture(std::get<0>(GetParam()), std::get<1>(GetParam())); }
};


TEST_P(Golden, LogitsOneCall) {
  Fixture fx = make();
  double err = run_chunks(fx, {1 << 30});
  RecordProperty("rel_err", std::to_string(err));
  std::printf("[%s] one call: rel err %.3g\n", name().c_str(), err);
  EXPECT_LE(err, 1e-4);
}

TEST_P(Golden, LogitsChunks13_9_1) {
  Fixture fx = make();
  double err = run_chunks(fx, {13, 9, 1});
  std::printf("[%s] chunks 13,9,1,1,...: rel err %.3g\n", name().c_str(), err);
  EXPECT_LE(err, 1e-4);
}

TEST_P(Golden, LogitsChunks7) {
  Fixture fx = make();
  double err = run_chunks(fx, {7});
  std::printf("[%s] chunks of 7: rel err %.3g\n", name().c_str(), err);
  EXPECT_LE(err, 1e-4);
}

TEST_P(Golden, GreedyTokens) {
  Fixture fx = make();
  std::vector<int64_t> prompt = core::read_npy_ints(fx.golden("greedy_prompt.npy"));
  std::vector<int64_t> expect = core::read_npy_ints(fx.golden("greedy_tokens.npy"));
  const int64_t V = fx.m->config().vocab_size;
  model::SequenceState st = fx.m->new_state();
  std::vector<float> logits(static_cast<size_t>(V));
  fx.run->forward(prompt.data(), static_cast<int64_t>(prompt.size()), st, logits.data(), /*last_only=*/true);
  std::vector<int64_t> got;
  for (size_t i = 0; i < expect.size(); ++i) {
    int64_t tok = std::max_element(logits.begin(), logits.end()) - logits.begin();
    got.push_back(tok);
    fx.run->forward(&tok, 1, st, logits.data());
  }
  EXPECT_EQ(got, expect);
}

INSTANTIATE_TEST_SUITE_P(V41, Golden,
                         ::testing::Combine(::testing::Values("swa", "ced-1src", "ced", "ced-reindex", "full", "full-q",
                                                              "full-q-seed25"),
                                            ::testing::ValuesIn(deepinfer::testing::devices())),
                         [](const ::testing::TestParamInfo<Param>& p) {
                           std::string s = std::get<0>(p.param) + "_" + std::get<1>(p.param);
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace

// The cross-check decorator (`--device cuda-check`) on the CPU backend itself: every discrete
// op is replayed and compared, and the logits are those of the plain backend.
TEST(CrossCheck, ReplaysEveryDiscreteOpAndCountsAgreement) {
  const std::string dir = std::string(DEEPINFER_TEST_DATA) + "/v41/full";
  auto plain = kernels::make_cpu_backend(2);
  auto checked = kernels::make_cross_check_backend(kernels::make_cpu_backend(2));
  EXPECT_EQ(kernels::cross_check_counts(*plain).checked, -1);
  std::vector<int64_t> tokens = core::read_npy_ints(dir + "/golden/tokens.npy");
  std::vector<std::vector<float>> out;
  for (kernels::Backend* be : {plain.get(), checked.get()}) {
    engine::LoadedModel lm = engine::load_model(dir, *be);
    const int64_t V = lm.model->config().vocab_size, n = static_cast<int64_t>(tokens.size());
    out.emplace_back(static_cast<size_t>(n * V));
    auto st = lm.model->new_state();
    runner::BatchRunner(*lm.model).forward(tokens.data(), n, st, out.back().data());
  }
  const kernels::CrossCheckCounts c = kernels::cross_check_counts(*checked);
  EXPECT_GT(c.checked, 20);
  EXPECT_EQ(c.disagreed, 0);
  EXPECT_EQ(out[0], out[1]);
}

// How near each fixture's quantiser inputs come to a rounding boundary on the CPU (the
// cross-check decorator's closest quant_margin). Two legitimate float32 orders differ there by
// up to about 1.3e-6 of a block's amax (docs/MODEL.md), so a fixture whose closest margin is
// above kOrderNoise rounds alike in any of them and its 1e-4 bar is a fair test of every
// backend; in the others a code may flip with the order (printed, not failed).
TEST(CrossCheck, QuantMarginsOfTheFixtures) {
  constexpr double kOrderNoise = 2e-6;
  const std::pair<const char*, bool> fixtures[] = {{"swa", true},   {"ced-1src", false}, {"ced", false},
                                                   {"ced-reindex", false}, {"full", false}, {"full-q", false},
                                                   {"full-q-seed25", true}};
  for (const auto& [name, order_free] : fixtures) {
    const std::string dir = std::string(DEEPINFER_TEST_DATA) + "/v41/" + name;
    auto checked = kernels::make_cross_check_backend(kernels::make_cpu_backend(2));
    std::vector<int64_t> tokens = core::read_npy_ints(dir + "/golden/tokens.npy");
    engine::LoadedModel lm = engine::load_model(dir, *checked);
    const int64_t V = lm.model->config().vocab_size, n = static_cast<int64_t>(tokens.size());
    std::vector<float> out(static_cast<size_t>(n * V));
    auto st = lm.model->new_state();
    runner::BatchRunner(*lm.model).forward(tokens.data(), n, st, out.data());
    const double m = kernels::cross_check_counts(*checked).closest_margin;
    std::printf("[%s] closest quantiser input to a rounding boundary: %.3g of its block's amax\n", name, m);
    if (order_free) {
      EXPECT_GE(m, kOrderNoise) << name;
    }
  }
}
