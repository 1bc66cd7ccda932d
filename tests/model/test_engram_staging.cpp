// Engram tables in host memory (model/engram_rows.h): the staged-rows path, forced on the CPU
// backend, gives the logits of the in-place tables bitwise on every Engram fixture, in one chunk
// and in several; staged blocks dequantise to the table's rows; random tables made on the host
// are the bytes of those made in the backend's memory; the memory plan counts host tables as host.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/npy.h"
#include "engine/load_model.h"
#include "kernels/backend.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v41.h"
#include "model/engram_rows.h"
#include "model/memory_plan.h"
#include "model/weights.h"
#include "runner/batch_runner.h"
#include "tokenizer/tokenizer.h"

using namespace deepinfer;

namespace {

std::string fixture(const std::string& n) { return std::string(DEEPINFER_TEST_DATA) + "/v41/" + n; }

// All logits of the fixture's golden tokens fed in `chunk`-token chunks.
std::vector<float> logits(const std::string& name, bool staged, int64_t chunk) {
  auto be = kernels::make_cpu_backend(2);
  auto ck = loader::Checkpoint::open(fixture(name));
  auto tok = tokenizer::Tokenizer::load(fixture(name));
  auto hasher = engine::make_engram_hasher(ck->config(), tok.get(), fixture(name));
  model::DeepseekV41 m(ck->config(), model::load_weights(*ck), *be, hasher, model::ModelOptions{.stage_engram_rows = staged});
  const std::vector<int64_t> toks = core::read_npy_ints(fixture(name) + "/golden/tokens.npy");
  const int64_t n = static_cast<int64_t>(toks.size()), V = ck->config().vocab_size;
  std::vector<float> out(static_cast<size_t>(n * V));
  auto st = m.new_state();
  runner::BatchRunner run(m);
  for (int64_t done = 0; done < n; done += chunk) {
    const int64_t c = std::min(chunk, n - done);
    run.forward(toks.data() + done, c, st, out.data() + done * V);
  }
  return out;
}

class EngramStaging : public ::testing::TestWithParam<std::string> {};

TEST_P(EngramStaging, StagedRowsGiveTheInPlaceLogitsBitwise) {
  for (int64_t chunk : {int64_t{1} << 30, int64_t{7}}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const std::vector<float> direct = logits(GetParam(), false, chunk), staged = logits(GetParam(), true, chunk);
    ASSERT_EQ(direct.size(), staged.size());
    EXPECT_EQ(std::memcmp(direct.data(), staged.data(), direct.size() * sizeof(float)), 0);
  }
}

// The fixtures with Engram layers (non-empty engram_layer_ids; full-q: FP8-row tables).
INSTANTIATE_TEST_SUITE_P(V41, EngramStaging, ::testing::Values("full", "full-q"));

// A staged block read in order is the table's rows in the ids' order (repeats and the last row
// included), for every table format of the fixtures.
TEST(EngramStaging, StagedBlockIsTheGatheredRows) {
  auto be = kernels::make_cpu_backend(1);
  for (const char* name : {"full", "full-q"}) {
    SCOPED_TRACE(name);
    auto ck = loader::Checkpoint::open(fixture(name));
    const model::Weights w = model::load_weights(*ck);
    const model::Mat& t = w.layers[static_cast<size_t>(ck->config().engram_layer_ids.at(0))].engram.table;
    const std::vector<int64_t> ids = {t.rows - 1, 0, 5, 5, t.rows / 2, 1};
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<uint8_t> block;
    const kernels::WeightView v = model::stage_table_rows(t, ids.data(), n, block);
    EXPECT_EQ(v.format, t.format);
    EXPECT_EQ(v.rows, n);
    EXPECT_GE(static_cast<int64_t>(block.size()), n * model::table_row_bytes(t));
    std::vector<int64_t> order(ids.size());
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    std::vector<float> want(static_cast<size_t>(n * t.cols)), got(want.size(), -1.0f);
    be->gather_weight_rows({.w = t, .ids = ids.data(), .out = want.data(), .rows = n});
    be->gather_weight_rows({.w = v, .ids = order.data(), .out = got.data(), .rows = n});
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
  }
}

// random_weights_on's host-memory tables, made in chunks of 32 rows, hold the bytes of the
// tables it makes in the backend's memory (FP8 rows under a quantization_config; float32 and
// bf16 without).
TEST(EngramStaging, RandomHostTablesAreTheBackendTablesBytes) {
  auto be = kernels::make_cpu_backend(1);
  struct Case {
    const char* fixture;
    kernels::WeightFormat format;
  };
  for (const Case& k : {Case{"full-q", kernels::WeightFormat::kF32}, Case{"full", kernels::WeightFormat::kF32},
                        Case{"full", kernels::WeightFormat::kBF16}}) {
    SCOPED_TRACE(k.fixture);
    const loader::ModelConfig c = loader::load_config(fixture(k.fixture) + "/config.json");
    const int64_t chunk = 32 * c.engram_head_dim;
    const model::Weights on = model::random_weights_on(c, 5, *be, k.format, chunk, false);
    const model::Weights host = model::random_weights_on(c, 5, *be, k.format, chunk, true);
    for (int64_t l : c.engram_layer_ids) {
      const model::Mat &a = on.layers[static_cast<size_t>(l)].engram.table, &b = host.layers[static_cast<size_t>(l)].engram.table;
      ASSERT_EQ(a.format, b.format);
      ASSERT_GT(a.rows, 32);  // more than one chunk
      const int64_t sb = kernels::weight_scale_bytes(a), vb = kernels::weight_bytes(a) - sb;
      EXPECT_EQ(std::memcmp(a.data, b.data, static_cast<size_t>(vb)), 0);
      if (sb > 0) {
        EXPECT_EQ(std::memcmp(a.scale, b.scale, static_cast<size_t>(sb)), 0);
      }
    }
    EXPECT_GT(host.host_bytes(), on.host_bytes());
  }
}

// On a device backend host tables leave the device figure and, for random weights, join the
// host allocations; mapped checkpoint tables are read in place (no host copy).
TEST(EngramStaging, MemoryPlanCountsHostTablesAsHost) {
  model::PlanOptions o;
  o.host_backend = false;
  o.device = "cuda:0";
  model::PlanOptions dev = o;
  dev.engram_tables_on_host = false;
  const loader::ModelConfig c = loader::load_config(fixture("full-q") + "/config.json");
  const model::MemoryPlan rh = model::plan_memory(c, nullptr, o), rd = model::plan_memory(c, nullptr, dev);
  const int64_t tables = rh.engram_tables.total();
  ASSERT_GT(tables, 0);
  EXPECT_TRUE(rh.engram_tables_host);
  EXPECT_FALSE(rd.engram_tables_host);
  EXPECT_EQ(rd.device_needed() - rh.device_needed(), tables);
  EXPECT_EQ(rh.host_needed() - rd.host_needed(), tables);
  auto ck = loader::Checkpoint::open(fixture("full-q"));
  const model::MemoryPlan ch = model::plan_memory(c, ck.get(), o), cd = model::plan_memory(c, ck.get(), dev);
  EXPECT_EQ(cd.device_needed() - ch.device_needed(), ch.engram_tables.total());
  EXPECT_EQ(ch.host_needed(), cd.host_needed());
  // A host backend counts everything as host memory either way.
  model::PlanOptions host;
  EXPECT_FALSE(model::plan_memory(c, nullptr, host).engram_tables_host);
}

}  // namespace
