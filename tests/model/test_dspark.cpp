// DSpark draft stages (spec section 3.11): their tensors loaded in both name schemes and the
// release formats, made at random, and refused with the tensor named when one is missing or
// misshapen.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/backend.h"
#include "loader/checkpoint.h"
#include "loader/safetensors.h"
#include "model/info.h"
#include "model/weights.h"
#include "dspark_fixture.h"
#include "tensor_bytes.h"

using namespace deepinfer;
using deepinfer::testing::dspark_checkpoint;
using deepinfer::testing::v41_fixture;
using ::testing::HasSubstr;
using kernels::WeightFormat;

namespace {

// The fixture's mtp tensors, each passed through `edit` (which may rename, reshape or drop it:
// an empty name drops it), written as the mtp.safetensors of checkpoint `name`.
std::string edited_checkpoint(const std::string& name, const std::function<void(loader::TensorToWrite&)>& edit) {
  const std::string dir = dspark_checkpoint(name, /*mtp=*/false);
  loader::SafetensorsFile f(v41_fixture("dspark") + "/mtp.safetensors");
  std::vector<loader::TensorToWrite> out;
  for (const auto& [n, t] : f.tensors()) {
    loader::TensorToWrite w{n, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
    edit(w);
    if (!w.name.empty()) out.push_back(std::move(w));
  }
  loader::write_safetensors(dir + "/mtp.safetensors", out);
  return dir;
}

std::string load_error(const std::string& dir) {
  try {
    auto ck = loader::Checkpoint::open(dir);
    model::load_weights(*ck);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "loaded " << dir;
  return "";
}

// The draft tensors of `w`, as bytes, in the loader's order.
std::vector<deepinfer::testing::TensorBytes> draft_bytes(const loader::ModelConfig& c, model::Weights& w, kernels::Backend& be) {
  std::vector<deepinfer::testing::TensorBytes> all = deepinfer::testing::tensor_bytes(c, w, be), out;
  for (auto& t : all)
    if (t.name.rfind("mtp.", 0) == 0) out.push_back(std::move(t));
  return out;
}

bool same(const std::vector<deepinfer::testing::TensorBytes>& a, const std::vector<deepinfer::testing::TensorBytes>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].format != b[i].format || a[i].bytes != b[i].bytes) return false;
  return true;
}

}  // namespace

TEST(DsparkWeights, TheFixtureLoadsEveryStage) {
  auto ck = loader::Checkpoint::open(dspark_checkpoint());
  const loader::ModelConfig& c = ck->config();
  ASSERT_TRUE(model::checkpoint_has_draft(*ck));
  model::Weights w = model::load_weights(*ck);
  ASSERT_TRUE(w.has_draft);
  ASSERT_EQ(w.draft.stages.size(), 3u);
  const model::LayerWeights& s1 = w.draft.stages[1];
  EXPECT_EQ(s1.ffn.w1.size(), 9u);  // 8 experts of its own and the shared one
  EXPECT_EQ(s1.ffn.gate.rows, 8);
  EXPECT_FALSE(s1.has_engram);
  EXPECT_FALSE(s1.attn.c_wkv);
  EXPECT_EQ(w.draft.main_proj.rows, c.hidden_size);
  EXPECT_EQ(w.draft.main_proj.cols, 3 * c.hidden_size);
  EXPECT_EQ(w.draft.markov_embed.rows, c.vocab_size);
  EXPECT_EQ(w.draft.markov_head.cols, 16);
  // Read in place from the file.
  EXPECT_EQ(w.draft.confidence, reinterpret_cast<const float*>(ck->find("mtp.2.confidence_head.proj.weight")->data));
  EXPECT_EQ(s1.attn.wkv.data, ck->find("mtp.1.attn.wkv.weight")->data);
  // The backbone is full's, tensor for tensor.
  auto full = loader::Checkpoint::open(v41_fixture("full"));
  model::Weights fw = model::load_weights(*full);
  EXPECT_FALSE(fw.has_draft);
  auto be = kernels::make_cpu_backend(1);
  const auto a = deepinfer::testing::tensor_bytes(full->config(), fw, *be);
  auto b = deepinfer::testing::tensor_bytes(c, w, *be);
  b.resize(a.size());
  EXPECT_TRUE(same(a, b));
  const model::ParamCounts p = model::count_params(c);
  EXPECT_EQ(p.total(), model::count_params(full->config()).total());
  EXPECT_GT(p.draft, 0);
  EXPECT_THAT(model::describe(c), HasSubstr("DSpark draft stages: 3 (8 experts, top 3; block 5, Markov rank 16)"));
}

// Transformers' `model.` prefix and the Markov head's names in other ports load the same tensors.
TEST(DsparkWeights, NameSchemesLoadTheSameTensors) {
  const std::string dir = edited_checkpoint("dspark_names", [](loader::TensorToWrite& t) {
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"markov_head.embed.", "markov_head.markov_w1."},
                                   {"markov_head.head.", "markov_head.markov_w2."}})
      if (const size_t at = t.name.find(from); at != std::string::npos) t.name.replace(at, from.size(), to);
    t.name = "model." + t.name;
  });
  auto be = kernels::make_cpu_backend(1);
  auto ref_ck = loader::Checkpoint::open(dspark_checkpoint());
  auto ck = loader::Checkpoint::open(dir);
  EXPECT_EQ(ck->find("mtp.2.markov_head.embed.weight")->name, "model.mtp.2.markov_head.markov_w1.weight");
  model::Weights ref = model::load_weights(*ref_ck), w = model::load_weights(*ck);
  EXPECT_TRUE(same(draft_bytes(ref_ck->config(), ref, *be), draft_bytes(ck->config(), w, *be)));
}

TEST(DsparkWeights, AMissingOrMisshapenTensorIsNamed) {
  const std::string missing = load_error(edited_checkpoint("dspark_missing", [](loader::TensorToWrite& t) {
    if (t.name == "mtp.1.ffn.experts.7.w2.weight") t.name.clear();
  }));
  EXPECT_THAT(missing, HasSubstr("missing tensor 'mtp.1.ffn.experts.7.w2.weight' (expected shape [64, 32])"));
  const std::string shape = load_error(edited_checkpoint("dspark_shape", [](loader::TensorToWrite& t) {
    if (t.name != "mtp.0.main_proj.weight") return;
    t.shape = {64, 128};
    t.bytes.resize(64 * 128 * 4);
  }));
  EXPECT_THAT(shape, HasSubstr("'mtp.0.main_proj.weight' has shape [64, 128], expected [64, 192]"));
  const std::string conf = load_error(edited_checkpoint("dspark_conf", [](loader::TensorToWrite& t) {
    if (t.name == "mtp.2.confidence_head.proj.weight") t.shape = {80, 1};
  }));
  EXPECT_THAT(conf, HasSubstr("'mtp.2.confidence_head.proj.weight' has shape [80, 1], expected [1, 80]"));
}

// Without any mtp tensor the model has no draft stages (and loads); a config without stages
// does not read the tensors a checkpoint has.
TEST(DsparkWeights, StagesNeedTheTensorsAndTheConfig) {
  auto bare = loader::Checkpoint::open(dspark_checkpoint("dspark_bare", /*mtp=*/false));
  EXPECT_EQ(bare->config().num_nextn_predict_layers, 3);
  EXPECT_FALSE(model::checkpoint_has_draft(*bare));
  EXPECT_FALSE(model::load_weights(*bare).has_draft);
  const std::string dir = edited_checkpoint("dspark_noconfig", [](loader::TensorToWrite&) {});
  std::filesystem::copy_file(v41_fixture("full") + "/config.json", dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  auto ck = loader::Checkpoint::open(dir);
  EXPECT_FALSE(model::checkpoint_has_draft(*ck));
  EXPECT_FALSE(model::load_weights(*ck).has_draft);
}

// Random draft stages (`--load-format random`) in the release formats: MXFP4 experts, FP8
// projections, bf16 Markov matrices, a float confidence head; made through a backend's ops they
// are the host's bytes, and a checkpoint written from them loads them back.
TEST(DsparkWeights, RandomStagesInTheReleaseFormats) {
  const loader::ModelConfig c = loader::parse_config(deepinfer::testing::dspark_release_config_json().dump(), "dspark-q");
  model::Weights w = model::random_weights(c, 5);
  ASSERT_TRUE(w.has_draft);
  const model::LayerWeights& s0 = w.draft.stages[0];
  EXPECT_EQ(s0.ffn.w1[0].format, WeightFormat::kMXFP4);
  EXPECT_EQ(s0.ffn.w2[8].format, WeightFormat::kFP8Block32);  // the shared expert
  EXPECT_EQ(s0.attn.wq_b.format, WeightFormat::kFP8Block32);
  EXPECT_EQ(s0.ffn.gate.format, WeightFormat::kF32);
  EXPECT_EQ(w.draft.main_proj.format, WeightFormat::kFP8Block32);
  EXPECT_EQ(w.draft.markov_embed.format, WeightFormat::kBF16);
  EXPECT_EQ(w.draft.markov_head.format, WeightFormat::kBF16);
  ASSERT_NE(w.draft.confidence, nullptr);
  // The backbone's values do not depend on the draft stages being made.
  loader::ModelConfig plain = c;
  plain.num_nextn_predict_layers = 0;
  model::Weights pw = model::random_weights(plain, 5);
  auto be = kernels::make_cpu_backend(2);
  auto all = deepinfer::testing::tensor_bytes(c, w, *be);
  const auto backbone = deepinfer::testing::tensor_bytes(plain, pw, *be);
  ASSERT_GT(all.size(), backbone.size());
  all.resize(backbone.size());
  EXPECT_TRUE(same(all, backbone));

  model::Weights made = model::random_weights_on(c, 5, *be);
  EXPECT_TRUE(same(draft_bytes(c, w, *be), draft_bytes(c, made, *be)));

  const std::string dir = dspark_checkpoint("dspark_random_q", /*mtp=*/false);
  std::filesystem::remove(dir + "/model.safetensors");
  loader::write_safetensors(dir + "/model.safetensors", model::export_tensors(c, w));
  std::ofstream(dir + "/config.json") << deepinfer::testing::dspark_release_config_json().dump(2);
  auto ck = loader::Checkpoint::open(dir);
  model::Weights back = model::load_weights(*ck);
  EXPECT_TRUE(same(draft_bytes(c, w, *be), draft_bytes(ck->config(), back, *be)));
}
