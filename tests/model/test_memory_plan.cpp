// The memory plan (model/memory_plan.h) against what a load really allocates: weight bytes per
// format (summed over the loaded matrices, not through the plan's walk), host copies, the bytes
// a device upload allocates; and load_model's refusal of a model that does not fit, before it
// allocates anything.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "engine/load_model.h"
#include "kernels/backend.h"
#include "loader/checkpoint.h"
#include "loader/safetensors.h"
#include "model/info.h"
#include "model/memory_plan.h"
#include "model/weights.h"
#include "dspark_fixture.h"

using namespace deepinfer;
namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using kernels::WeightFormat;

namespace {

std::string fixture(const std::string& n) { return std::string(DEEPINFER_TEST_DATA) + "/v41/" + n; }

// Bytes per format of the matrices a Weights holds, from its members (Engram tables apart),
// plus the float arrays it holds for matrices the forward reads as floats (Engram q/k weights).
struct Actual {
  std::map<WeightFormat, int64_t> weights, tables;
  int64_t float_arrays = 0;
};
Actual actual_bytes(const loader::ModelConfig& c, const model::Weights& w) {
  Actual a;
  auto add = [&](const model::Mat& m) {
    if (m) a.weights[m.format] += kernels::weight_bytes(m);
  };
  add(w.embed);
  add(w.head);
  std::vector<const model::LayerWeights*> blocks;
  for (const auto& L : w.layers) blocks.push_back(&L);
  for (const auto& L : w.draft.stages) blocks.push_back(&L);
  for (const model::LayerWeights* L : blocks) {
    for (const model::Mat* m : {&L->hc_attn_fn, &L->hc_ffn_fn, &L->attn.wq_a, &L->attn.wq_b, &L->attn.wkv, &L->attn.wo_a,
                                &L->attn.wo_b, &L->attn.c_wkv, &L->attn.c_wgate, &L->attn.i_wq_b, &L->attn.i_weights_proj,
                                &L->attn.i_wk, &L->ffn.gate, &L->engram.wkv})
      add(*m);
    for (const auto* v : {&L->ffn.w1, &L->ffn.w2, &L->ffn.w3})
      for (const model::Mat& m : *v) add(m);
    if (L->has_engram) {
      a.tables[L->engram.table.format] += kernels::weight_bytes(L->engram.table);
      a.float_arrays += 2 * c.hc_mult * c.hidden_size * 4;  // q_weight, k_weight
    }
  }
  if (w.has_draft) {
    for (const model::Mat* m : {&w.draft.main_proj, &w.draft.markov_embed, &w.draft.markov_head}) add(*m);
    a.float_arrays += (c.hidden_size + c.dspark_markov_rank) * 4;  // the confidence head
  }
  return a;
}

// The plan's figures per format, F32 less the float arrays (counted as matrices by the plan).
std::map<WeightFormat, int64_t> planned(const model::FormatBytes& b, int64_t float_arrays = 0) {
  std::map<WeightFormat, int64_t> m;
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFP8Block32, WeightFormat::kFP8Row32,
                         WeightFormat::kMXFP4})
    if (b.of(f) > 0) m[f] = b.of(f) - (f == WeightFormat::kF32 ? float_arrays : 0);
  if (m.count(WeightFormat::kF32) && m[WeightFormat::kF32] == 0) m.erase(WeightFormat::kF32);
  return m;
}

int64_t device_bytes(const model::Weights& w) {
  int64_t b = 0;
  for (const auto& buf : w.device) b += buf.bytes();
  return b;
}

model::PlanOptions host_options() { return model::PlanOptions{}; }
model::PlanOptions device_options(kernels::Precision p = kernels::Precision::kFloat32) {
  model::PlanOptions o;
  o.host_backend = false;
  o.precision = p;
  o.device = "cuda:0";
  o.engram_tables_on_host = false;  // every tensor on the device (host tables: test_engram_staging.cpp)
  return o;
}

// Checks a plan's weight figures against loaded weights, then the bytes uploading them to `be`
// allocates (`be` must outlive `w`).
void expect_plan_matches(const loader::ModelConfig& c, const model::MemoryPlan& plan, model::Weights& w,
                         const model::MemoryPlan& device_plan, kernels::Backend& be) {
  const Actual a = actual_bytes(c, w);
  EXPECT_EQ(planned(plan.weights, a.float_arrays), a.weights);
  EXPECT_EQ(planned(plan.engram_tables), a.tables);
  EXPECT_EQ(plan.weights.total() + plan.engram_tables.total(), w.stored_bytes() + a.float_arrays);
  EXPECT_EQ(plan.host_copies, w.host_bytes());
  // The device plan counts every tensor upload_weights copies: matrices, scales, vectors.
  model::upload_weights(c, w, be);
  EXPECT_EQ(device_plan.weight_bytes(), device_bytes(w));
  EXPECT_EQ(device_plan.weights.total(), plan.weights.total());
  EXPECT_EQ(device_plan.vectors, plan.vectors);
}

class PlanFixture : public ::testing::TestWithParam<std::string> {};

// A checkpoint is planned from its header: stored formats, nothing copied (the fixtures'
// tensors are aligned and in loadable formats).
TEST_P(PlanFixture, CheckpointFiguresAreTheLoadedBytes) {
  auto ck = loader::Checkpoint::open(fixture(GetParam()));
  const model::MemoryPlan plan = model::plan_memory(ck->config(), ck.get(), host_options());
  const model::MemoryPlan dev = model::plan_memory(ck->config(), ck.get(), device_options());
  auto be = kernels::make_cpu_backend(1);
  model::Weights w = model::load_weights(*ck);
  EXPECT_GT(plan.mapped, 0);
  EXPECT_EQ(plan.mapped, plan.weight_bytes() - plan.host_copies);
  EXPECT_EQ(dev.host_needed(), plan.host_copies);
  expect_plan_matches(ck->config(), plan, w, dev, *be);
}

INSTANTIATE_TEST_SUITE_P(V41, PlanFixture, ::testing::Values("swa", "ced", "full", "full-q"));

// The draft stages' tensors are planned with the rest (tests/model/dspark_fixture.h).
TEST(MemoryPlan, DraftStagesArePlanned) {
  auto ck = loader::Checkpoint::open(deepinfer::testing::dspark_checkpoint("memplan_dspark"));
  const model::MemoryPlan plan = model::plan_memory(ck->config(), ck.get(), host_options());
  const model::MemoryPlan dev = model::plan_memory(ck->config(), ck.get(), device_options());
  auto be = kernels::make_cpu_backend(1);
  model::Weights w = model::load_weights(*ck);
  ASSERT_TRUE(w.has_draft);
  expect_plan_matches(ck->config(), plan, w, dev, *be);
  const loader::ModelConfig q = loader::parse_config(deepinfer::testing::dspark_release_config_json().dump(), "dspark-q");
  const model::MemoryPlan rplan = model::plan_memory(q, nullptr, host_options());
  model::Weights rw = model::random_weights(q, 7);
  ASSERT_TRUE(rw.has_draft);
  expect_plan_matches(q, rplan, rw, model::plan_memory(q, nullptr, device_options()), *be);
}

TEST(MemoryPlan, ReleaseCheckpointHasEveryFormat) {
  auto ck = loader::Checkpoint::open(fixture("full-q"));
  const model::MemoryPlan p = model::plan_memory(ck->config(), ck.get(), host_options());
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFP8Block32, WeightFormat::kMXFP4})
    EXPECT_GT(p.weights.of(f), 0) << static_cast<int>(f);
  EXPECT_GT(p.engram_tables.of(WeightFormat::kFP8Row32), 0);
  EXPECT_GT(p.weights.scales[static_cast<size_t>(WeightFormat::kMXFP4)], 0);
  EXPECT_THAT(p.weights.str(), AllOf(HasSubstr("FP8 "), HasSubstr("MXFP4 "), HasSubstr("BF16 "), HasSubstr("F32 ")));
}

// Random weights as load_model makes them on a host backend: float32, bf16 copies under bf16
// precision, release formats under a quantization_config.
TEST(MemoryPlan, RandomFiguresAreTheGeneratedBytes) {
  struct Case {
    std::string fixture;
    kernels::Precision precision;
  };
  for (const Case& k : {Case{"ced", kernels::Precision::kFloat32}, Case{"full", kernels::Precision::kBF16},
                        Case{"full-q", kernels::Precision::kFloat32}, Case{"full-q", kernels::Precision::kBF16}}) {
    SCOPED_TRACE(k.fixture + (k.precision == kernels::Precision::kBF16 ? " bf16" : " float32"));
    const loader::ModelConfig c = loader::load_config(fixture(k.fixture) + "/config.json");
    model::PlanOptions o = host_options();
    o.precision = k.precision;
    const model::MemoryPlan plan = model::plan_memory(c, nullptr, o);
    EXPECT_TRUE(plan.made_on_host);
    auto be = kernels::make_cpu_backend(1);
    model::Weights w = model::random_weights(c, 7, nullptr, model::random_matmul_format(k.precision));
    const model::MemoryPlan dev = model::plan_memory(c, nullptr, device_options(k.precision));
    expect_plan_matches(c, plan, w, dev, *be);
    EXPECT_GE(plan.host_copies, model::count_params(c).total() * 4);
    if (k.precision == kernels::Precision::kBF16 || c.quantization.present) {
      EXPECT_GT(plan.host_scratch, 0);
    }
  }
}

// On a device backend without a quantization_config the random weights are made in its memory in
// the backend's matmul format: the same formats as the host's conversion, and no host memory.
TEST(MemoryPlan, RandomWeightsMadeOnTheDeviceNeedNoHostMemory) {
  const loader::ModelConfig c = loader::load_config(fixture("full") + "/config.json");
  const model::MemoryPlan dev = model::plan_memory(c, nullptr, device_options(kernels::Precision::kBF16));
  EXPECT_FALSE(dev.made_on_host);
  EXPECT_EQ(dev.host_needed(), 0);
  model::Weights w = model::random_weights(c, 7, nullptr, WeightFormat::kBF16);
  const Actual a = actual_bytes(c, w);
  EXPECT_EQ(planned(dev.weights, a.float_arrays), a.weights);
  EXPECT_GT(dev.weights.of(WeightFormat::kBF16), 0);
  EXPECT_EQ(dev.device_needed(), dev.weight_bytes() + dev.state_min);
}

// A checkpoint whose tensors the loader must copy: an F16 matrix (widened), a BF16 mHC matrix
// (read as floats: widened), a BF16 vector, and float32 tensors misaligned behind a 6-byte one.
TEST(MemoryPlan, CheckpointCopiesAreCounted) {
  const std::string dir = ::testing::TempDir() + "/memplan_copies";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(fixture("ced") + "/config.json", dir + "/config.json");
  {
    auto ck = loader::Checkpoint::open(fixture("ced"));
    model::Weights src = model::load_weights(*ck);
    auto tensors = model::export_tensors(ck->config(), src);
    auto to_bf16 = [](loader::TensorToWrite& t) {
      std::vector<uint8_t> b(t.bytes.size() / 2);
      for (size_t i = 0; i < b.size() / 2; ++i) {
        float x;
        std::memcpy(&x, t.bytes.data() + 4 * i, 4);
        const uint16_t h = core::f32_to_bf16(x);
        std::memcpy(b.data() + 2 * i, &h, 2);
      }
      t.bytes = std::move(b);
      t.dtype = core::DType::BF16;
    };
    std::vector<loader::TensorToWrite> first, rest;
    for (auto& t : tensors) {
      if (t.name == "layers.0.hc_attn_scale") {  // 3 values: 6 bytes in bf16, first in the file
        to_bf16(t);
        first.push_back(std::move(t));
        continue;
      }
      if (t.name == "layers.1.hc_attn_fn" || t.name == "layers.1.attn_norm.weight") to_bf16(t);
      if (t.name == "layers.2.attn.wq_a.weight") {
        t.bytes.assign(t.bytes.size() / 2, 0);  // F16 zeros
        t.dtype = core::DType::F16;
      }
      rest.push_back(std::move(t));
    }
    for (auto& t : rest) first.push_back(std::move(t));
    loader::write_safetensors(dir + "/model.safetensors", first);
  }
  auto ck = loader::Checkpoint::open(dir);
  const model::MemoryPlan plan = model::plan_memory(ck->config(), ck.get(), host_options());
  const model::MemoryPlan dev = model::plan_memory(ck->config(), ck.get(), device_options());
  auto be = kernels::make_cpu_backend(1);
  model::Weights w = model::load_weights(*ck);
  // Beyond the three converted tensors, float32 tensors misaligned behind the 6-byte one are copied.
  const loader::ModelConfig& c = ck->config();
  const int64_t converted = (c.q_lora_rank * c.hidden_size + (2 + c.hc_mult) * c.hc_mult * c.hc_mult * c.hidden_size +
                             c.hidden_size) * 4;
  EXPECT_GT(w.host_bytes(), converted);
  expect_plan_matches(c, plan, w, dev, *be);
  EXPECT_EQ(plan.mapped + plan.host_copies, plan.weight_bytes());
  fs::remove_all(dir);
}

TEST(MemoryPlan, StateIsOneSequenceAtTheContextOrTheBudget) {
  const loader::ModelConfig c = loader::load_config(fixture("ced") + "/config.json");
  model::PlanOptions o = host_options();
  const model::MemoryPlan full = model::plan_memory(c, nullptr, o);
  EXPECT_EQ(full.state_tokens, c.max_position_embeddings);
  o.state_tokens = 100;
  const model::MemoryPlan p = model::plan_memory(c, nullptr, o);
  EXPECT_EQ(p.state_tokens, 100);
  // The window rings fill up to sliding_window - 1 tokens; every token adds the per-token bytes.
  const double window = p.state_fixed * static_cast<double>(std::min<int64_t>(100, c.sliding_window - 1)) /
                        static_cast<double>(c.sliding_window - 1);
  EXPECT_NEAR(static_cast<double>(p.state_min), window + 100 * p.state_per_token, 1.0);
  EXPECT_LT(p.state_min, full.state_min);
  EXPECT_EQ(p.state_needed(), p.state_min);
  EXPECT_EQ(p.host_needed(), p.host_copies + p.host_scratch + p.state_min);
  o.state_budget_bytes = p.state_min * 10;
  EXPECT_EQ(model::plan_memory(c, nullptr, o).state_needed(), p.state_min * 10);
}

// The device's message: what it needs, per format, the state, and what is free.
TEST(MemoryPlan, DeviceThatIsTooSmallIsNamedWithBothFigures) {
  auto ck = loader::Checkpoint::open(fixture("full-q"));
  model::PlanOptions o = device_options();
  o.state_tokens = 512;
  const model::MemoryPlan p = model::plan_memory(ck->config(), ck.get(), o);
  EXPECT_NO_THROW(model::check_memory_plan(p, {p.device_needed(), p.host_needed()}, "DIR"));
  try {
    model::check_memory_plan(p, {p.device_needed() - 1, -1}, "DIR");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("DIR: the model does not fit on cuda:0: it needs " +
                                          model::human_bytes(static_cast<double>(p.device_needed()))),
                                HasSubstr("weights: " + p.weights.str()), HasSubstr("Engram tables FP8 "),
                                HasSubstr("state for one sequence of 512 tokens " +
                                          model::human_bytes(static_cast<double>(p.state_min))),
                                HasSubstr(" (" + std::to_string(p.device_needed()) + " bytes) (weights"),
                                HasSubstr("but " + model::human_bytes(static_cast<double>(p.device_needed() - 1)) +
                                          " (" + std::to_string(p.device_needed() - 1) + " bytes) is free")));
  }
  // A state budget the device cannot hold is refused too.
  o.state_budget_bytes = int64_t{1} << 40;
  const model::MemoryPlan b = model::plan_memory(ck->config(), ck.get(), o);
  try {
    model::check_memory_plan(b, {int64_t{1} << 39, -1}, "DIR");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("the state budget " + model::human_bytes(static_cast<double>(int64_t{1} << 40))));
  }
}

// Random release-format weights: a device backend makes and quantises them in its own memory
// (no host copies); the CPU makes them on the host, and that memory is checked.
TEST(MemoryPlan, HostMemoryForWeightsMadeOnTheHostIsChecked) {
  const loader::ModelConfig c = loader::load_config(fixture("full-q") + "/config.json");
  const model::MemoryPlan dev = model::plan_memory(c, nullptr, device_options());
  EXPECT_FALSE(dev.made_on_host);
  EXPECT_EQ(dev.host_needed(), 0);
  EXPECT_GT(dev.weights.of(WeightFormat::kMXFP4), 0);
  const model::MemoryPlan p = model::plan_memory(c, nullptr, host_options());
  ASSERT_TRUE(p.made_on_host);
  EXPECT_NO_THROW(model::check_memory_plan(p, {-1, p.host_needed()}, "CFG"));
  try {
    model::check_memory_plan(p, {-1, 1000}, "CFG");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("CFG: the model does not fit in memory: it needs " +
                                          model::human_bytes(static_cast<double>(p.host_needed()))),
                                HasSubstr("random weights made on the host"), HasSubstr("but 1 KB is available")));
  }
}

// load_model refuses before loading, with the figures it was given (the checkpoint and the
// random weights of full-q, on the CPU: host memory).
TEST(MemoryPlan, LoadModelRefusesWhatDoesNotFit) {
  auto be = kernels::make_cpu_backend(1);
  engine::MemoryOptions m;
  m.available.host = 1000;
  m.state_tokens = 64;
  for (auto fmt : {engine::LoadFormat::kAuto, engine::LoadFormat::kRandom}) {
    try {
      engine::load_model(fixture("full-q"), *be, fmt, 0, m);
      FAIL() << "no error";
    } catch (const Error& e) {
      const std::string source = fmt == engine::LoadFormat::kAuto ? fixture("full-q") : fixture("full-q") + "/config.json";
      EXPECT_THAT(e.what(), AllOf(HasSubstr(source + ": the model does not fit in memory: it needs "),
                                  HasSubstr("state for one sequence of 64 tokens"), HasSubstr("but 1 KB is available")));
    }
  }
  m.available.host = -1;  // measured: the fixture fits, and the plan is kept
  engine::LoadedModel lm = engine::load_model(fixture("full-q"), *be, engine::LoadFormat::kAuto, 0, m);
  EXPECT_EQ(lm.memory.state_tokens, 64);
  EXPECT_GT(lm.available.host, 0);
  EXPECT_EQ(lm.memory.weights.total(), model::plan_memory(lm.model->config(), lm.checkpoint.get(), host_options()).weights.total());
}

// Nothing is allocated for a model that does not fit: a config whose random weights take 1 GB,
// refused against an injected 1 MB, leaves the process's peak memory where it was.
TEST(MemoryPlan, NothingIsAllocatedForAModelThatDoesNotFit) {
  const std::string dir = ::testing::TempDir() + "/memplan_big";
  fs::create_directories(dir);
  auto j = nlohmann::json::parse(std::ifstream(fixture("ced") + "/config.json"));
  j["vocab_size"] = 2000000;  // embed + head: 2 x 2M x hidden floats
  std::ofstream(dir + "/config.json") << j.dump();
  const loader::ModelConfig c = loader::load_config(dir + "/config.json");
  const model::MemoryPlan p = model::plan_memory(c, nullptr, host_options());
  ASSERT_GT(p.host_needed(), int64_t{500} << 20);
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  auto be = kernels::make_cpu_backend(1);
  engine::MemoryOptions m;
  m.available.host = 1 << 20;
  EXPECT_THROW(engine::load_model(dir, *be, engine::LoadFormat::kRandom, 0, m), Error);
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT((after.ru_maxrss - before.ru_maxrss) * 1024, int64_t{100} << 20);  // ru_maxrss is in KB
  fs::remove_all(dir);
}

}  // namespace
