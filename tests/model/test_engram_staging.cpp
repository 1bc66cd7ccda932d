// Engram tables in host memory (model/engram_rows.h): the staged-rows path, forced on the CPU
// backend, gives the logits of the in-place tables bitwise on every Engram fixture, in one chunk
// and in several, with graphs emulated too (the Engram stage captured, its block sent ahead)
// and under bounded replay with an Engram layer among the late layers; a step's block gives
// every layer the table's rows for its hash ids (padding rows: row 0); staged blocks dequantise
// to the table's rows; random tables made on the host are the bytes of those made in the
// backend's memory; the memory plan counts host tables as host; a token's active weight bytes
// count the table rows it reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/npy.h"
#include "engine/load_model.h"
#include "kernels/backend.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v41.h"
#include "model/devices.h"
#include "model/engram_rows.h"
#include "model/memory_plan.h"
#include "model/weights.h"
#include "runner/batch_runner.h"
#include "tokenizer/tokenizer.h"

using namespace deepinfer;

namespace {

std::string fixture(const std::string& n) { return std::string(DEEPINFER_TEST_DATA) + "/v41/" + n; }

// All logits of the fixture's golden tokens fed in `chunk`-token chunks.
std::vector<float> logits(const std::string& name, bool staged, int64_t chunk, const std::string& device = "cpu") {
  auto be = kernels::make_backend(device, 2);
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

// cpu-graphs: chunks of 7 run in the 8-row bucket (a padding row), captured on the second
// chunk and replayed after; its logits are the plain CPU's.
TEST_P(EngramStaging, StagedRowsGiveTheInPlaceLogitsBitwise) {
  for (int64_t chunk : {int64_t{1} << 30, int64_t{7}}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const std::vector<float> direct = logits(GetParam(), false, chunk);
    for (const char* device : {"cpu", "cpu-graphs"}) {
      SCOPED_TRACE(device);
      const std::vector<float> in_place = logits(GetParam(), false, chunk, device), staged = logits(GetParam(), true, chunk, device);
      ASSERT_EQ(direct.size(), staged.size());
      ASSERT_EQ(direct.size(), in_place.size());
      EXPECT_EQ(std::memcmp(direct.data(), staged.data(), direct.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(direct.data(), in_place.data(), direct.size() * sizeof(float)), 0);
    }
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

// A step's block: for n rows padded to n_pad, layer j's gather (ids(j), table(j)) reads the
// table's rows for its hash ids, and row 0 for the padding rows; in place the ids are the hash
// ids themselves, staged they name the block's rows in order. A hash id past a table aborts.
TEST(EngramStaging, StepBlockGivesEveryLayerItsRows) {
  auto be = kernels::make_cpu_backend(1);
  for (const char* name : {"full", "full-q"}) {
    SCOPED_TRACE(name);
    auto ck = loader::Checkpoint::open(fixture(name));
    const loader::ModelConfig& c = ck->config();
    const model::Weights w = model::load_weights(*ck);
    std::vector<kernels::WeightView> tables;
    for (int64_t l : c.engram_layer_ids) tables.push_back(w.layers[static_cast<size_t>(l)].engram.table);
    const int64_t L = static_cast<int64_t>(tables.size()), cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
    const int64_t n = 5, n_pad = 8, hd = c.engram_head_dim;
    ASSERT_GE(L, 2);
    std::vector<int64_t> hash(static_cast<size_t>(n * L * cols));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < L; ++j)
        for (int64_t k = 0; k < cols; ++k) {
          const int64_t rows = tables[static_cast<size_t>(j)].rows;
          hash[static_cast<size_t>((i * L + j) * cols + k)] = i == 0 && k == 0 ? rows - 1 : (i * 131 + j * 17 + k * 7 + 1) % rows;
        }
    for (bool staged : {false, true}) {
      SCOPED_TRACE(staged ? "staged" : "in place");
      const model::EngramStep step(tables, staged, cols, n_pad);
      std::vector<uint8_t> block(static_cast<size_t>(step.bytes()));
      step.pack(hash.data(), n, block.data());
      for (int64_t j = 0; j < L; ++j) {
        const kernels::WeightView t = tables[static_cast<size_t>(j)];
        std::vector<int64_t> want_ids(static_cast<size_t>(n_pad * cols), 0);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t k = 0; k < cols; ++k)
            want_ids[static_cast<size_t>(i * cols + k)] = hash[static_cast<size_t>((i * L + j) * cols + k)];
        std::vector<float> want(static_cast<size_t>(n_pad * cols * hd)), got(want.size(), -1.0f);
        be->gather_weight_rows({.w = t, .ids = want_ids.data(), .out = want.data(), .rows = n_pad * cols});
        const kernels::WeightView v = step.table(static_cast<size_t>(j), block.data());
        const int64_t* ids = step.ids(static_cast<size_t>(j), block.data());
        EXPECT_EQ(v.format, t.format);
        if (staged) {
          EXPECT_EQ(v.rows, n_pad * cols);
          for (int64_t r = 0; r < n_pad * cols; ++r) ASSERT_EQ(ids[r], r);
        } else {
          EXPECT_EQ(v.data, t.data);
          EXPECT_EQ(std::vector<int64_t>(ids, ids + n_pad * cols), want_ids);
        }
        be->gather_weight_rows({.w = v, .ids = ids, .out = got.data(), .rows = n_pad * cols});
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << "layer " << j;
      }
      std::vector<int64_t> bad = hash;
      bad[static_cast<size_t>(((n - 1) * L + 1) * cols)] = tables[1].rows;
      EXPECT_DEATH(step.pack(bad.data(), n, block.data()), "engram hash id out of the table");
    }
  }
}

// Bounded replay with an Engram layer among the late layers (full-q's, moved to layer 6): the
// tails' rows are staged again after the compaction. One replayed call gives the bits of a split
// whose first chunk ends before the tail (no compaction), staged or not, with graphs emulated.
// On each device (CUDA too): an Engram layer among the late layers, its tail's rows restaged
// after the compaction; one replayed call, the tail split off, staged or in place: the same bits
// (the plain CPU's on the CPU devices).
class EngramReplay : public ::testing::TestWithParam<std::string> {};
TEST_P(EngramReplay, ReplayRestagesTheTailsRows) {
  auto tok = tokenizer::Tokenizer::load(fixture("full-q"));
  loader::ModelConfig c = loader::load_config(fixture("full-q") + "/config.json");
  c.engram_layer_ids.back() = c.num_hidden_layers - 2;
  auto hasher = engine::make_engram_hasher(c, tok.get(), fixture("full-q"));
  const std::vector<int64_t> toks = core::read_npy_ints(fixture("full-q") + "/golden/tokens.npy");
  const int64_t n = static_cast<int64_t>(toks.size()), V = c.vocab_size, tail = n - c.sliding_window;
  auto last = [&](const std::string& device, bool staged, const std::vector<int64_t>& split) {
    auto be = kernels::make_backend(device, 2);
    model::DeepseekV41 m(c, model::random_weights(c, 4), *be, hasher, model::ModelOptions{.stage_engram_rows = staged});
    EXPECT_LT(m.late_layer_start(), c.num_hidden_layers);
    EXPECT_GE(c.engram_layer_ids.back(), m.late_layer_start());
    runner::BatchRunner r(m);
    auto st = m.new_state();
    std::vector<float> out(static_cast<size_t>(2 * V));
    int64_t done = 0;
    for (int64_t k : split) {
      runner::Chunk ch{.tokens = toks.data() + done, .n = k, .state = &st,
                       .replay_from = std::clamp<int64_t>(tail - done, 0, k), .logits = out.data()};
      r.forward(std::span<runner::Chunk>(&ch, 1));
      done += k;
    }
    r.forward(&toks[0], 1, st, out.data() + V);  // a decode step after
    return out;
  };
  ASSERT_GT(tail, 0);
  const std::string device = GetParam();
  const std::vector<float> want = last(device == "cpu-graphs" ? "cpu" : device, false, {n});
  for (int64_t v : {int64_t{0}, V}) ASSERT_TRUE(std::isfinite(want[static_cast<size_t>(v)]));
  for (bool staged : {false, true})
    for (const std::vector<int64_t>& split : {std::vector<int64_t>{n}, std::vector<int64_t>{tail, n - tail}}) {
      SCOPED_TRACE(device + (staged ? " staged" : " in place") + " split " + std::to_string(split[0]));
      const std::vector<float> got = last(device, staged, split);
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
    }
}
INSTANTIATE_TEST_SUITE_P(V41, EngramReplay, ::testing::ValuesIn(deepinfer::testing::devices()),
                         deepinfer::testing::device_name);

// A decode token reads (N-1) x heads rows of each Engram table, not the table: the weight bytes
// a token reads do not depend on the tables' sizes (full-q's, and tables of exactly that many
// rows, which a token reads whole).
TEST(EngramStaging, ActiveBytesCountTheRowsATokenReads) {
  const loader::ModelConfig c = loader::load_config(fixture("full-q") + "/config.json");
  loader::ModelConfig small = c;
  const int64_t cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
  for (int64_t& rows : small.engram_num_embeddings) rows = cols;
  const model::Weights w = model::random_weights(c, 1), ws = model::random_weights(small, 1);
  int64_t tables = 0, tables_small = 0;
  for (int64_t l : c.engram_layer_ids) {
    tables += kernels::weight_bytes(w.layers[static_cast<size_t>(l)].engram.table);
    tables_small += kernels::weight_bytes(ws.layers[static_cast<size_t>(l)].engram.table);
  }
  ASSERT_GT(tables, tables_small);
  EXPECT_EQ(model::active_weight_bytes(c, w), model::active_weight_bytes(small, ws));
  EXPECT_EQ(w.stored_bytes() - ws.stored_bytes(), tables - tables_small);
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
