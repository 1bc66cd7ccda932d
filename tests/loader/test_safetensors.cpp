// Tests of the safetensors reader, the checkpoint directory and weight loading
// (src/loader/safetensors.h, src/loader/checkpoint.h, src/model/weights.h).
// Files are hand-built under a per-test temporary directory: a valid file with every
// dtype, corrupt and truncated files (each must give an Error naming the file / tensor and
// never read out of bounds; these tests also run under ASan/UBSan), a fixture checkpoint
// re-sharded or renamed to release names, and fixture copies with a tensor removed or
// replaced, which load_weights must reject with a message naming the tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "loader/checkpoint.h"
#include "loader/safetensors.h"
#include "engine/load_model.h"
#include "kernels/backend.h"
#include "model/weights.h"

namespace {

namespace fs = std::filesystem;
using deepinfer::Error;
using deepinfer::core::DType;
using deepinfer::loader::canonical_tensor_name;
using deepinfer::loader::Checkpoint;
using deepinfer::loader::SafetensorsFile;
using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;
using V = std::vector<int64_t>;
using Bytes = std::vector<uint8_t>;

const std::string kCed = std::string(DEEPINFER_TEST_DATA) + "/v41/ced";

struct Tensor {
  std::string name, dtype;
  V shape;
  Bytes bytes;
};

void write_file(const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary);
  f.write(content.data(), static_cast<std::streamsize>(content.size()));
  ASSERT_TRUE(f.good()) << path;
}

// 8-byte little-endian header length + header + data.
std::string raw_file(uint64_t header_len, const std::string& header, const Bytes& data) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((header_len >> (8 * i)) & 0xFF);
  return s + header + std::string(data.begin(), data.end());
}

std::string st_file(const std::vector<Tensor>& ts) {
  json h = json::object();
  h["__metadata__"] = {{"format", "pt"}};
  Bytes data;
  for (const Tensor& t : ts) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  }
  const std::string header = h.dump();
  return raw_file(header.size(), header, data);
}

Bytes iota_bytes(size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 7 + 1);
  return b;
}

Bytes f32_bytes(const std::vector<float>& v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The fixture's tensors, with stored names, in name order.
std::vector<Tensor> fixture_tensors() {
  SafetensorsFile f(kCed + "/model.safetensors");
  std::vector<Tensor> out;
  for (const auto& [name, ti] : f.tensors())
    out.push_back({name, std::string(deepinfer::core::dtype_name(ti.dtype)), ti.shape, Bytes(ti.data, ti.data + ti.nbytes)});
  return out;
}

std::string error_of(const std::string& path) {
  try {
    SafetensorsFile f(path);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "SafetensorsFile accepted " << path;
  return "";
}

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("deepinfer_st_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& f) const { return (dir_ / f).string(); }
  // A checkpoint dir holding the fixture config and `ts` in one model.safetensors.
  std::string checkpoint(const std::vector<Tensor>& ts) {
    fs::copy_file(kCed + "/config.json", dir_ / "config.json", fs::copy_options::overwrite_existing);
    write_file(path("model.safetensors"), st_file(ts));
    return dir_.string();
  }
  std::string load_weights_error(const std::vector<Tensor>& ts) {
    auto ck = Checkpoint::open(checkpoint(ts));
    try {
      deepinfer::model::load_weights(*ck);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "load_weights accepted the checkpoint";
    return "";
  }
  fs::path dir_;
};

// ---------------------------------------------------------------------------------------
// Valid files

using Safetensors = TempDirTest;

TEST_F(Safetensors, ValidFileWithEveryDtype) {
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f};
  const std::vector<Tensor> ts = {
      {"f32", "F32", {2, 3}, f32_bytes(f32)},       {"bf16", "BF16", {4}, iota_bytes(8)},
      {"f16", "F16", {2, 2}, iota_bytes(8)},        {"e4m3", "F8_E4M3", {5}, iota_bytes(5)},
      {"e8m0", "F8_E8M0", {1, 3}, iota_bytes(3)},   {"i8", "I8", {2}, iota_bytes(2)},
      {"u8", "U8", {7, 1}, iota_bytes(7)},          {"empty", "F32", {3, 0}, {}},
      {"scalar", "F32", {}, f32_bytes({42.0f})},
  };
  const std::string p = path("valid.safetensors");
  write_file(p, st_file(ts));
  SafetensorsFile f(p);
  EXPECT_EQ(f.path(), p);
  ASSERT_EQ(f.tensors().size(), ts.size());  // __metadata__ is not a tensor
  for (const Tensor& t : ts) {
    SCOPED_TRACE(t.name);
    auto it = f.tensors().find(t.name);
    ASSERT_NE(it, f.tensors().end());
    const auto& ti = it->second;
    EXPECT_EQ(ti.name, t.name);
    EXPECT_EQ(ti.file, p);
    EXPECT_EQ(std::string(deepinfer::core::dtype_name(ti.dtype)), t.dtype);
    EXPECT_EQ(ti.shape, t.shape);
    EXPECT_EQ(ti.nbytes, t.bytes.size());
    EXPECT_EQ(static_cast<size_t>(ti.numel() * deepinfer::core::dtype_size(ti.dtype)), t.bytes.size());
    if (ti.nbytes > 0) {
      EXPECT_EQ(Bytes(ti.data, ti.data + ti.nbytes), t.bytes);
    }
  }
  const auto& a = f.tensors().at("f32");
  EXPECT_EQ(a.dtype, DType::F32);
  EXPECT_EQ(a.shape_str(), "[2, 3]");
  float v = 0;
  std::memcpy(&v, a.data + 2 * 4, 4);
  EXPECT_EQ(v, 3.25f);
  EXPECT_EQ(f.tensors().at("empty").numel(), 0);
  EXPECT_EQ(f.tensors().at("empty").shape_str(), "[3, 0]");
  EXPECT_EQ(f.tensors().at("e8m0").dtype, DType::F8_E8M0);
  EXPECT_EQ(f.tensors().at("scalar").numel(), 1);
}

// ---------------------------------------------------------------------------------------
// Truncated and corrupt files

TEST_F(Safetensors, TruncatedInDataSection) {
  const std::string p = path("cut.safetensors");
  const std::string full = st_file({{"a", "F32", {4}, iota_bytes(16)}, {"b", "F32", {4}, iota_bytes(16)}});
  write_file(p, full.substr(0, full.size() - 1));
  const std::string m = error_of(p);
  EXPECT_THAT(m, HasSubstr(p));
  EXPECT_THAT(m, HasSubstr("tensor 'b'"));
  EXPECT_THAT(m, HasSubstr("truncated"));
}

TEST_F(Safetensors, TruncatedInHeaderOrLength) {
  const std::string p = path("cut.safetensors");
  write_file(p, st_file({{"a", "F32", {4}, iota_bytes(16)}}).substr(0, 20));
  EXPECT_THAT(error_of(p), AllOf(HasSubstr(p), HasSubstr("exceeds file size 20")));
  for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{7}}) {  // not even the 8-byte length
    write_file(p, std::string(n, '\x01'));
    EXPECT_THAT(error_of(p),
                AllOf(HasSubstr(p), HasSubstr("truncated safetensors file (" + std::to_string(n) + " bytes")));
  }
}

TEST_F(Safetensors, HeaderLengthLargerThanFile) {
  const std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  for (uint64_t len : {uint64_t{header.size() + 2}, uint64_t{1} << 40, ~uint64_t{0}}) {
    const std::string p = path("long.safetensors");
    write_file(p, raw_file(len, header, {9}));
    EXPECT_THAT(error_of(p), AllOf(HasSubstr(p), HasSubstr("header length " + std::to_string(len))));
  }
}

TEST_F(Safetensors, InvalidJsonHeader) {
  const std::string p = path("json.safetensors");
  const std::string header = R"({"a": {"dtype": "F32", "shape": [1],)";
  write_file(p, raw_file(header.size(), header, iota_bytes(4)));
  EXPECT_THAT(error_of(p), AllOf(HasSubstr(p), HasSubstr("invalid JSON")));
  // Zero-length header, and a header that is JSON but not an object.
  write_file(p, raw_file(0, "", {}));
  EXPECT_THAT(error_of(p), HasSubstr("invalid JSON"));
  write_file(p, raw_file(2, "[]", {}));
  EXPECT_THAT(error_of(p), HasSubstr("not a JSON object"));
}

TEST_F(Safetensors, DataOffsetsBeyondEnd) {
  const std::string p = path("off.safetensors");
  const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  write_file(p, raw_file(header.size(), header, iota_bytes(16)));
  EXPECT_THAT(error_of(p),
              AllOf(HasSubstr(p), HasSubstr("tensor 'w' data_offsets [8, 24] exceed the data section (16 bytes)")));
}

TEST_F(Safetensors, ByteCountNotMatchingShape) {
  const std::string p = path("count.safetensors");
  write_file(p, st_file({{"w", "BF16", {3, 2}, iota_bytes(10)}}));
  const std::string m = error_of(p);
  EXPECT_THAT(m, HasSubstr(p));
  EXPECT_THAT(m, HasSubstr("tensor 'w'"));
  EXPECT_THAT(m, HasSubstr("10 bytes stored but shape [3, 2] of BF16 needs 12"));
}

TEST_F(Safetensors, UnknownDtype) {
  const std::string p = path("dtype.safetensors");
  write_file(p, st_file({{"q", "Q4_K", {4}, iota_bytes(4)}}));
  EXPECT_THAT(error_of(p), AllOf(HasSubstr(p), HasSubstr("tensor 'q': unsupported dtype \"Q4_K\"")));
}

TEST_F(Safetensors, MalformedEntriesAreErrorsNotCrashes) {
  const std::vector<std::string> headers = {
      R"({"t":{"shape":[1],"data_offsets":[0,4]}})",                               // no dtype
      R"({"t":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})",                     // dtype not a string
      R"({"t":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})",                   // shape not a list
      R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",                // negative dim
      R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",               // fractional dim
      R"({"t":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})",
      R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,4]}})",
      R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",                   // one offset
      R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})",                 // begin > end
      R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
      R"({"t":{"dtype":"F32","shape":[1],"data_offsets":"0-4"}})",
      R"({"t":[1,2,3]})",
  };
  for (const std::string& h : headers) {
    SCOPED_TRACE(h);
    const std::string p = path("bad.safetensors");
    write_file(p, raw_file(h.size(), h, iota_bytes(4)));
    EXPECT_THAT(error_of(p), AllOf(HasSubstr(p), HasSubstr("tensor 't'")));
  }
}

TEST_F(Safetensors, MissingFileOrDirectory) {
  EXPECT_THAT(error_of(path("absent.safetensors")), HasSubstr("absent.safetensors: cannot open"));
  EXPECT_THROW(SafetensorsFile f(dir_.string()), Error);
}

// ---------------------------------------------------------------------------------------
// Checkpoint directories: shards and tensor names

TEST(CheckpointNames, CanonicalTensorName) {
  EXPECT_EQ(canonical_tensor_name("model.layers.3.attn.wq_a.weight"), "layers.3.attn.wq_a.weight");
  EXPECT_EQ(canonical_tensor_name("layers.3.attn.wq_a.weight"), "layers.3.attn.wq_a.weight");
  EXPECT_EQ(canonical_tensor_name("lm_head.weight"), "head.weight");
  EXPECT_EQ(canonical_tensor_name("head.weight"), "head.weight");
  EXPECT_EQ(canonical_tensor_name("model.embed.weight"), "embed.weight");
  EXPECT_EQ(canonical_tensor_name("mtp.0.norm.weight"), "mtp.0.norm.weight");
  EXPECT_EQ(canonical_tensor_name("model.mtp.0.norm.weight"), "mtp.0.norm.weight");
  EXPECT_EQ(canonical_tensor_name("mtp.2.markov_head.markov_w1.weight"), "mtp.2.markov_head.embed.weight");
  EXPECT_EQ(canonical_tensor_name("model.mtp.2.markov_head.markov_w2.weight"), "mtp.2.markov_head.head.weight");
  EXPECT_EQ(canonical_tensor_name("mtp.2.markov_head.head.weight"), "mtp.2.markov_head.head.weight");
  EXPECT_EQ(canonical_tensor_name("vision.patch.weight"), "");
}

using CheckpointDir = TempDirTest;

TEST_F(CheckpointDir, ShardedCheckpointFindsEveryTensor) {
  const auto ref = Checkpoint::open(kCed);
  const std::vector<Tensor> all = fixture_tensors();
  std::vector<Tensor> shard[2];
  json weight_map = json::object();
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string file = "model-0000" + std::to_string(i % 2 + 1) + "-of-00002.safetensors";
    shard[i % 2].push_back(all[i]);
    weight_map[all[i].name] = file;
  }
  fs::copy_file(kCed + "/config.json", dir_ / "config.json");
  write_file(path("model-00001-of-00002.safetensors"), st_file(shard[0]));
  write_file(path("model-00002-of-00002.safetensors"), st_file(shard[1]));
  write_file(path("model.safetensors.index.json"), json{{"metadata", json::object()}, {"weight_map", weight_map}}.dump());
  // A stray file the index does not list is not read.
  write_file(path("stray.safetensors"), "garbage");

  const auto ck = Checkpoint::open(dir_.string());
  EXPECT_EQ(ck->config().kv_source_layer_ids, ref->config().kv_source_layer_ids);
  ASSERT_EQ(ck->tensors().size(), ref->tensors().size());
  for (const auto& [name, ti] : ref->tensors()) {
    const auto* got = ck->find(name);
    ASSERT_NE(got, nullptr) << name;
    EXPECT_EQ(got->shape, ti->shape) << name;
    EXPECT_EQ(got->nbytes, ti->nbytes) << name;
    EXPECT_EQ(std::memcmp(got->data, ti->data, ti->nbytes), 0) << name;
  }
  EXPECT_NE(ck->find("head.weight"), nullptr);
  EXPECT_NE(ck->find("layers.5.attn.indexer.wk.weight"), nullptr);
  EXPECT_EQ(ck->find("lm_head.weight"), nullptr);
  EXPECT_NO_THROW(deepinfer::model::load_weights(*ck));
}

TEST_F(CheckpointDir, ReleaseNamesMapToTheSameCanonicalNames) {
  const auto ref = Checkpoint::open(kCed);
  std::vector<Tensor> ts = fixture_tensors();
  for (Tensor& t : ts) {
    if (t.name == "lm_head.weight") t.name = "head.weight";
    else if (t.name.rfind("model.", 0) == 0) t.name = t.name.substr(6);
  }
  // Draft-stage tensors keep their names; a config without draft stages does not read them.
  ts.push_back({"mtp.0.attn.wq_a.weight", "F32", {2, 2}, iota_bytes(16)});
  ts.push_back({"mtp.1.norm.weight", "I32", {2}, iota_bytes(8)});
  const auto ck = Checkpoint::open(checkpoint(ts));
  ASSERT_EQ(ck->config().num_nextn_predict_layers, 0);
  EXPECT_NE(ck->find("mtp.0.attn.wq_a.weight"), nullptr);
  ASSERT_EQ(ck->tensors().size(), ref->tensors().size() + 2);
  for (const auto& [name, ti] : ref->tensors()) {
    const auto* got = ck->find(name);
    ASSERT_NE(got, nullptr) << name;
    EXPECT_EQ(std::memcmp(got->data, ti->data, ti->nbytes), 0) << name;
  }
  EXPECT_EQ(ck->find("head.weight")->name, "head.weight");
  EXPECT_NO_THROW(deepinfer::model::load_weights(*ck));
}

TEST_F(CheckpointDir, DuplicateAndBadIndexEntriesAreErrors) {
  std::vector<Tensor> ts = fixture_tensors();
  ts.push_back({"norm.weight", "F32", {64}, iota_bytes(256)});  // also stored as model.norm.weight
  try {
    Checkpoint::open(checkpoint(ts));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("duplicates"));
    EXPECT_THAT(e.what(), HasSubstr("norm.weight"));
  }
  write_file(path("model.safetensors.index.json"), R"({"weight_map": {"a": "../elsewhere.safetensors"}})");
  EXPECT_THROW(Checkpoint::open(dir_.string()), Error);
  write_file(path("model.safetensors.index.json"), R"({"weight_map": {"a": "missing.safetensors"}})");
  EXPECT_THROW(Checkpoint::open(dir_.string()), Error);
  write_file(path("model.safetensors.index.json"), "{not json");
  EXPECT_THROW(Checkpoint::open(dir_.string()), Error);
  EXPECT_THROW(Checkpoint::open(path("no-such-dir")), Error);
}

// ---------------------------------------------------------------------------------------
// load_weights: presence, shape and dtype of every tensor

using LoadWeights = TempDirTest;

TEST_F(LoadWeights, MissingTensorIsNamed) {
  std::vector<Tensor> ts = fixture_tensors();
  std::erase_if(ts, [](const Tensor& t) { return t.name == "model.layers.3.attn.wq_a.weight"; });
  const std::string m = load_weights_error(ts);
  EXPECT_THAT(m, HasSubstr("missing tensor 'layers.3.attn.wq_a.weight'"));
  EXPECT_THAT(m, HasSubstr("[48, 64]"));
}

TEST_F(LoadWeights, WrongShapeNamesTensorExpectedAndFound) {
  std::vector<Tensor> ts = fixture_tensors();
  for (Tensor& t : ts)
    if (t.name == "model.layers.5.attn.indexer.wk.weight") {
      t.shape = {t.shape[0], t.shape[1] * 2};
      t.bytes.resize(t.bytes.size() * 2);
    }
  const std::string m = load_weights_error(ts);
  EXPECT_THAT(m, HasSubstr("tensor 'model.layers.5.attn.indexer.wk.weight'"));
  EXPECT_THAT(m, HasSubstr("has shape [32, 64], expected [32, 32]"));
  EXPECT_THAT(m, HasSubstr("the shape config.json's sizes give; check both files"));  // may be the config's mistake
}

TEST_F(LoadWeights, IntegerDtypeIsNamed) {
  std::vector<Tensor> ts = fixture_tensors();
  for (Tensor& t : ts)
    if (t.name == "model.norm.weight") t.dtype = "I32";
  const std::string m = load_weights_error(ts);
  EXPECT_THAT(m, HasSubstr("tensor 'model.norm.weight'"));
  EXPECT_THAT(m, HasSubstr("dtype I32"));
}

TEST_F(LoadWeights, HalfPrecisionIsWidened) {
  std::vector<Tensor> ts = fixture_tensors();
  std::vector<float> ref;
  for (Tensor& t : ts) {
    if (t.name != "model.norm.weight") continue;
    ref.resize(t.bytes.size() / 4);
    std::memcpy(ref.data(), t.bytes.data(), t.bytes.size());
    Bytes bf(ref.size() * 2);
    for (size_t i = 0; i < ref.size(); ++i) {
      const uint16_t b = deepinfer::core::f32_to_bf16(ref[i]);
      std::memcpy(bf.data() + 2 * i, &b, 2);
    }
    t.dtype = "BF16";
    t.bytes = bf;
  }
  ASSERT_FALSE(ref.empty());
  const auto ck = Checkpoint::open(checkpoint(ts));
  const auto w = deepinfer::model::load_weights(*ck);
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_EQ(w.norm[i], deepinfer::core::bf16_to_f32(deepinfer::core::f32_to_bf16(ref[i]))) << i;
  EXPECT_GE(w.owned_floats, static_cast<int64_t>(ref.size()));
}


// ---------------------------------------------------------------------------------------
// safetensors' layout rules: offsets in order, no overlap, no hole, bounded header and shapes

TEST_F(Safetensors, OverlappingTensorsAreRejected) {
  const std::string p = path("overlap.safetensors");
  // b's bytes start inside a's: both byte counts match their shapes.
  const std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  write_file(p, raw_file(header.size(), header, iota_bytes(24)));
  EXPECT_THAT(error_of(p), AllOf(HasSubstr(p), HasSubstr("tensor 'b' bytes [8, 24) overlap tensor 'a'")));
  // The same tensor bytes read by two names.
  const std::string same = R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})";
  write_file(p, raw_file(same.size(), same, iota_bytes(8)));
  EXPECT_THAT(error_of(p), HasSubstr("overlap tensor 'a'"));
}

TEST_F(Safetensors, HolesInTheDataSectionAreRejected) {
  const std::string p = path("hole.safetensors");
  const std::string gap = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})";
  write_file(p, raw_file(gap.size(), gap, iota_bytes(12)));
  EXPECT_THAT(error_of(p), AllOf(HasSubstr(p), HasSubstr("4 unused bytes at data offset 4 before tensor 'b'")));
  const std::string late = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})";
  write_file(p, raw_file(late.size(), late, iota_bytes(8)));
  EXPECT_THAT(error_of(p), HasSubstr("4 unused bytes at data offset 0 before tensor 'a'"));
  const std::string tail = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  write_file(p, raw_file(tail.size(), tail, iota_bytes(9)));
  EXPECT_THAT(error_of(p), HasSubstr("5 bytes after the last tensor's data at offset 4"));
  // Out-of-order offsets that tile the section are fine; zero-sized tensors take no bytes.
  const std::string swapped = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},)"
                              R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                              R"("z":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]}})";
  write_file(p, raw_file(swapped.size(), swapped, iota_bytes(8)));
  SafetensorsFile f(p);
  EXPECT_EQ(f.tensors().at("a").data, f.tensors().at("b").data + 4);
}

TEST_F(Safetensors, ZeroDimensionBesideAHugeOneIsRejected) {
  const std::string p = path("zero.safetensors");
  for (const char* shape : {"[0, 18446744073709551615]", "[1152921504606846976, 0]", "[0, 1125899906842625]",
                                  "[33554432, 33554433, 0]"}) {
    const std::string header = std::string(R"({"w":{"dtype":"F32","shape":)") + shape + R"(,"data_offsets":[0,0]}})";
    write_file(p, raw_file(header.size(), header, {}));
    EXPECT_THAT(error_of(p), AllOf(HasSubstr(p), HasSubstr("tensor 'w': shape"), HasSubstr("is too large"))) << shape;
  }
  // Byte counts that would overflow 64 bits.
  const std::string big = R"({"w":{"dtype":"I64","shape":[4294967296, 4294967296],"data_offsets":[0,0]}})";
  write_file(p, raw_file(big.size(), big, {}));
  EXPECT_THAT(error_of(p), HasSubstr("is too large"));
}

TEST_F(Safetensors, DuplicateTensorNameIsRejected) {
  const std::string p = path("dup.safetensors");
  const std::string header = R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                             R"("w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})";
  write_file(p, raw_file(header.size(), header, iota_bytes(8)));
  EXPECT_THAT(error_of(p), AllOf(HasSubstr(p), HasSubstr("tensor 'w' is listed twice")));
}

TEST_F(Safetensors, HeaderLengthAboveTheFormatLimit) {
  // A header that is really there but longer than safetensors allows (100 MB) is refused
  // before it is parsed.
  const std::string p = path("huge_header.safetensors");
  {
    std::ofstream f(p, std::ios::binary);
    const uint64_t len = 100'000'001;
    f.write(reinterpret_cast<const char*>(&len), 8);
    f.seekp(static_cast<std::streamoff>(8 + len - 1));
    f.put(' ');
  }
  EXPECT_THAT(error_of(p), AllOf(HasSubstr(p), HasSubstr("exceeds the format's limit of 100000000 bytes")));
}

TEST_F(Safetensors, DirectoryAndMissingFileNameTheReason) {
  fs::create_directories(path("dir.safetensors"));
  EXPECT_THAT(error_of(path("dir.safetensors")), HasSubstr("not a regular file"));
  EXPECT_THAT(error_of(path("missing.safetensors")), AllOf(HasSubstr("missing.safetensors"), HasSubstr("No such file")));
}

TEST_F(Safetensors, InMemoryParserMatchesTheFile) {
  const std::string bytes = st_file({{"a", "F32", {2}, f32_bytes({1.0f, 2.0f})}, {"b", "U8", {3}, iota_bytes(3)}});
  const auto t = deepinfer::loader::parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t.at("b").nbytes, 3u);
  try {
    deepinfer::loader::parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size() - 1, "mem");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("mem: "), HasSubstr("tensor 'b'")));
  }
}

// A config whose random weights cannot fit is refused before anything is allocated, with
// what it needs and what there is.
TEST_F(Safetensors, RandomWeightsThatDoNotFitAreRefusedUpFront) {
  json c = json::parse(std::ifstream(kCed + "/config.json"));
  c["vocab_size"] = 2000000000;
  c["hidden_size"] = 262144;
  std::ofstream(path("config.json")) << c.dump();
  auto be = deepinfer::kernels::make_backend("cpu", 1, "float32");
  try {
    deepinfer::engine::load_model(dir_.string(), *be, deepinfer::engine::LoadFormat::kRandom);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(path("config.json")), HasSubstr("does not fit in memory: it needs"),
                                HasSubstr("PB"), HasSubstr("is available")));
  }
}

}  // namespace
