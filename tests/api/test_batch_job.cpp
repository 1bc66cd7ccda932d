// run-batch's output side through the library (src/api/batch_job.h, batch_output.h) on the
// tiny v41/full fixture: results reach the file while later requests still run (checked from
// the engine's callbacks, not by timing), in input order, one flushed line at a time; a failed
// request's error line sits in its place; --resume after a simulated crash (complete lines and
// a torn last line) gives exactly the fresh run's bytes and runs only the missing requests; an
// output that does not match the input is refused and left untouched.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/batch_job.h"
#include "api/batch_output.h"
#include "core/error.h"
#include "deepinfer/llm.h"

namespace {

namespace fs = std::filesystem;
using deepinfer::Error;
using deepinfer::api::BatchHooks;
using deepinfer::api::BatchJob;
using deepinfer::api::BatchJobOptions;
using ::testing::HasSubstr;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void spit(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }
std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream ss(s);
  for (std::string l; std::getline(ss, l);) v.push_back(l);
  return v;
}

deepinfer::LLM& llm() {
  static deepinfer::LLM m([] {
    deepinfer::EngineConfig c;
    c.model = std::string(DEEPINFER_TEST_DATA) + "/v41/full";
    c.seed = 7;
    return c;
  }());
  return m;
}

class BatchJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / ("deepinfer_batchjob_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& f) const { return (dir_ / f).string(); }
  BatchJobOptions opts(bool resume) const {
    BatchJobOptions o;
    o.input = path("in.jsonl");
    o.output = path("out.jsonl");
    o.resume = resume;
    o.engine_seed = 7;
    return o;
  }
  fs::path dir_;
};

// Six requests: sampled (unseeded, temperature 1) and greedy ones, a bad line and a long one.
const char* kInput =
    "{\"custom_id\":\"s0\",\"body\":{\"prompt\":\"One\",\"max_tokens\":2,\"temperature\":1.0}}\n"
    "{\"custom_id\":\"s1\",\"body\":{\"prompt_token_ids\":[5,6,7],\"max_tokens\":3}}\n"
    "\n"
    "{\"custom_id\":\"bad\",\"body\":{\"prompt\":\"x\",\"max_tokens\":\"two\"}}\n"
    "{\"custom_id\":\"long\",\"body\":{\"prompt\":\"Long one\",\"max_tokens\":48,\"ignore_eos\":true,\"temperature\":0.8}}\n"
    "{\"custom_id\":\"s4\",\"body\":{\"prompt\":\"Four\",\"max_tokens\":2,\"temperature\":1.0,\"top_k\":50}}\n"
    "{\"custom_id\":\"s5\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}}\n";

TEST_F(BatchJobTest, LinesReachTheFileInOrderWhileTheLongRequestRuns) {
  spit(path("in.jsonl"), kInput);
  BatchJob job(opts(false));
  EXPECT_EQ(job.pending(), 6u);
  std::vector<size_t> finished, on_disk_at_finish, written;
  BatchHooks h;
  h.on_finish = [&](size_t i) {
    finished.push_back(i);
    on_disk_at_finish.push_back(lines_of(slurp(path("out.jsonl"))).size());
  };
  h.on_written = [&](size_t i) {
    written.push_back(i);
    // Flushed line by line: the file holds exactly the lines written so far, each complete.
    const std::string s = slurp(path("out.jsonl"));
    EXPECT_EQ(lines_of(s).size(), i + 1);
    EXPECT_EQ(s.back(), '\n');
  };
  auto outs = job.run(&llm(), h);
  ASSERT_EQ(outs.size(), 6u);
  EXPECT_EQ(written, (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
  ASSERT_EQ(finished.size(), 6u);
  // The long request (3) ends last; when it ends, the lines before it are already on disk and
  // the short one after it (4, 5) waits in the reorder buffer.
  EXPECT_EQ(finished.back(), 3u);
  EXPECT_EQ(on_disk_at_finish.back(), 3u);
  const auto lines = lines_of(slurp(path("out.jsonl")));
  ASSERT_EQ(lines.size(), 6u);
  const char* ids[] = {"s0", "s1", "bad", "long", "s4", "s5"};
  for (size_t i = 0; i < 6; ++i) {
    auto j = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(j["custom_id"], ids[i]);
    EXPECT_EQ(j.contains("error"), i == 2) << lines[i];
  }
  EXPECT_THAT(lines[2], HasSubstr("body.max_tokens"));
  EXPECT_EQ(nlohmann::json::parse(lines[3])["response"]["usage"]["completion_tokens"], 48);
  const auto& c = job.counts();
  EXPECT_EQ(c.lines, 6u);
  EXPECT_EQ(c.written, 6u);
  EXPECT_EQ(c.succeeded, 5u);
  EXPECT_EQ(c.failed, 1u);
  EXPECT_EQ(c.skipped, 0u);
}

// A crash leaves k complete lines and part of line k+1: --resume keeps the k lines, cuts the torn
// part, runs only the other requests, and ends with exactly the fresh run's bytes.
TEST_F(BatchJobTest, ResumeAfterACrashGivesTheFreshRunsBytes) {
  spit(path("in.jsonl"), kInput);
  { BatchJob(opts(false)).run(&llm()); }
  const std::string fresh = slurp(path("out.jsonl"));
  const auto lines = lines_of(fresh);
  ASSERT_EQ(lines.size(), 6u);
  for (size_t k = 0; k <= 6; ++k) {
    for (size_t torn : {size_t{0}, size_t{1}, size_t{17}}) {
      if (k == 6 && torn > 0) continue;
      std::string partial;
      for (size_t i = 0; i < k; ++i) partial += lines[i] + "\n";
      if (k < 6) partial += lines[k].substr(0, torn);
      spit(path("out.jsonl"), partial);
      BatchJob job(opts(true));
      EXPECT_EQ(job.pending(), 6 - k);
      size_t ran = 0;
      BatchHooks h;
      h.on_finish = [&](size_t i) {
        EXPECT_GE(i, k) << "request " << i << " was already in the output";
        ++ran;
      };
      job.run(job.pending() ? &llm() : nullptr, h);
      EXPECT_EQ(ran, 6 - k);
      EXPECT_EQ(job.counts().skipped, k);
      EXPECT_EQ(job.counts().written, 6 - k);
      EXPECT_EQ(slurp(path("out.jsonl")), fresh) << k << " kept lines, " << torn << " torn bytes";
      if (torn > 0) {
        EXPECT_THAT(job.notes(), ::testing::Contains(HasSubstr("torn last line")));
      }
    }
  }
  // A missing output starts from the first request.
  fs::remove(path("out.jsonl"));
  BatchJob job(opts(true));
  EXPECT_EQ(job.pending(), 6u);
  EXPECT_THAT(job.notes(), ::testing::Contains(HasSubstr("does not exist yet")));
  job.run(&llm());
  EXPECT_EQ(slurp(path("out.jsonl")), fresh);
}

// An output that is not this input's results is refused (naming the file and line) and kept.
TEST_F(BatchJobTest, ResumeRefusesAnOutputThatDoesNotMatchTheInput) {
  spit(path("in.jsonl"), kInput);
  const std::string good0 = "{\"custom_id\":\"s0\",\"response\":{\"text\":\"x\"}}\n";
  const std::string good1 = "{\"custom_id\":\"s1\",\"error\":{\"message\":\"m\"}}\n";
  struct Case {
    std::string out, expect;
  } cases[] = {
      {good1, "line 1: custom_id \"s1\" does not match request 1"},
      {good0 + "{\"custom_id\":\"bad\",\"error\":{\"message\":\"m\"}}\n", "line 2: custom_id \"bad\" does not match request 2"},
      {good0 + "garbage\n" + good1, "line 2: not a run-batch output line (not valid JSON)"},
      {good0 + "\n", "line 2: not a run-batch output line (empty line)"},
      {"[1,2]\n", "line 1: not a run-batch output line (expected a JSON object)"},
      {"{\"custom_id\":5,\"error\":{}}\n", "no string \"custom_id\""},
      {"{\"custom_id\":\"s0\"}\n", "exactly one of \"response\" or \"error\""},
      {"{\"custom_id\":\"s0\",\"response\":{},\"error\":{}}\n", "exactly one of"},
      {"{\"custom_id\":\"s0\",\"response\":\"text\"}\n", "exactly one of"},
  };
  for (const auto& c : cases) {
    spit(path("out.jsonl"), c.out);
    try {
      BatchJob job(opts(true));
      ADD_FAILURE() << "accepted: " << c.out;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(path("out.jsonl") + ": ")) << c.out;
      EXPECT_THAT(e.what(), HasSubstr(c.expect)) << c.out;
    }
    EXPECT_EQ(slurp(path("out.jsonl")), c.out) << "the refused file must be left as it was";
  }
  // More result lines than the input has requests.
  std::string seven;
  for (const char* id : {"s0", "s1", "bad", "long", "s4", "s5", "s6"})
    seven += std::string("{\"custom_id\":\"") + id + "\",\"response\":{}}\n";
  spit(path("out.jsonl"), seven);
  try {
    BatchJob job(opts(true));
    ADD_FAILURE() << "accepted 7 result lines for 6 requests";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("holds 7 result lines but " + path("in.jsonl") + " has only 6 requests"));
  }
}

// Duplicated custom_ids: a note names them; each line gets its own output line; --resume
// matches by position, so it resumes between two lines of the same id.
TEST_F(BatchJobTest, DuplicateCustomIdsKeepOneLineEachAndResumeByPosition) {
  spit(path("in.jsonl"),
       "{\"custom_id\":\"x\",\"body\":{\"prompt\":\"a\",\"max_tokens\":2}}\n"
       "{\"custom_id\":\"x\",\"body\":{\"prompt\":\"b\",\"max_tokens\":2}}\n"
       "{\"custom_id\":\"x\",\"body\":{\"prompt\":\"c\",\"max_tokens\":2}}\n");
  BatchJob job(opts(false));
  EXPECT_THAT(job.notes(), ::testing::Contains(HasSubstr("custom_id \"x\" is on input lines 1 and 2 (2 repeated line(s) in all)")));
  job.run(&llm());
  const std::string fresh = slurp(path("out.jsonl"));
  const auto lines = lines_of(fresh);
  ASSERT_EQ(lines.size(), 3u);
  spit(path("out.jsonl"), lines[0] + "\n" + lines[1].substr(0, 5));
  BatchJob again(opts(true));
  EXPECT_EQ(again.pending(), 2u);
  again.run(&llm());
  EXPECT_EQ(slurp(path("out.jsonl")), fresh);
}

TEST_F(BatchJobTest, OutputFailuresNameTheFile) {
  spit(path("in.jsonl"), kInput);
  BatchJobOptions o = opts(false);
  o.output = "/dev/full";
  BatchJob job(o);
  try {
    job.run(&llm());
    ADD_FAILURE() << "writing to /dev/full succeeded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/dev/full: write failed: No space left on device"));
  }
  EXPECT_EQ(job.counts().written, 0u);
  o.output = path("in.jsonl");
  EXPECT_THROW(BatchJob{o}, Error);
  EXPECT_EQ(slurp(path("in.jsonl")), kInput);
  o.output = path("no/such/dir/out.jsonl");
  try {
    BatchJob j(o);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(o.output + ": cannot open for writing: No such file or directory"));
  }
  o.output = "/dev/full";
  o.resume = true;
  try {
    BatchJob j(o);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/dev/full: --resume needs a regular file"));
  }
  EXPECT_THROW(deepinfer::api::write_file_checked("/dev/full", "{}\n"), Error);
}

TEST(OrderedLines, HandsOutEachLineOnceTheEarlierOnesAreIn) {
  std::vector<std::string> got;
  deepinfer::api::OrderedLines o(5, [&](size_t i, const std::string& s) { got.push_back(std::to_string(i) + s); });
  o.put(3, "d");
  o.put(1, "b");
  EXPECT_TRUE(got.empty());
  o.put(0, "a");
  EXPECT_EQ(got, (std::vector<std::string>{"0a", "1b"}));
  EXPECT_EQ(o.buffered(), 1u);
  o.put(2, "c");
  o.put(4, "e");
  EXPECT_EQ(got, (std::vector<std::string>{"0a", "1b", "2c", "3d", "4e"}));
  EXPECT_EQ(o.written(), 5u);
}

TEST(ReadResume, KeepsCompleteLinesAndDropsTheTornTail) {
  using deepinfer::api::read_resume_bytes;
  auto r = read_resume_bytes("", "f");
  EXPECT_TRUE(r.custom_ids.empty());
  EXPECT_EQ(r.keep_bytes, 0u);
  r = read_resume_bytes("{\"custom_id\":\"a\",\"response\":{}}\r\n{\"custom_id\":\"b\",\"error\":{\"message\":\"m\"}}\n{\"cust", "f");
  EXPECT_EQ(r.custom_ids, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.is_error, (std::vector<bool>{false, true}));
  EXPECT_EQ(r.torn_bytes, 6u);
  // A whole JSON object without its '\n' is torn too: a line is complete only with its newline.
  r = read_resume_bytes("{\"custom_id\":\"a\",\"response\":{}}", "f");
  EXPECT_TRUE(r.custom_ids.empty());
  EXPECT_EQ(r.torn_bytes, 31u);
  // Zero bytes a crash can leave after the last line.
  r = read_resume_bytes(std::string("{\"custom_id\":\"a\",\"response\":{}}\n") + std::string(40, '\0'), "f");
  EXPECT_EQ(r.custom_ids.size(), 1u);
  EXPECT_EQ(r.torn_bytes, 40u);
  EXPECT_THROW(read_resume_bytes(std::string(3, '\0') + "\n", "f"), Error);
  EXPECT_THROW(read_resume_bytes(std::string(100000, '[') + "\n", "f"), Error);
}

}  // namespace
