// DSpark draft stages (spec section 3.11): their tensors loaded in both name schemes and the
// release formats, made at random, and refused with the tensor named when one is missing or
// misshapen; the stages' rings, filled by prefill in any chunking, by decode and under bounded
// replay, against the NumPy transcription's (tools/v41_reference.py), on every backend.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/npy.h"
#include "engine/load_model.h"
#include "kernels/backend.h"
#include "loader/checkpoint.h"
#include "loader/safetensors.h"
#include "model/deepseek_v41.h"
#include "model/info.h"
#include "model/memory_plan.h"
#include "model/weights.h"
#include "runner/batch_runner.h"
#include "tokenizer/tokenizer.h"
#include "devices.h"

#include <nlohmann/json.hpp>
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

namespace {

// The fixture's model with DSpark on (or off), on `device`.
struct DsparkModel {
  std::string dir;
  std::unique_ptr<kernels::Backend> be;
  std::unique_ptr<loader::Checkpoint> ck;
  std::unique_ptr<model::DeepseekV41> m;
  std::unique_ptr<runner::BatchRunner> run;
  explicit DsparkModel(const std::string& device, bool dspark = true, const std::string& name = "dspark_model")
      : dir(dspark_checkpoint(name)) {
    be = kernels::make_backend(device, 2);
    ck = loader::Checkpoint::open(dir);
    auto tok = tokenizer::Tokenizer::load(dir);
    auto hasher = engine::make_engram_hasher(ck->config(), tok.get(), dir);
    m = std::make_unique<model::DeepseekV41>(ck->config(), model::load_weights(*ck), *be, hasher,
                                             model::ModelOptions{.dspark = dspark});
    run = std::make_unique<runner::BatchRunner>(*m);
  }
  const loader::ModelConfig& cfg() const { return m->config(); }
  // Feeds tokens [from, to) of `toks` in chunks of the given sizes (the last size repeats).
  void feed(const std::vector<int64_t>& toks, int64_t from, int64_t to, model::SequenceState& st,
            const std::vector<int64_t>& chunks) {
    size_t ci = 0;
    std::vector<float> lg(static_cast<size_t>(cfg().vocab_size));
    for (int64_t at = from; at < to; ++ci) {
      const int64_t n = std::min(chunks[std::min(ci, chunks.size() - 1)], to - at);
      run->forward(toks.data() + at, n, st, lg.data(), /*last_only=*/true);
      at += n;
    }
  }
};

std::vector<int64_t> golden_tokens() { return core::read_npy_ints(v41_fixture("full") + "/golden/tokens.npy"); }
std::string golden(const std::string& f) { return v41_fixture("dspark") + "/golden/" + f; }

// A ring's stored bytes (codes, then scales) and its values.
std::vector<uint8_t> ring_bytes(const model::WindowRing& r, kernels::Backend& be) {
  const int64_t n = r.kv.size(), cb = r.kv.code_bytes() * n, sb = r.kv.scale_bytes() * n;
  std::vector<uint8_t> out(static_cast<size_t>(cb + sb));
  if (n == 0) return out;
  be.download(out.data(), r.kv.codes_at(0), cb);
  be.download(out.data() + cb, r.kv.scales_at(0), sb);
  return out;
}
std::vector<float> ring_values(const model::WindowRing& r, kernels::Backend& be) {
  const int64_t n = r.kv.size(), dim = r.kv.dim();
  const std::vector<uint8_t> b = ring_bytes(r, be);
  std::vector<float> out(static_cast<size_t>(n * dim));
  kernels::dequant_fake_quant(r.kv.kind(), b.data(), b.data() + r.kv.code_bytes() * n, n, dim, r.kv.block(), out.data());
  return out;
}

// max|a - ref| / max|ref|.
double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  EXPECT_EQ(a.size(), ref.size());
  double m = 0, d = 0;
  for (size_t i = 0; i < std::min(a.size(), ref.size()); ++i) {
    m = std::max(m, static_cast<double>(std::fabs(ref[i])));
    const double e = std::fabs(static_cast<double>(a[i]) - ref[i]);
    d = std::isnan(e) ? INFINITY : std::max(d, e);
  }
  return d / m;
}

// Every stage's ring positions and values against a golden case.
void expect_rings(model::SequenceState& st, kernels::Backend& be, const std::string& name) {
  std::vector<int64_t> shape;
  const std::vector<float> kv = core::read_npy_f32(golden(name + "_ring_kv.npy"), &shape);
  const std::vector<int64_t> pos = core::read_npy_ints(golden(name + "_ring_pos.npy"));
  ASSERT_EQ(shape.size(), 3u);
  const size_t per = static_cast<size_t>(shape[1] * shape[2]);
  for (int64_t s = 0; s < shape[0]; ++s) {
    const model::WindowRing& r = st.draft_ring(s);
    EXPECT_EQ(r.pos, pos) << name << " stage " << s;
    const auto at = kv.begin() + static_cast<std::ptrdiff_t>(s * per);
    const std::vector<float> ref(at, at + static_cast<std::ptrdiff_t>(per));
    const double err = rel_err(ring_values(r, be), ref);
    EXPECT_LE(err, 1e-4) << name << " stage " << s;
  }
}

class DsparkRings : public ::testing::TestWithParam<std::string> {};

// A prompt's rings hold the last sliding_window positions' keys, whatever the chunking, and
// decode steps keep them so: the same bytes, and the transcription's values.
TEST_P(DsparkRings, PrefillInAnyChunkingAndDecodeFillTheRings) {
  DsparkModel fx(GetParam());
  const std::vector<int64_t> toks = golden_tokens();
  auto ref = fx.m->new_state();
  fx.feed(toks, 0, 29, ref, {29});
  expect_rings(ref, *fx.be, "long");
  for (const auto& chunks : {std::vector<int64_t>{13, 9, 1}, std::vector<int64_t>{7}}) {
    auto st = fx.m->new_state();
    fx.feed(toks, 0, 29, st, chunks);
    for (int64_t s = 0; s < 3; ++s) {
      EXPECT_EQ(st.draft_ring(s).pos, ref.draft_ring(s).pos);
      EXPECT_EQ(ring_bytes(st.draft_ring(s), *fx.be), ring_bytes(ref.draft_ring(s), *fx.be)) << "stage " << s;
    }
  }
  auto dec = fx.m->new_state();
  fx.feed(toks, 0, 3, dec, {3});
  expect_rings(dec, *fx.be, "tiny");
  fx.feed(toks, 3, 5, dec, {1});
  expect_rings(dec, *fx.be, "short");
  fx.feed(toks, 5, 29, dec, {1});
  for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(ring_bytes(dec.draft_ring(s), *fx.be), ring_bytes(ref.draft_ring(s), *fx.be));
}

// A rollback (speculative decoding) of the last forward's last rows leaves every stage's ring
// as if those rows never ran: the same positions and bytes as feeding only the kept rows.
TEST_P(DsparkRings, RollbackLeavesTheKeptRowsRings) {
  DsparkModel fx(GetParam());
  const std::vector<int64_t> toks = golden_tokens();
  for (int64_t rows : {int64_t{1}, int64_t{4}, int64_t{6}}) {
    SCOPED_TRACE("rollback of " + std::to_string(rows));
    auto rolled = fx.m->new_state(), kept = fx.m->new_state();
    rolled.set_rollback_rows(6);
    fx.feed(toks, 0, 20, rolled, {20});
    fx.feed(toks, 20, 26, rolled, {6});
    rolled.rollback(rows);
    fx.feed(toks, 0, 20, kept, {20});
    if (rows < 6) fx.feed(toks, 20, 26 - rows, kept, {6 - rows});
    for (int64_t s = 0; s < 3; ++s) {
      EXPECT_EQ(rolled.draft_ring(s).pos, kept.draft_ring(s).pos) << "stage " << s;
      EXPECT_EQ(ring_bytes(rolled.draft_ring(s), *fx.be), ring_bytes(kept.draft_ring(s), *fx.be)) << "stage " << s;
    }
  }
}

// Bounded replay runs the layers after the last KV source (two of the three taps) on the
// prompt's last sliding_window rows only: the rings hold exactly those rows' keys, computed from
// the tail (not the exact prefill's), in one chunk or several.
TEST_P(DsparkRings, BoundedReplayFillsTheRingsFromTheTail) {
  DsparkModel fx(GetParam());
  const std::vector<int64_t> toks = golden_tokens();
  const int64_t W = fx.cfg().sliding_window;
  ASSERT_LT(fx.m->late_layer_start(), fx.cfg().dspark_target_layer_ids.back());
  auto st = fx.m->new_state();
  runner::Chunk one{.tokens = toks.data(), .n = 29, .state = &st, .replay_from = 29 - W};
  fx.run->forward(std::span<runner::Chunk>(&one, 1));
  expect_rings(st, *fx.be, "replay");
  auto exact = fx.m->new_state();
  fx.feed(toks, 0, 29, exact, {29});
  EXPECT_NE(ring_bytes(st.draft_ring(0), *fx.be), ring_bytes(exact.draft_ring(0), *fx.be));
  // The prompt in two chunks, the first wholly before the tail.
  auto two = fx.m->new_state();
  runner::Chunk a{.tokens = toks.data(), .n = 15, .state = &two, .replay_from = 15};
  fx.run->forward(std::span<runner::Chunk>(&a, 1));
  EXPECT_TRUE(two.draft_ring(0).pos.empty());
  runner::Chunk b{.tokens = toks.data() + 15, .n = 14, .state = &two, .replay_from = 29 - W - 15};
  fx.run->forward(std::span<runner::Chunk>(&b, 1));
  for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(ring_bytes(two.draft_ring(s), *fx.be), ring_bytes(st.draft_ring(s), *fx.be));
}

// The taps leave the target's logits alone; without ModelOptions.dspark the rings stay empty.
TEST_P(DsparkRings, TheTargetsLogitsDoNotChange) {
  DsparkModel on(GetParam()), off(GetParam(), false, "dspark_model_off");
  const std::vector<int64_t> toks = golden_tokens();
  const int64_t V = on.cfg().vocab_size, n = static_cast<int64_t>(toks.size());
  std::vector<float> a(static_cast<size_t>(n * V)), b(a.size());
  auto sa = on.m->new_state(), sb = off.m->new_state();
  on.run->forward(toks.data(), n, sa, a.data());
  off.run->forward(toks.data(), n, sb, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  EXPECT_EQ(sa.draft_ring(0).pos.size(), static_cast<size_t>(on.cfg().sliding_window));
  EXPECT_TRUE(sb.draft_ring(0).pos.empty());
  EXPECT_EQ(sb.bytes() + 3 * static_cast<int64_t>(ring_bytes(sa.draft_ring(0), *on.be).size() + 8 * sa.draft_ring(0).pos.size()),
            sa.bytes());
  // What the state cache reserves for the rings (model::draft_ring_bytes), full and filling.
  EXPECT_EQ(sa.bytes() - sb.bytes(), model::draft_ring_bytes(on.cfg(), n));
  auto s3 = on.m->new_state(), s3off = off.m->new_state();
  on.run->forward(toks.data(), 3, s3, a.data());
  off.run->forward(toks.data(), 3, s3off, b.data());
  EXPECT_EQ(s3.bytes() - s3off.bytes(), model::draft_ring_bytes(on.cfg(), 3));
}

INSTANTIATE_TEST_SUITE_P(Dspark, DsparkRings, ::testing::ValuesIn(deepinfer::testing::devices()), deepinfer::testing::device_name);

// A golden case: its prompt, anchor and replay row (golden/cases.json).
struct Case {
  std::string name;
  int64_t prompt = 0, anchor = 0, replay_from = 0;
};
std::vector<Case> golden_cases() {
  std::ifstream in(golden("cases.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<Case> out;
  for (const auto& c : j["cases"])
    out.push_back({c["name"].get<std::string>(), c["prompt"].get<int64_t>(), c["anchor"].get<int64_t>(),
                   c["replay_from"].get<int64_t>()});
  return out;
}

// The state after the target processed a case's prompt (in one chunk, with its replay row).
model::SequenceState prefill(DsparkModel& fx, const Case& k) {
  const std::vector<int64_t> toks = golden_tokens();
  auto st = fx.m->new_state();
  runner::Chunk ch{.tokens = toks.data(), .n = k.prompt, .state = &st, .replay_from = k.replay_from};
  fx.run->forward(std::span<runner::Chunk>(&ch, 1));
  return st;
}

class DsparkDraft : public ::testing::TestWithParam<std::string> {};

// The draft of every golden case against the transcription's: the ids exactly, the biased
// logits and the confidence within 1e-4 of their largest; the state untouched.
TEST_P(DsparkDraft, MatchesTheTranscription) {
  DsparkModel fx(GetParam());
  const int64_t B = fx.cfg().dspark_block_size, V = fx.cfg().vocab_size;
  for (const Case& k : golden_cases()) {
    SCOPED_TRACE(k.name);
    auto st = prefill(fx, k);
    std::vector<std::vector<uint8_t>> rings;
    for (int64_t s = 0; s < 3; ++s) rings.push_back(ring_bytes(st.draft_ring(s), *fx.be));
    const model::Drafts d = fx.m->draft({{.state = &st, .anchor = k.anchor}});
    EXPECT_EQ(d.ids, core::read_npy_ints(golden(k.name + "_ids.npy")));
    const double lerr = rel_err(d.logits.download(), core::read_npy_f32(golden(k.name + "_logits.npy")));
    const double cerr = rel_err(d.confidence, core::read_npy_f32(golden(k.name + "_confidence.npy")));
    std::printf("[%s %s] draft logits rel err %.3g, confidence rel err %.3g\n", GetParam().c_str(), k.name.c_str(), lerr, cerr);
    EXPECT_LE(lerr, 1e-4);
    EXPECT_LE(cerr, 1e-4);
    EXPECT_EQ(d.logits.size(), B * V);
    EXPECT_EQ(st.length(), k.prompt);
    for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(ring_bytes(st.draft_ring(s), *fx.be), rings[static_cast<size_t>(s)]);
  }
}

// Several requests in one draft give each one's draft alone, bit for bit.
TEST_P(DsparkDraft, ABatchGivesEachRequestsDraft) {
  DsparkModel fx(GetParam());
  const int64_t B = fx.cfg().dspark_block_size, V = fx.cfg().vocab_size;
  const std::vector<Case> cases = golden_cases();
  std::vector<model::SequenceState> states;
  for (const Case& k : cases) states.push_back(prefill(fx, k));
  std::vector<model::DraftRequest> reqs;
  for (size_t i = 0; i < cases.size(); ++i) reqs.push_back({.state = &states[i], .anchor = cases[i].anchor});
  std::swap(reqs[0], reqs[2]);
  const model::Drafts all = fx.m->draft(reqs);
  const std::vector<float> all_logits = all.logits.download();
  for (size_t i = 0; i < reqs.size(); ++i) {
    const model::Drafts one = fx.m->draft({reqs[i]});
    const auto at = static_cast<std::ptrdiff_t>(i);
    EXPECT_EQ(std::vector<int64_t>(all.ids.begin() + at * (B + 1), all.ids.begin() + (at + 1) * (B + 1)), one.ids) << i;
    EXPECT_EQ(std::vector<float>(all.confidence.begin() + at * B, all.confidence.begin() + (at + 1) * B), one.confidence) << i;
    EXPECT_EQ(std::vector<float>(all_logits.begin() + at * B * V, all_logits.begin() + (at + 1) * B * V), one.logits.download()) << i;
  }
}

// Draws from the biased logits: temperature 0 is the greedy draft; a draw at temperature 1
// feeds the token it drew to the next position's Markov bias (the first position's logits,
// which only the anchor's bias enters, stay the same).
TEST_P(DsparkDraft, DrawParamsChooseTheTokens) {
  DsparkModel fx(GetParam());
  const int64_t B = fx.cfg().dspark_block_size, V = fx.cfg().vocab_size;
  const Case k = golden_cases()[2];
  auto st = prefill(fx, k);
  const model::Drafts greedy = fx.m->draft({{.state = &st, .anchor = k.anchor}});
  std::vector<kernels::DrawParams> zero(static_cast<size_t>(B));
  const model::Drafts zero_t = fx.m->draft({{.state = &st, .anchor = k.anchor, .draw = zero.data()}});
  EXPECT_EQ(zero_t.ids, greedy.ids);
  EXPECT_EQ(zero_t.logits.download(), greedy.logits.download());
  std::vector<kernels::DrawParams> hot(static_cast<size_t>(B), kernels::DrawParams{.temperature = 1.0f, .u = 0.0});
  const model::Drafts drawn = fx.m->draft({{.state = &st, .anchor = k.anchor, .draw = hot.data()}});
  const std::vector<float> g = greedy.logits.download(), h = drawn.logits.download();
  EXPECT_EQ(std::vector<float>(g.begin(), g.begin() + V), std::vector<float>(h.begin(), h.begin() + V));
  ASSERT_NE(drawn.ids[1], greedy.ids[1]);  // u = 0 draws the lowest id with mass, not the argmax
  EXPECT_NE(std::vector<float>(g.begin() + V, g.begin() + 2 * V), std::vector<float>(h.begin() + V, h.begin() + 2 * V));
}

INSTANTIATE_TEST_SUITE_P(Dspark, DsparkDraft, ::testing::ValuesIn(deepinfer::testing::devices()), deepinfer::testing::device_name);

TEST(DsparkDraftErrors, AnchorOutsideTheVocabulary) {
  DsparkModel fx("cpu");
  auto st = fx.m->new_state();
  try {
    fx.m->draft({{.state = &st, .anchor = 1024}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("draft: anchor token 1024 is outside the vocabulary [0, 1024)"));
  }
}

TEST(DsparkWeights, SpeculationNeedsTheStages) {
  auto be = kernels::make_cpu_backend(1);
  const std::string dir = dspark_checkpoint("dspark_nostages", /*mtp=*/false);
  auto ck = loader::Checkpoint::open(dir);
  auto tok = tokenizer::Tokenizer::load(dir);
  auto hasher = engine::make_engram_hasher(ck->config(), tok.get(), dir);
  try {
    model::DeepseekV41 m(ck->config(), model::load_weights(*ck), *be, hasher, model::ModelOptions{.dspark = true});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("DSpark speculative decoding needs the draft stages, but the checkpoint has no mtp.* tensors"));
  }
}

}  // namespace

// The memory plan of a model that runs its stages counts their rings in one sequence's state.
TEST(DsparkState, ThePlanCountsTheRings) {
  const loader::ModelConfig c = loader::load_config(v41_fixture("dspark") + "/config.json");
  model::PlanOptions o;
  o.state_tokens = 100;
  const model::MemoryPlan off = model::plan_memory(c, nullptr, o);
  o.dspark = true;
  const model::MemoryPlan on = model::plan_memory(c, nullptr, o);
  EXPECT_EQ(on.state_min - off.state_min, model::draft_ring_bytes(c, 100));
  EXPECT_EQ(model::draft_ring_bytes(c, 100), 3 * 8 * (32 + 1 + 8));  // 3 stages x window 8 x (FP8 + scale + position)
  EXPECT_EQ(model::sequence_state_bytes(c, 5, true) - model::sequence_state_bytes(c, 5), 3 * 5 * 41);
}
