// End-to-end tests of the `deepinfer` executable (src/cli): `logits` on the ced fixture
// must reproduce the reference logits for several chunkings, `info` prints the schedule,
// and every bad input (flags, command, model directory, tokens file, chunk sizes, a
// truncated checkpoint) must exit non-zero with a clear `deepinfer: error: ...` message
// instead of crashing. stdout/stderr are redirected to files in a per-test temp dir.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/npy.h"
#include "kernels/backend.h"
#include "model/dspark_fixture.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const std::string kCed = std::string(DEEPINFER_TEST_DATA) + "/v41/ced";
const std::string kTokens = kCed + "/golden/tokens.npy";

struct Outcome {
  int code = -1;  // exit status, or 128 + signal
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::path(::testing::TempDir()) / ("deepinfer_cli_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& f) const { return (dir_ / f).string(); }

  // Runs `deepinfer <args>` (args already shell-quoted where needed).
  Outcome run(const std::string& args) const {
    const fs::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string cmd = quote(DEEPINFER_BIN) + " " + args + " >" + quote(out.string()) + " 2>" + quote(err.string());
    const int status = std::system(cmd.c_str());
    Outcome r;
    if (status != -1 && WIFEXITED(status)) r.code = WEXITSTATUS(status);
    else if (status != -1 && WIFSIGNALED(status)) r.code = 128 + WTERMSIG(status);
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }
  // Runs a command expected to fail cleanly: exit 2 and one `deepinfer: error:` line.
  std::string expect_error(const std::string& args) const {
    const Outcome r = run(args);
    EXPECT_EQ(r.code, 2) << "deepinfer " << args << "\nstderr: " << r.err;
    EXPECT_THAT(r.err, StartsWith("deepinfer: error: ")) << "deepinfer " << args;
    return r.err;
  }
  std::string logits_args(const std::string& model, const std::string& tokens, const std::string& extra = "") const {
    return "logits --model " + quote(model) + " --tokens " + quote(tokens) + (extra.empty() ? "" : " " + extra);
  }
  fs::path dir_;
};

// ---------------------------------------------------------------------------------------
// logits and info on the ced fixture

class CliLogits : public Cli, public ::testing::WithParamInterface<const char*> {};

TEST_P(CliLogits, MatchesGoldenLogits) {
  const std::string chunks = GetParam();
  const std::string out = path("logits.npy");
  const Outcome r = run(logits_args(kCed, kTokens, (chunks.empty() ? "" : "--chunks " + chunks) + " --out " + quote(out)));
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<int64_t> shape, ref_shape;
  const std::vector<float> got = deepinfer::core::read_npy_f32(out, &shape);
  const std::vector<float> ref = deepinfer::core::read_npy_f32(kCed + "/golden/logits_full.npy", &ref_shape);
  ASSERT_EQ(shape, (std::vector<int64_t>{40, 1024}));
  ASSERT_EQ(ref_shape, shape);
  ASSERT_EQ(got.size(), ref.size());
  float max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "logit " << i;
    max_diff = std::max(max_diff, std::fabs(got[i] - ref[i]));
    max_ref = std::max(max_ref, std::fabs(ref[i]));
  }
  ASSERT_GT(max_ref, 0.0f);
  EXPECT_LE(max_diff / max_ref, 1e-4f) << "max|diff| " << max_diff << ", max|ref| " << max_ref;

  // stdout: the top 5 next tokens after the last position, best first.
  EXPECT_THAT(r.out, HasSubstr("top 5 next tokens after position 39:"));
  const float* last = got.data() + 39 * 1024;
  const auto best = std::max_element(last, last + 1024) - last;
  std::vector<std::string> lines;
  std::istringstream ss(r.out);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 6u) << r.out;
  EXPECT_EQ(std::stoll(lines[1]), best) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Chunks, CliLogits, ::testing::Values("13,9,1", "1", "7", ""),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string s = p.param;
                           std::replace(s.begin(), s.end(), ',', '_');
                           return s.empty() ? std::string("whole") : "c" + s;
                         });

TEST_F(Cli, InfoPrintsSchedule) {
  const Outcome r = run("info --model " + quote(kCed));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("kv_source_layer_ids    [2, 5]"));
  EXPECT_THAT(r.out, HasSubstr("index_source_layer_ids [2, 5]"));
  EXPECT_THAT(r.out, HasSubstr("compress_ratios        [0, 0, 2, 2, 2, 1, 1, 1]"));
  EXPECT_THAT(r.out, HasSubstr("8 layers"));
}

// `info` prints the memory plan: weights per stored format, Engram tables, host allocations,
// the state of one sequence at --max-model-len and the budget, against what is available.
TEST_F(Cli, InfoPrintsTheMemoryPlan) {
  const std::string q = std::string(DEEPINFER_TEST_DATA) + "/v41/full-q";
  const Outcome r = run("info --model " + quote(q) + " --max-model-len 512");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("kv_source_layer_ids"));  // the schedule still comes first
  EXPECT_THAT(r.out, HasSubstr("memory plan: checkpoint weights as stored, on cpu (host memory)"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("  weights [0-9.]+ [KM]B: .*FP8 .*MXFP4 "));
  EXPECT_THAT(r.out, HasSubstr("  Engram tables 20.5 KB: FP8 20.5 KB"));
  EXPECT_THAT(r.out, HasSubstr("mapped from the checkpoint, read in place: "));
  EXPECT_THAT(r.out, HasSubstr("state for one sequence of 512 tokens"));
  EXPECT_THAT(r.out, HasSubstr("no state budget"));
  EXPECT_THAT(r.out, HasSubstr("needs in host memory: "));
  EXPECT_THAT(r.out, HasSubstr("fits: yes"));
  // For a GPU: the device's figure, the budget rule, and random weights in the chosen precision.
  const Outcome d = run("info --model " + quote(kCed) + " --device cuda --dtype bfloat16 --load-format random --memory-fraction 0.5");
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_THAT(d.out, HasSubstr("memory plan: random weights made on the backend, on cuda\n"));
  EXPECT_THAT(d.out, ::testing::ContainsRegex("  weights [0-9.]+ [KM]B: BF16 "));
  EXPECT_THAT(d.out, HasSubstr("state budget 0.5 of the memory free after loading and a warm-up forward"));
  // A GPU's default budget: 0.9 of what is free then (the CPU has none by default, above).
  const Outcome g = run("info --model " + quote(kCed) + " --device cuda --load-format random");
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_THAT(g.out, HasSubstr("state budget 0.9 of the memory free after loading and a warm-up forward"));
  EXPECT_THAT(d.out, HasSubstr("needs on cuda: "));
  EXPECT_THAT(d.out, HasSubstr("host allocations: none"));
  EXPECT_THAT(expect_error("info --model " + quote(kCed) + " --device tpu"), HasSubstr("flag --device"));
  EXPECT_THAT(expect_error("info --model " + quote(kCed) + " --memory-fraction 2"), HasSubstr("flag --memory-fraction"));
  EXPECT_THAT(expect_error("info --model " + quote(kCed) + " --max-model-len 4096"),
              HasSubstr("flag --max-model-len: 4096 is longer than the model's max_position_embeddings = 1024"));
}

// --engram-tables: on a GPU the default keeps the Engram tables in host memory (out of the
// device's figure); `device` counts them there; other values are refused, by info and the engine.
TEST_F(Cli, InfoPlansEngramTablesWhereTheFlagSays) {
  const std::string q = std::string(DEEPINFER_TEST_DATA) + "/v41/full-q";
  const Outcome h = run("info --model " + quote(q) + " --device cuda");
  ASSERT_EQ(h.code, 0) << h.err;
  EXPECT_THAT(h.out, HasSubstr("  Engram tables 20.5 KB: FP8 20.5 KB (in host memory: read in place from the checkpoint)"));
  EXPECT_THAT(h.out, HasSubstr("(weights, vectors and state)"));
  const Outcome d = run("info --model " + quote(q) + " --device cuda --engram-tables device");
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_THAT(d.out, HasSubstr("  Engram tables 20.5 KB: FP8 20.5 KB\n"));
  EXPECT_THAT(d.out, HasSubstr("(weights, Engram tables, vectors and state)"));
  const Outcome r = run("info --model " + quote(q) + " --device cuda --load-format random");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("host allocations: Engram tables made on the device, kept on the host 20.5 KB"));
  EXPECT_THAT(expect_error("info --model " + quote(q) + " --engram-tables gpu"),
              HasSubstr("flag --engram-tables: expected 'host' or 'device', got 'gpu'"));
  EXPECT_THAT(expect_error("generate --model " + quote(q) + " --prompt-ids 5 --engram-tables gpu"),
              HasSubstr("EngineConfig.engram_tables: expected \"host\" or \"device\", got \"gpu\""));
}

// --speculative: only dspark, K in 1..5, draft sampling greedy or probabilistic; a checkpoint
// without draft stages is refused by name.
TEST_F(Cli, SpeculativeFlagsAreChecked) {
  EXPECT_THAT(expect_error("generate --model " + quote(kCed) + " --prompt-ids 5 --speculative eagle"),
              HasSubstr("flag --speculative: expected 'dspark', got 'eagle'"));
  EXPECT_THAT(expect_error("generate --model " + quote(kCed) + " --prompt-ids 5 --speculative dspark --num-speculative-tokens 6"),
              HasSubstr("flag --num-speculative-tokens"));
  EXPECT_THAT(expect_error("generate --model " + quote(kCed) + " --prompt-ids 5 --speculative dspark"),
              HasSubstr("has no DSpark draft stages (config.json num_nextn_predict_layers is 0, no mtp.* weights)"));
  EXPECT_THAT(expect_error("generate --model " + quote(kCed) + " --prompt-ids 5 --speculative dspark --draft-sampling top"),
              HasSubstr("flag --draft-sampling: expected 'greedy' or 'probabilistic', got 'top'"));
}

// run-batch reports the plan it checked on stderr when it starts; logits with its load time.
TEST_F(Cli, RunBatchAndLogitsReportTheirMemory) {
  const std::string q = std::string(DEEPINFER_TEST_DATA) + "/v41/full-q";
  std::ofstream(path("in.jsonl")) << R"({"custom_id": "a", "body": {"prompt_token_ids": [5, 6], "max_tokens": 1}})" << "\n";
  const Outcome r = run("run-batch --model " + quote(q) + " --input " + quote(path("in.jsonl")) + " --output " +
                        quote(path("out.jsonl")) + " --max-model-len 64");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, ::testing::ContainsRegex("^run-batch: memory on cpu: weights: .*MXFP4 .*; Engram tables FP8 .*; state "
                                              "for one sequence of 64 tokens .*; host .* available\n"));
  const Outcome l = run(logits_args(q, q + "/golden/tokens.npy"));
  ASSERT_EQ(l.code, 0) << l.err;
  EXPECT_THAT(l.err, HasSubstr("\nmemory on cpu: weights: "));
  EXPECT_THAT(l.err, HasSubstr("state for one sequence of 40 tokens"));
}

TEST_F(Cli, HelpExitsZero) {
  EXPECT_EQ(run("--help").code, 0);
  const Outcome r = run("logits --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--chunks"));
}

// ---------------------------------------------------------------------------------------
// Bad flags and commands

TEST_F(Cli, UnknownFlag) {
  EXPECT_THAT(expect_error(logits_args(kCed, kTokens, "--bogus 3")), HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(expect_error("info --model " + quote(kCed) + " --tokens x"), HasSubstr("unknown flag --tokens"));
  EXPECT_THAT(expect_error("logits --model"), HasSubstr("--model needs a value"));
  EXPECT_THAT(expect_error(logits_args(kCed, kTokens, "stray")), HasSubstr("unexpected argument 'stray'"));
}

TEST_F(Cli, UnknownOrMissingCommand) {
  Outcome r = run("frobnicate --model x");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'frobnicate'"));
  EXPECT_THAT(r.err, HasSubstr("usage: deepinfer"));
  r = run("");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("usage: deepinfer"));
}

TEST_F(Cli, MissingModelFlag) {
  EXPECT_THAT(expect_error("logits --tokens " + quote(kTokens)), HasSubstr("--model DIR is required"));
  EXPECT_THAT(expect_error("info"), HasSubstr("--model DIR is required"));
  EXPECT_THAT(expect_error("logits --model " + quote(kCed)), HasSubstr("--tokens IDS.npy is required"));
}

TEST_F(Cli, MissingModelDirectory) {
  const std::string missing = path("no-such-model");
  EXPECT_THAT(expect_error(logits_args(missing, kTokens)), HasSubstr(missing));
  EXPECT_THAT(expect_error("info --model " + quote(missing)), HasSubstr(missing));
  // A directory without config.json.
  EXPECT_THAT(expect_error(logits_args(dir_.string(), kTokens)), HasSubstr("config.json"));
}

// ---------------------------------------------------------------------------------------
// Bad tokens files

TEST_F(Cli, TokensFileMissing) {
  const std::string t = path("absent.npy");
  const std::string m = expect_error(logits_args(kCed, t));
  EXPECT_THAT(m, HasSubstr(t));
  EXPECT_THAT(m, HasSubstr("cannot open"));
}

TEST_F(Cli, TokensFileNotNpy) {
  const std::string t = path("tokens.txt");
  std::ofstream(t) << "1 2 3 4\n";
  const std::string m = expect_error(logits_args(kCed, t));
  EXPECT_THAT(m, HasSubstr(t));
  EXPECT_THAT(m, HasSubstr("not a .npy file"));
  std::ofstream(t, std::ios::trunc) << "";  // empty file
  EXPECT_THAT(expect_error(logits_args(kCed, t)), HasSubstr("not a .npy file"));
  // Float tokens.
  const float f[3] = {1, 2, 3};
  deepinfer::core::write_npy_f32(path("f.npy"), f, {3});
  EXPECT_THAT(expect_error(logits_args(kCed, path("f.npy"))), HasSubstr("expected an integer array"));
}

// A .npy header whose descr has no valid item size, or whose shape overflows int64, must be
// an error naming the file, never a crash (nor signed overflow under UBSan).
TEST_F(Cli, TokensNpyWithCorruptHeader) {
  const std::pair<std::string, std::string> cases[] = {
      {"<ix", "(3,)"}, {"<i-8", "(3,)"}, {"<i8", "(4294967296, 4294967296)"}};
  for (const auto& [descr, shape] : cases) {
    SCOPED_TRACE(descr + " " + shape);
    std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
    header += std::string(63 - (10 + header.size()) % 64, ' ') + "\n";
    const std::string t = path("bad.npy");
    std::ofstream f(t, std::ios::binary);
    f << std::string("\x93NUMPY\x01\x00", 8) << static_cast<char>(header.size() & 0xFF)
      << static_cast<char>(header.size() >> 8) << header << std::string(24, '\0');
    f.close();
    EXPECT_THAT(expect_error(logits_args(kCed, t)), HasSubstr(t));
  }
}

TEST_F(Cli, TwoDimensionalTokens) {
  const int64_t ids[6] = {1, 2, 3, 4, 5, 6};
  deepinfer::core::write_npy_i64(path("t2.npy"), ids, {2, 3});
  EXPECT_THAT(expect_error(logits_args(kCed, path("t2.npy"))), HasSubstr("expected a 1-D array of token ids, got 2"));
  deepinfer::core::write_npy_i64(path("t0.npy"), ids, {0});
  EXPECT_THAT(expect_error(logits_args(kCed, path("t0.npy"))), HasSubstr("no token ids"));
}

TEST_F(Cli, TokenIdOutOfVocabulary) {
  const int64_t ids[4] = {3, 17, 5000, 9};
  deepinfer::core::write_npy_i64(path("t.npy"), ids, {4});
  std::string m = expect_error(logits_args(kCed, path("t.npy")));
  EXPECT_THAT(m, HasSubstr("token id 5000 at index 2"));
  EXPECT_THAT(m, HasSubstr("[0, 1024)"));
  const int64_t neg[2] = {-1, 4};
  deepinfer::core::write_npy_i64(path("n.npy"), neg, {2});
  EXPECT_THAT(expect_error(logits_args(kCed, path("n.npy"))), HasSubstr("token id -1 at index 0"));
  const int64_t edge[1] = {1024};
  deepinfer::core::write_npy_i64(path("e.npy"), edge, {1});
  EXPECT_THAT(expect_error(logits_args(kCed, path("e.npy"))), HasSubstr("token id 1024"));
}

// ---------------------------------------------------------------------------------------
// Bad chunk sizes and a corrupt checkpoint

TEST_F(Cli, BadDevice) {
  EXPECT_THAT(expect_error(logits_args(kCed, kTokens, "--device tpu")), HasSubstr("device 'tpu'"));
  EXPECT_THAT(expect_error(logits_args(kCed, kTokens, "--device cuda:x")), HasSubstr("device 'cuda:x'"));
  EXPECT_THAT(expect_error(logits_args(kCed, kTokens, "--dtype fp16")), HasSubstr("dtype 'fp16'"));
  if (!deepinfer::kernels::cuda_built()) {
    EXPECT_THAT(expect_error(logits_args(kCed, kTokens, "--device cuda")), HasSubstr("no CUDA backend"));
  }
}

TEST_F(Cli, BadChunks) {
  for (const std::string c : {"0", "13,0,1", "abc", "4,,2", "-3", "2x", ""}) {
    SCOPED_TRACE(c);
    EXPECT_THAT(expect_error(logits_args(kCed, kTokens, "--chunks " + quote(c))), HasSubstr("flag --chunks"));
  }
}

TEST_F(Cli, TruncatedCheckpoint) {
  const fs::path ck = dir_ / "ck";
  fs::create_directories(ck);
  fs::copy_file(kCed + "/config.json", ck / "config.json");
  fs::copy_file(kCed + "/model.safetensors", ck / "model.safetensors");
  const auto size = fs::file_size(ck / "model.safetensors");
  for (const uintmax_t keep : {size - 100, size / 2, uintmax_t{100}, uintmax_t{4}}) {
    SCOPED_TRACE(keep);
    fs::resize_file(ck / "model.safetensors", keep);
    const std::string m = expect_error(logits_args(ck.string(), kTokens));
    EXPECT_THAT(m, HasSubstr("model.safetensors"));
    EXPECT_THAT(m, HasSubstr("truncated"));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// run-batch: 1,000 mixed lines, good and bad; one output line per input line, in order,
// errors exactly for the bad ones.

TEST_F(Cli, RunBatchThousandMixedRequests) {
  const std::string model = std::string(DEEPINFER_TEST_DATA) + "/v41/full";
  std::ofstream in(path("in.jsonl"));
  std::vector<bool> bad;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = "\"custom_id\":\"r" + std::to_string(i) + "\"";
    switch (i % 10) {
      case 0: in << "{" << id << ",\"body\":{\"prompt\":\"Hello number " << i << "\",\"max_tokens\":3,\"temperature\":0}}"; bad.push_back(false); break;
      case 1: in << "{" << id << ",\"body\":{\"prompt_token_ids\":[5," << (i % 900) + 3 << ",9],\"max_tokens\":2,\"seed\":" << i << "}}"; bad.push_back(false); break;
      case 2: in << "{" << id << ",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi " << i << "\"}],\"max_tokens\":2}}"; bad.push_back(false); break;
      case 3: in << "{" << id << ",\"body\":{\"prompt\":\"broken\",\"max_tokens\":2"; bad.push_back(true); break;  // malformed JSON
      case 4: in << "{" << id << ",\"body\":{\"prompt\":\"x\",\"max_tokns\":2}}"; bad.push_back(true); break;  // unknown field
      case 5: in << "{" << id << ",\"body\":{\"prompt\":\"x\",\"max_tokens\":\"ten\"}}"; bad.push_back(true); break;  // wrong type
      case 6: in << "{" << id << ",\"body\":{\"prompt\":\"x\",\"temperature\":-0.5}}"; bad.push_back(true); break;
      case 7: in << "{" << id << ",\"body\":{\"prompt_token_ids\":[5,1024],\"max_tokens\":2}}"; bad.push_back(true); break;  // OOV
      case 8: in << "{" << id << ",\"body\":{\"prompt\":\"two please\",\"n\":2,\"max_tokens\":2,\"temperature\":1,\"top_k\":5}}"; bad.push_back(false); break;
      default: in << "{" << id << "}"; bad.push_back(true); break;  // no body
    }
    in << "\n";
  }
  in.close();
  const Outcome r = run("run-batch --model " + quote(model) + " --input " + quote(path("in.jsonl")) + " --output " +
                        quote(path("out.jsonl")) + " --metrics " + quote(path("m.json")));
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream out(path("out.jsonl"));
  int line = 0;
  for (std::string s; std::getline(out, s); ++line) {
    ASSERT_LT(line, 1000);
    auto j = nlohmann::json::parse(s);
    std::string expect_id = line % 10 == 3 ? std::string("line ") : std::string("r");
    expect_id += std::to_string(line % 10 == 3 ? line + 1 : line);
    EXPECT_EQ(j["custom_id"], expect_id) << s;
    if (bad[static_cast<size_t>(line)]) {
      EXPECT_TRUE(j.contains("error")) << s;
      EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    } else {
      ASSERT_TRUE(j.contains("response")) << s;
      EXPECT_EQ(j["response"]["choices"].size(), line % 10 == 8 ? 2u : 1u);
      EXPECT_GT(j["response"]["usage"]["completion_tokens"].get<int>(), 0);
    }
  }
  EXPECT_EQ(line, 1000);
  auto m = nlohmann::json::parse(slurp(path("m.json")));
  EXPECT_EQ(m["requests"], 1000);
  EXPECT_EQ(m["errors"], 600);  // kinds 3, 4, 5, 6, 7 and 9
  EXPECT_EQ(m["lines"], 1000);
  EXPECT_EQ(m["written"], 1000);
  EXPECT_EQ(m["succeeded"], 400);
  EXPECT_EQ(m["failed"], 600);
  EXPECT_EQ(m["skipped"], 0);
  EXPECT_THAT(r.err, HasSubstr("TTFT p50"));
  EXPECT_THAT(r.err, HasSubstr("run-batch: 1000 lines: 1000 written (400 succeeded, 600 failed), 0 skipped"));
}

// run-batch's output side: a results or metrics file that cannot be written is an error that
// names it (status 2), never a silent success.
TEST_F(Cli, RunBatchOutputFailuresExitTwoNamingTheFile) {
  const std::string model = std::string(DEEPINFER_TEST_DATA) + "/v41/full";
  std::ofstream(path("in.jsonl")) << "{\"custom_id\":\"a\",\"body\":{\"prompt\":\"Hi\",\"max_tokens\":2}}\n"
                                  << "{\"custom_id\":\"b\",\"body\":{\"prompt\":\"x\",\"max_tokns\":2}}\n";
  const std::string input = slurp(path("in.jsonl"));
  const std::string base = "run-batch --model " + quote(model) + " --input " + quote(path("in.jsonl"));
  // The summary says how far it got; the error is the last line.
  Outcome r = run(base + " --output /dev/full");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::EndsWith("\ndeepinfer: error: /dev/full: write failed: No space left on device\n"));
  EXPECT_THAT(r.err, HasSubstr("run-batch: stopped: 2 lines: 0 written"));
  // The results are complete and flushed before the metrics fail.
  r = run(base + " --output " + quote(path("out.jsonl")) + " --metrics /dev/full");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::EndsWith("\ndeepinfer: error: /dev/full: write failed: No space left on device\n"));
  std::string err;
  const std::string results = slurp(path("out.jsonl"));
  EXPECT_EQ(std::count(results.begin(), results.end(), '\n'), 2);
  err = expect_error(base + " --output " + quote(path("no/dir/out.jsonl")));
  EXPECT_THAT(err, HasSubstr(path("no/dir/out.jsonl") + ": cannot open for writing: No such file or directory"));
  err = expect_error(base + " --output " + quote(path("o2.jsonl")) + " --metrics " + quote(path("no/dir/m.json")));
  EXPECT_THAT(err, HasSubstr(path("no/dir/m.json") + ": cannot open for writing"));
  EXPECT_FALSE(fs::exists(path("o2.jsonl"))) << "the metrics file is checked before the results file is touched";
  err = expect_error(base + " --output " + quote(path("in.jsonl")));
  EXPECT_THAT(err, HasSubstr("--output is the same file as --input"));
  err = expect_error(base + " --output " + quote(path("o3.jsonl")) + " --metrics " + quote(path("o3.jsonl")));
  EXPECT_THAT(err, HasSubstr("--metrics is the same file as"));
  // Two spellings of a path that does not exist yet: the metrics would overwrite the results.
  err = expect_error(base + " --output " + quote(path("o4.jsonl")) + " --metrics " + quote(dir_.string() + "/./o4.jsonl"));
  EXPECT_THAT(err, HasSubstr("--metrics is the same file as"));
  // A ".." through a missing directory, and a relative path spelled two ways.
  const Outcome rel = run("run-batch --model " + quote(model) + " --input " + quote(path("in.jsonl")) + " --output " +
                          quote(path("o5.jsonl")) + " --metrics " + quote(dir_.string() + "/sub/../o5.jsonl"));
  EXPECT_EQ(rel.code, 2) << rel.err;
  err = expect_error("run-batch --model " + quote(model) + " --input " + quote(path("in.jsonl")) + " --output o6.jsonl --metrics ./o6.jsonl");
  EXPECT_THAT(err, HasSubstr("./o6.jsonl: --metrics is the same file as o6.jsonl"));
  err = expect_error(base + " --output /dev/full --resume");
  EXPECT_THAT(err, HasSubstr("/dev/full: --resume needs a regular file"));
  EXPECT_EQ(slurp(path("in.jsonl")), input) << "the input is never written";
}

// --resume after a crash: complete lines kept, the torn last line cut, only the rest run (the
// summary counts them), and the file ends as a fresh run's; an output from another input is
// refused and left as it was.
TEST_F(Cli, RunBatchResumeAfterACrash) {
  const std::string model = std::string(DEEPINFER_TEST_DATA) + "/v41/full";
  std::ofstream in(path("in.jsonl"));
  for (int i = 0; i < 8; ++i) {
    if (i == 5) in << "{\"custom_id\":\"r5\",\"body\":{\"prompt\":\"x\",\"top_p\":7}}\n";
    else in << "{\"custom_id\":\"r" << i << "\",\"body\":{\"prompt\":\"Text " << i << "\",\"max_tokens\":" << 2 + i % 3 << ",\"temperature\":0.9}}\n";
  }
  in.close();
  const std::string base = "run-batch --model " + quote(model) + " --input " + quote(path("in.jsonl")) + " --output " + quote(path("out.jsonl"));
  Outcome r = run(base);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string fresh = slurp(path("out.jsonl"));
  std::vector<size_t> ends;
  for (size_t i = 0; i < fresh.size(); ++i)
    if (fresh[i] == '\n') ends.push_back(i + 1);
  ASSERT_EQ(ends.size(), 8u);
  // Three complete lines and 20 bytes of the fourth.
  std::ofstream(path("out.jsonl"), std::ios::binary) << fresh.substr(0, ends[2] + 20);
  r = run(base + " --resume --metrics " + quote(path("m.json")));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(path("out.jsonl")), fresh);
  EXPECT_THAT(r.err, HasSubstr("dropped a torn last line (20 bytes)"));
  EXPECT_THAT(r.err, HasSubstr("run-batch: 8 lines: 5 written (4 succeeded, 1 failed), 3 skipped"));
  auto m = nlohmann::json::parse(slurp(path("m.json")));
  EXPECT_EQ(m["requests"], 5);
  EXPECT_EQ(m["skipped"], 3);
  EXPECT_EQ(m["written"], 5);
  EXPECT_EQ(m["failed"], 1);
  // Nothing left to run: no request runs, the file is unchanged.
  r = run(base + " --resume");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("8 lines: 0 written (0 succeeded, 0 failed), 8 skipped"));
  EXPECT_EQ(slurp(path("out.jsonl")), fresh);
  // Lines of another input: refused, file untouched.
  const std::string other = fresh.substr(ends[0], ends[1] - ends[0]);
  std::ofstream(path("out.jsonl"), std::ios::binary) << other;
  const std::string err = expect_error(base + " --resume");
  EXPECT_THAT(err, HasSubstr(path("out.jsonl") + ": line 1: custom_id \"r1\" does not match request 1"));
  EXPECT_EQ(slurp(path("out.jsonl")), other);
}

TEST_F(Cli, QuantizeWritesARunnableReleaseCheckpoint) {
  const std::string model = std::string(DEEPINFER_TEST_DATA) + "/v41/full";
  const Outcome q = run("quantize --model " + quote(model) + " --out " + quote(path("q")));
  ASSERT_EQ(q.code, 0) << q.err;
  auto cfg = nlohmann::json::parse(slurp(path("q/config.json")));
  EXPECT_TRUE(cfg.contains("text_config"));
  EXPECT_EQ(cfg["quantization_config"]["expert_dtype"], "fp4");
  EXPECT_LT(fs::file_size(path("q/model.safetensors")), fs::file_size(model + "/model.safetensors"));
  const Outcome r = run(logits_args(path("q"), model + "/golden/tokens.npy", "--out " + quote(path("l.npy"))));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("top 5 next tokens"));
  expect_error("quantize --model " + quote(model));  // --out missing
}

namespace {

// A copy of a fixture checkpoint in `dir` (config, weights, tokenizer).
void copy_checkpoint(const std::string& from, const fs::path& dir) {
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(from))
    if (e.is_regular_file()) fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
}

}  // namespace

// Without --out only the last position's logits are computed: the same top tokens as with
// --out, for every chunking.
TEST_F(Cli, LogitsWithoutOutPrintsTheSameTopTokens) {
  for (const char* chunks : {"", "--chunks 13,9,1", "--chunks 1"}) {
    const Outcome with = run(logits_args(kCed, kTokens, std::string(chunks) + " --top 8 --out " + quote(path("all.npy"))));
    const Outcome without = run(logits_args(kCed, kTokens, std::string(chunks) + " --top 8"));
    ASSERT_EQ(with.code, 0) << with.err;
    ASSERT_EQ(without.code, 0) << without.err;
    EXPECT_EQ(with.out, without.out) << chunks;
    EXPECT_THAT(without.out, HasSubstr("top 8 next tokens after position 39:"));
  }
}

// quantize refuses an --out that is the source checkpoint, by any spelling of its path, or
// lies inside it, before writing anything.
TEST_F(Cli, QuantizeRefusesToOverwriteItsSource) {
  const fs::path src = dir_ / "src";
  copy_checkpoint(kCed, src);
  const std::string before = slurp(src / "model.safetensors"), config_before = slurp(src / "config.json");
  fs::create_directory_symlink(src, dir_ / "link");
  for (const std::string& out : {src.string(), src.string() + "/", src.string() + "/./", (dir_ / "src/../src").string(),
                                (dir_ / "link").string()}) {
    const std::string err = expect_error("quantize --model " + quote(src.string()) + " --out " + quote(out));
    EXPECT_THAT(err, HasSubstr("flag --out")) << out;
    EXPECT_THAT(err, HasSubstr("is the --model directory")) << out;
  }
  const std::string err = expect_error("quantize --model " + quote(src.string()) + " --out " + quote((src / "q").string()));
  EXPECT_THAT(err, HasSubstr("is inside the --model directory"));
  EXPECT_FALSE(fs::exists(src / "q"));
  EXPECT_EQ(slurp(src / "model.safetensors"), before);
  EXPECT_EQ(slurp(src / "config.json"), config_before);
}

// Config mistakes are named as such by every command that reads a config.
TEST_F(Cli, ConfigMistakesNameTheField) {
  const fs::path m = dir_ / "m";
  copy_checkpoint(kCed, m);
  const std::string config = slurp(m / "config.json");
  struct Case {
    const char* field;
    nlohmann::json value;
    const char* expect;
  } cases[] = {
      {"num_hidden_layers", 1e9, "field 'num_hidden_layers': must be in [1, 512], got 1000000000"},
      {"hc_sinkhorn_iters", 1e9, "field 'hc_sinkhorn_iters': must be in [1, 1000]"},
      {"rms_norm_eps", -1e-6, "field 'rms_norm_eps': must be finite and > 0"},
      {"kv_source_layer_ids", {2, 2, 5}, "field 'kv_source_layer_ids': layer 2 is listed twice"},
  };
  for (const Case& c : cases) {
    auto j = nlohmann::json::parse(config);
    j[c.field] = c.value;
    std::ofstream(m / "config.json") << j.dump();
    for (const std::string& args : {"info --model " + quote(m.string()), logits_args(m.string(), kTokens),
                                    logits_args(m.string(), kTokens, "--load-format random")}) {
      const std::string err = expect_error(args);
      EXPECT_THAT(err, HasSubstr((m / "config.json").string())) << args;
      EXPECT_THAT(err, HasSubstr(c.expect)) << args;
    }
  }
}

// A config too large for this machine's memory is refused up front, saying how much it needs
// and how much there is; `info` shows the figure.
TEST_F(Cli, ModelLargerThanMemoryIsRefusedBeforeLoading) {
  const fs::path m = dir_ / "m";
  copy_checkpoint(kCed, m);
  auto j = nlohmann::json::parse(slurp(m / "config.json"));
  j["vocab_size"] = 2000000000;
  j["hidden_size"] = 200000;
  std::ofstream(m / "config.json") << j.dump();
  const Outcome info = run("info --model " + quote(m.string()) + " --load-format random");
  ASSERT_EQ(info.code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("memory plan: random weights made on the host, on cpu (host memory)"));
  EXPECT_THAT(info.out, HasSubstr("available now "));
  EXPECT_THAT(info.out, HasSubstr("fits: no"));
  const std::string err = expect_error(logits_args(m.string(), kTokens, "--load-format random"));
  EXPECT_THAT(err, HasSubstr("does not fit in memory: it needs"));
  EXPECT_THAT(err, HasSubstr("is available"));
}

// A .npy header claiming a huge array in a tiny file is an error naming the file, not an
// allocation of gigabytes.
TEST_F(Cli, TokensNpyClaimingAHugeShape) {
  std::string header = "{'descr': '<i8', 'fortran_order': False, 'shape': (4000000000,), }";
  header += std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xFF);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header + std::string(16, '\0');
  std::ofstream(path("huge.npy"), std::ios::binary) << bytes;
  const std::string err = expect_error(logits_args(kCed, path("huge.npy")));
  EXPECT_THAT(err, HasSubstr(path("huge.npy")));
  EXPECT_THAT(err, HasSubstr("needs 32000000000 bytes, the file has 16"));
}

TEST_F(Cli, LogitsAndInfoBadArguments) {
  EXPECT_THAT(expect_error(logits_args(kCed, kTokens, "--top -3")), HasSubstr("flag --top: expected an integer in [0, 2147483647], got '-3'"));
  EXPECT_THAT(expect_error("info --model " + quote(kTokens)), HasSubstr(kTokens + ": not a directory"));
  fs::create_directories(path("empty"));
  EXPECT_THAT(expect_error("info --model " + quote(path("empty"))), HasSubstr("config.json: cannot open (config.json expected): No such file"));
  // An unsigned id past int64 is not reported as a negative id.
  std::string header = "{'descr': '<u8', 'fortran_order': False, 'shape': (1,), }";
  header += std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xFF);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header + std::string(8, '\xff');
  std::ofstream(path("u8.npy"), std::ios::binary) << bytes;
  EXPECT_THAT(expect_error(logits_args(kCed, path("u8.npy"))), HasSubstr("value 18446744073709551615 at index 0 does not fit in int64"));
}

// ---- Inputs typed on the command line or sent in run-batch files ----

TEST_F(Cli, IntegerAndFloatFlagsAreRangeChecked) {
  const std::string model = std::string(DEEPINFER_TEST_DATA) + "/v41/full";
  const std::string gen = "generate --model " + quote(model) + " --prompt hi ";
  struct Case {
    std::string flags, expect;
  };
  const std::vector<Case> cases = {
      {"--max-tokens 4294967297", "flag --max-tokens: expected an integer in [1, 2147483647], got '4294967297'"},
      {"--max-tokens 0", "flag --max-tokens: expected an integer in [1, 2147483647], got '0'"},
      {"--max-tokens 99999999999999999999", "flag --max-tokens: expected an integer in [1, 2147483647]"},
      {"--max-tokens ' 5'", "flag --max-tokens"},
      {"--max-tokens +5", "flag --max-tokens"},
      {"--max-tokens 5x", "flag --max-tokens"},
      {"--min-tokens -1", "flag --min-tokens"},
      {"--n 4294967298", "flag --n: expected an integer in [1, 1024], got '4294967298'"},
      {"--top-k -2", "flag --top-k"},
      {"--logprobs 4294967296", "flag --logprobs: expected an integer in [0, 20]"},
      {"--request-seed -1", "flag --request-seed: expected an integer in [0, 18446744073709551615], got '-1'"},
      {"--request-seed 18446744073709551616", "flag --request-seed"},
      {"--seed -5", "flag --seed"},
      {"--threads 4294967297", "flag --threads: expected an integer in [0, 1024]"},
      {"--max-num-batched-tokens 0", "flag --max-num-batched-tokens"},
      {"--max-num-seqs -1", "flag --max-num-seqs"},
      {"--memory-budget -1", "flag --memory-budget: expected an integer >= 0"},
      {"--memory-fraction 1.5", "flag --memory-fraction: expected a number in [0, 1]"},
      {"--max-model-len 0", "flag --max-model-len: expected an integer >= 1"},
      {"--max-model-len 2048", "max_model_len = 2048 is longer than the model's max_position_embeddings = 1024"},
      {"--temperature 1e39", "flag --temperature: expected a number in [0, "},
      {"--temperature nan", "flag --temperature: expected a number, got 'nan'"},
      {"--temperature inf", "flag --temperature"},
      {"--top-p 2", "flag --top-p: expected a number in [0, 1]"},
      {"--presence-penalty 1e300", "flag --presence-penalty"},
      {"--repetition-penalty 1e39", "flag --repetition-penalty"},
      {"--stop-token-ids 1,4294967297", "flag --stop-token-ids: expected an integer in [0, 2147483647], got '4294967297'"},
      {"--stop-token-ids 1,,2", "flag --stop-token-ids"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.flags);
    EXPECT_THAT(expect_error(gen + c.flags), HasSubstr(c.expect));
  }
  EXPECT_THAT(expect_error("generate --model " + quote(model) + " --prompt-ids 5,4294967301"), HasSubstr("flag --prompt-ids"));
  EXPECT_THAT(expect_error("generate --model " + quote(model) + " --prompt-ids 5,-1"), HasSubstr("flag --prompt-ids"));
  EXPECT_THAT(expect_error("detokenize --model " + quote(model) + " --ids 4294967297"), HasSubstr("flag --ids: expected an integer in [0, 1023]"));
  EXPECT_THAT(expect_error(logits_args(kCed, kTokens, "--top 4294967297")), HasSubstr("flag --top"));
  EXPECT_THAT(expect_error(logits_args(kCed, kTokens, "--chunks 4294967297")), HasSubstr("flag --chunks"));
}

TEST_F(Cli, TextThatIsNotUtf8ExitsTwoNamingTheFlag) {
  const std::string model = std::string(DEEPINFER_TEST_DATA) + "/v41/full";
  EXPECT_THAT(expect_error("tokenize --model " + quote(model) + " --text \"$(printf 'ab\\377')\""),
              HasSubstr("flag --text: invalid UTF-8 at byte offset 2 (byte 0xFF)"));
  EXPECT_THAT(expect_error("tokenize --model " + quote(model) + " --text \"$(printf '\\355\\240\\200')\""), HasSubstr("byte offset 0"));
  std::ofstream(path("bad.txt"), std::ios::binary) << "fine\n\xc3(";
  EXPECT_THAT(expect_error("tokenize --model " + quote(model) + " --file " + quote(path("bad.txt"))),
              HasSubstr("bad.txt: invalid UTF-8 at byte offset 5"));
  EXPECT_THAT(expect_error("generate --model " + quote(model) + " --prompt \"$(printf 'x\\300\\257')\" --max-tokens 2"),
              HasSubstr("flag --prompt: invalid UTF-8 at byte offset 1"));
  EXPECT_THAT(expect_error("generate --model " + quote(model) + " --prompt hi --stop \"$(printf '\\376')\" --max-tokens 2"),
              HasSubstr("flag --stop: invalid UTF-8 at byte offset 0"));
  EXPECT_THAT(expect_error("chat --model " + quote(model) + " --system \"$(printf 's\\370')\" </dev/null"), HasSubstr("flag --system: invalid UTF-8"));
  // Valid text still works.
  const Outcome ok = run("tokenize --model " + quote(model) + " --text \"$(printf 'caf\\303\\251')\"");
  EXPECT_EQ(ok.code, 0) << ok.err;
  // An interactive chat line that is not UTF-8 is reported and skipped; the next one is answered.
  std::ofstream(path("chat.txt"), std::ios::binary) << "bad \xff line\nhello\n";
  const Outcome chat = run("chat --model " + quote(model) + " --max-tokens 2 <" + quote(path("chat.txt")));
  EXPECT_EQ(chat.code, 0) << chat.err;
  EXPECT_THAT(chat.err, HasSubstr("input line: invalid UTF-8 at byte offset 4; line ignored"));
  EXPECT_FALSE(chat.out.empty());
}

TEST_F(Cli, PromptLongerThanMaxModelLen) {
  const std::string model = std::string(DEEPINFER_TEST_DATA) + "/v41/full";
  EXPECT_THAT(expect_error("generate --model " + quote(model) + " --prompt-ids 5,6,7 --max-tokens 2 --max-model-len 4"),
              HasSubstr("prompt too long: 3 prompt tokens + max_tokens 2 = 5 tokens, more than the maximum model length (max_model_len) = 4"));
  const Outcome ok = run("generate --model " + quote(model) + " --prompt-ids 5,6,7 --max-tokens 1 --max-model-len 4");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST_F(Cli, RunBatchBadLinesFailAloneAndTheRestComplete) {
  const std::string model = std::string(DEEPINFER_TEST_DATA) + "/v41/full";
  std::ofstream in(path("in.jsonl"), std::ios::binary);
  in << R"({"custom_id":"ok1","body":{"prompt":"hello","max_tokens":2}})" << "\n";
  in << R"({"custom_id":"utf","body":{"prompt":"a)" << "\xff" << R"("}})" << "\n";
  in << R"({"custom_id":"deep","body":{"messages":)" << std::string(100000, '[') << std::string(100000, ']') << "}}\n";
  in << R"({"custom_id":"tl","body":{"prompt":"x","logprobs":true,"top_logprobs":"abc"}})" << "\n";
  in << R"({"custom_id":"n","body":{"prompt":"x","n":1.5}})" << "\n";
  in << R"({"custom_id":"huge","body":{"prompt":"x","max_tokens":4294967297}})" << "\n";
  in << R"({"custom_id":"long","body":{"prompt_token_ids":[5,6,7,8],"max_tokens":2000}})" << "\n";
  in << R"({"custom_id":"big","body":{"prompt":")" << std::string((64u << 20) + 10, 'a') << "\"}}\n";
  in << R"({"custom_id":"ok2","body":{"prompt_token_ids":[5,6],"max_tokens":3}})" << "\n";
  in.close();
  const Outcome r = run("run-batch --model " + quote(model) + " --input " + quote(path("in.jsonl")) + " --output " + quote(path("out.jsonl")));
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream out(path("out.jsonl"));
  std::vector<nlohmann::json> lines;
  for (std::string l; std::getline(out, l);) lines.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(lines.size(), 9u);
  auto error_of = [&](size_t i) { return lines[i].contains("error") ? lines[i]["error"]["message"].get<std::string>() : std::string(); };
  EXPECT_EQ(lines[0]["custom_id"], "ok1");
  EXPECT_EQ(lines[0]["response"]["token_ids"].size(), 2u);
  EXPECT_EQ(lines[8]["custom_id"], "ok2");
  EXPECT_EQ(lines[8]["response"]["token_ids"].size(), 3u);
  EXPECT_THAT(error_of(1), HasSubstr("line 2: invalid UTF-8 at byte offset 38"));
  EXPECT_THAT(error_of(2), HasSubstr("line 3: JSON nested deeper than 128 levels"));
  EXPECT_THAT(error_of(3), HasSubstr("body.top_logprobs: expected an integer, got \"abc\""));
  EXPECT_THAT(error_of(4), HasSubstr("body.n: expected an integer, got 1.5"));
  EXPECT_THAT(error_of(5), HasSubstr("body.max_tokens: must be in [1, 2147483647], got 4294967297"));
  EXPECT_THAT(error_of(6), HasSubstr("prompt too long: 4 prompt tokens + max_tokens 2000"));
  EXPECT_THAT(error_of(7), HasSubstr("line 8: 67108914 bytes, more than the limit of 67108864 bytes per line"));
  EXPECT_EQ(lines[7]["custom_id"], "line 8");
  // An input that is a directory is a clear error, not an I/O exception (status 1).
  EXPECT_THAT(expect_error("run-batch --model " + quote(model) + " --input " + quote(path("")) + " --output " + quote(path("o.jsonl"))),
              HasSubstr("Is a directory"));
  EXPECT_THAT(expect_error("tokenize --model " + quote(model) + " --file " + quote(path(""))), HasSubstr("is a directory"));
}

// run-batch with DSpark speculative decoding on the DSpark fixture: the greedy results are those
// of the run without it; the summary line and --metrics report the rounds, acceptance (mean
// length, histogram), the chosen k and the time drafting and verifying.
TEST_F(Cli, RunBatchReportsSpeculativeMetrics) {
  const std::string model = deepinfer::testing::dspark_checkpoint("dspark_cli");
  {
    std::ofstream in(path("in.jsonl"));
    for (int i = 0; i < 6; ++i)
      in << "{\"custom_id\":\"r" << i << "\",\"body\":{\"prompt_token_ids\":[5," << 3 + 11 * i
         << ",9,40],\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true}}\n";
  }
  const std::string base = "run-batch --model " + quote(model) + " --input " + quote(path("in.jsonl"));
  const Outcome plain = run(base + " --output " + quote(path("plain.jsonl")));
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_THAT(plain.err, Not(HasSubstr("speculative")));
  for (const std::string flags : {"--speculative dspark --num-speculative-tokens 4",
                                  "--speculative dspark --num-speculative-tokens 4 --no-adaptive-verification"}) {
    const Outcome r = run(base + " --output " + quote(path("spec.jsonl")) + " --metrics " + quote(path("m.json")) + " " + flags);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(slurp(path("spec.jsonl")).size(), slurp(path("plain.jsonl")).size());
    std::ifstream a(path("plain.jsonl")), b(path("spec.jsonl"));
    for (std::string x, y; std::getline(a, x) && std::getline(b, y);) {
      const auto jx = nlohmann::json::parse(x), jy = nlohmann::json::parse(y);
      EXPECT_EQ(jx["response"]["choices"][0]["text"], jy["response"]["choices"][0]["text"]) << flags;
    }
    const auto m = nlohmann::json::parse(slurp(path("m.json")));
    ASSERT_TRUE(m.contains("speculative")) << flags;
    const auto& s = m["speculative"];
    EXPECT_EQ(s["method"], "dspark");
    EXPECT_EQ(s["num_speculative_tokens"], 4);
    EXPECT_EQ(s["adaptive"], flags.find("no-adaptive") == std::string::npos);
    const auto acc = s["accepted_hist"].get<std::vector<int64_t>>(), chosen = s["chosen_k_hist"].get<std::vector<int64_t>>();
    ASSERT_EQ(acc.size(), 5u);
    ASSERT_EQ(chosen.size(), 5u);
    int64_t rounds = 0, accepted = 0;
    for (size_t j = 0; j < acc.size(); ++j) rounds += acc[j], accepted += static_cast<int64_t>(j) * acc[j];
    EXPECT_GT(rounds, 0);
    EXPECT_EQ(s["rounds"].get<int64_t>(), rounds);
    EXPECT_EQ(s["accepted_tokens"].get<int64_t>(), accepted);
    EXPECT_DOUBLE_EQ(s["mean_acceptance_length"].get<double>(), static_cast<double>(accepted + rounds) / static_cast<double>(rounds));
    EXPECT_GT(s["time_draft_s"].get<double>(), 0.0);
    EXPECT_GT(s["time_verify_s"].get<double>(), 0.0);
    if (flags.find("no-adaptive") != std::string::npos) {
      EXPECT_EQ(chosen[0], 0) << "adaptive off: every draft whole";
    }
    EXPECT_THAT(r.err, HasSubstr("run-batch: speculative dspark: " + std::to_string(rounds) + " rounds, " +
                                 std::to_string(accepted) + " of "));
    EXPECT_THAT(r.err, HasSubstr("mean acceptance length"));
  }
}
