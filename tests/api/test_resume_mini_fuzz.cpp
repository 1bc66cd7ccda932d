// A short deterministic fuzz run of the --resume reader (api::read_resume_bytes) for CI: a
// fixed-seed generator mutates real run-batch output files (byte flips, cuts, splices, inserted
// newlines and JSON fragments). Every input must either be read (keeping whole lines only, a
// torn tail counted and dropped) or be refused with an Error naming the file and line; never a
// crash or another exception. The libFuzzer target is tests/fuzz/fuzz_resume.cpp.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "api/batch_output.h"
#include "core/error.h"

namespace {

const std::vector<std::string> kSeeds = {
    "{\"custom_id\":\"r0\",\"response\":{\"text\":\"Hi\",\"token_ids\":[1,2],\"finish_reason\":\"length\",\"usage\":"
    "{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5},\"choices\":[{\"index\":0,\"text\":\"Hi\"}]}}\n"
    "{\"custom_id\":\"line 2\",\"error\":{\"message\":\"malformed JSON on line 2\"}}\n"
    "{\"custom_id\":\"\\u00e9\\n\",\"response\":{\"text\":\"\\ufffd\"}}\n",
    "{\"custom_id\":\"a\",\"error\":{\"message\":\"body.max_tokens: expected an integer\"}}\n{\"custom_id\":\"b\",\"resp",
    "",
};
const std::string kFragments[] = {"\n", "\r\n", "{", "}", "\"", "\\", "\\u", "\"custom_id\":", "\"response\":{}", "\"error\":{}",
                            "[", "]", ",", "null", "1e999", "\xff", "\xc3", std::string("\0", 1), "  "};

std::string mutate(std::string s, std::mt19937_64& rng) {
  const int n = 1 + static_cast<int>(rng() % 6);
  for (int k = 0; k < n; ++k) {
    const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 6) {
      case 0:
        if (!s.empty() && at < s.size()) s[at] = static_cast<char>(rng() & 0xff);
        break;
      case 1: s.insert(at, 1, static_cast<char>(rng() & 0xff)); break;
      case 2: s.erase(at, rng() % 16); break;
      case 3: s.resize(at); break;
      case 4: s.insert(at, kFragments[rng() % (sizeof(kFragments) / sizeof(kFragments[0]))]); break;
      default: {
        const size_t from = s.empty() ? 0 : rng() % s.size();
        s.insert(at, s.substr(from, rng() % 40));
      }
    }
  }
  return s;
}

TEST(ResumeMiniFuzz, NeverCrashesAndKeepsOnlyWholeLines) {
  std::mt19937_64 rng(20260);
  int read = 0, refused = 0;
  for (int it = 0; it < 4000; ++it) {
    const std::string in = mutate(kSeeds[static_cast<size_t>(it) % kSeeds.size()], rng);
    try {
      const auto r = deepinfer::api::read_resume_bytes(in, "out.jsonl");
      ++read;
      ASSERT_LE(r.keep_bytes, in.size());
      ASSERT_EQ(r.keep_bytes + r.torn_bytes, in.size());
      ASSERT_TRUE(r.keep_bytes == 0 || in[r.keep_bytes - 1] == '\n');
      ASSERT_EQ(in.find('\n', r.keep_bytes), std::string::npos) << "a complete line was dropped";
      size_t newlines = 0;
      for (size_t i = 0; i < r.keep_bytes; ++i) newlines += in[i] == '\n' ? 1 : 0;
      ASSERT_EQ(r.custom_ids.size(), newlines);
      ASSERT_EQ(r.is_error.size(), newlines);
    } catch (const deepinfer::Error& e) {
      ++refused;
      ASSERT_EQ(std::string(e.what()).rfind("out.jsonl: line ", 0), 0u) << e.what();
    }
  }
  // Both outcomes are exercised.
  EXPECT_GT(read, 100);
  EXPECT_GT(refused, 100);
}

}  // namespace
