// Tokenizer: the reference tokenizer's ids on the fixture's golden texts, round trips, the
// incremental detokenizer, and bad tokenizer.json input.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/npy.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using namespace deepinfer;
using tokenizer::Tokenizer;

namespace {
std::string data(const std::string& rel) { return std::string(DEEPINFER_TEST_DATA) + "/tokenizer/" + rel; }
nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}
bool valid_utf8(const std::string& s) { return tokenizer::utf8_lossy(s) == s; }
}  // namespace

TEST(Tokenizer, FixtureGoldenIds) {
  auto tok = Tokenizer::load(data("fixture/tokenizer.json"));
  EXPECT_EQ(tok->vocab_size(), 1024);
  auto g = read_json(data("fixture/tokenizer_golden.json"));
  ASSERT_EQ(g["texts"].size(), g["ids"].size());
  for (size_t i = 0; i < g["texts"].size(); ++i) {
    const std::string text = g["texts"][i].get<std::string>();
    std::vector<int32_t> expect = g["ids"][i].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(text), expect) << "text " << i << ": " << text;
    EXPECT_EQ(tok->decode(expect), text) << "text " << i;
  }
}

TEST(Tokenizer, SpecialTokensAreMatchedFirst) {
  auto tok = Tokenizer::load(data("fixture/tokenizer.json"));
  const std::string bos = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
  ASSERT_TRUE(tok->bos_id().has_value());
  EXPECT_EQ(*tok->bos_id(), 0);
  EXPECT_EQ(*tok->eos_id(), 1);
  auto ids = tok->encode("ab" + bos + "cd" + bos);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 0), 2);
  EXPECT_EQ(tok->decode(ids), "ab" + bos + "cd" + bos);
  EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/true), "abcd");
  EXPECT_TRUE(tok->is_special(0));
  EXPECT_FALSE(tok->is_special(5));
  // A near miss is ordinary text.
  auto near = tok->encode("<\xEF\xBD\x9C" "begin of sentence\xEF\xBD\x9C>");
  EXPECT_EQ(std::count(near.begin(), near.end(), 0), 0);
}

TEST(Tokenizer, IncrementalDetokenizerNeverSplitsCharacters) {
  auto tok = Tokenizer::load(data("fixture/tokenizer.json"));
  const std::string text = "Hello \xE4\xBA\xBA\xE5\xB7\xA5 caf\xC3\xA9 \xF0\x9F\x98\x80\xF0\x9F\x9A\x80 \xD0\x9F\xD1\x80\xD0\xB8 x";
  auto ids = tok->encode(text);
  tokenizer::IncrementalDetokenizer d(*tok);
  std::string out;
  for (int32_t id : ids) {
    std::string piece = d.push(id);
    EXPECT_TRUE(valid_utf8(piece));
    out += piece;
    EXPECT_EQ(d.offset(), out.size());
  }
  out += d.flush();
  EXPECT_EQ(out, text);
}

TEST(Tokenizer, InvalidUtf8DecodesLikeFromUtf8Lossy) {
  // Maximal subparts: E2 82 followed by 'A' is one replacement; a lone continuation byte is one.
  EXPECT_EQ(tokenizer::utf8_lossy("\xE2\x82" "A"), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(tokenizer::utf8_lossy("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(tokenizer::utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(tokenizer::utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");
  EXPECT_EQ(tokenizer::complete_utf8_prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(tokenizer::complete_utf8_prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(tokenizer::complete_utf8_prefix("ab\xC0"), 3u);  // can never complete
}

TEST(Tokenizer, BadTokenizerJson) {
  auto err = [](const std::string& text) {
    try {
      Tokenizer::from_json_text(text, "bad.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(err("{").find("invalid JSON"), std::string::npos);
  EXPECT_NE(err("{}").find("model"), std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "WordPiece", "vocab": {}}})").find("WordPiece"), std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})").find("merge 0"), std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated"}})")
                .find("invalid regex"),
            std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": {"type": "Whitespace"}})").find("Whitespace"), std::string::npos);
  EXPECT_THROW(Tokenizer::load("/nonexistent/tokenizer.json"), Error);
}

// The real DeepSeek tokenizer (vocabulary 129,280) on a 1.3 MB mixed corpus: ids identical to
// Hugging Face `tokenizers` (tools/make_tokenizer_golden.py made the expected ids) and
// decode(encode(x)) == x for every document.
TEST(Tokenizer, DeepSeekCorpusMatchesHuggingFace) {
  auto tok = Tokenizer::load(data("deepseek/tokenizer.json"));
  EXPECT_EQ(tok->vocab_size(), 129280);
  std::vector<int64_t> ids = core::read_npy_ints(data("deepseek/ids.npy"));
  std::vector<int64_t> off = core::read_npy_ints(data("deepseek/offsets.npy"));
  std::ifstream corpus(data("deepseek/corpus.jsonl"));
  size_t doc = 0, bytes = 0, mismatched = 0;
  for (std::string line; std::getline(corpus, line); ++doc) {
    ASSERT_LT(doc + 1, off.size());
    const std::string text = nlohmann::json::parse(line).get<std::string>();
    bytes += text.size();
    std::vector<int32_t> expect(ids.begin() + off[doc], ids.begin() + off[doc + 1]);
    std::vector<int32_t> got = tok->encode(text);
    if (got != expect && ++mismatched <= 5) {
      size_t k = 0;
      while (k < got.size() && k < expect.size() && got[k] == expect[k]) ++k;
      ADD_FAILURE() << "doc " << doc << ": first difference at id " << k << " of " << expect.size() << " (got "
                    << (k < got.size() ? got[k] : -1) << ", expected " << (k < expect.size() ? expect[k] : -1) << ")";
    }
    EXPECT_EQ(tok->decode(got), text) << "doc " << doc;
  }
  EXPECT_EQ(doc + 1, off.size());
  EXPECT_EQ(mismatched, 0u);
  EXPECT_GE(bytes, size_t{1} << 20);
}

TEST(Tokenizer, DeepSeekSpecialTokensWithAddSpecial) {
  auto tok = Tokenizer::load(data("deepseek/tokenizer.json"));
  std::vector<int64_t> ids = core::read_npy_ints(data("deepseek/ids.npy"));
  std::vector<int64_t> off = core::read_npy_ints(data("deepseek/offsets.npy"));
  std::vector<std::string> docs;
  std::ifstream corpus(data("deepseek/corpus.jsonl"));
  for (std::string line; std::getline(corpus, line);) docs.push_back(nlohmann::json::parse(line).get<std::string>());
  std::ifstream special(data("deepseek/special.jsonl"));
  size_t n = 0;
  for (std::string line; std::getline(special, line); ++n) {
    auto j = nlohmann::json::parse(line);
    const size_t d = j["doc"].get<size_t>();
    std::vector<int32_t> plain(ids.begin() + off[d], ids.begin() + off[d + 1]);
    auto with = tok->encode(docs[d], /*add_special_tokens=*/true);
    if (j["same_as_plain"].get<bool>()) {
      EXPECT_EQ(with, plain) << "doc " << d;
    }
    EXPECT_EQ(static_cast<int64_t>(with.size()), j["n_ids"].get<int64_t>()) << "doc " << d;
  }
  EXPECT_GT(n, 100u);
}

TEST(Tokenizer, ChatIdsUseSpecialTokens) {
  auto tok = Tokenizer::load(data("deepseek/tokenizer.json"));
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  msgs.push_back({{"role", "user"}, {"content", "Hi"}});
  auto ids = tokenizer::encode_chat_ids(*tok, msgs);
  const std::string text = tokenizer::encode_chat(msgs);
  EXPECT_EQ(ids, tok->encode(text));
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], *tok->bos_id());  // BOS is a special token, matched as one id
  EXPECT_EQ(tok->decode(ids), text);
}

// Ids in tokenizer.json are checked before anything is sized or indexed by them: negative,
// huge, duplicated and conflicting ids are Errors naming the file and the entry.
TEST(Tokenizer, BadIdsNameTheEntry) {
  auto err = [](const std::string& text) {
    try {
      Tokenizer::from_json_text(text, "ids.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto with_vocab = [](const std::string& vocab, const std::string& rest = "") {
    return R"({"model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": []})" + rest + "}";
  };
  struct Case {
    std::string text, expect;
  } cases[] = {
      {with_vocab(R"({"a": -1})"), "ids.json: model.vocab['a']: id -1 is out of range [0, 65537)"},
      {with_vocab(R"({"a": 2147483647})"), "model.vocab['a']: id 2147483647 is out of range"},
      {with_vocab(R"({"a": 4294967296})"), "model.vocab['a']: id 4294967296 is out of range"},
      {with_vocab(R"({"a": 18446744073709551615})"), "model.vocab['a']: id 18446744073709551615 is out of range"},
      {with_vocab(R"({"a": 1.5})"), "model.vocab['a']: expected an integer id, got 1.5"},
      {with_vocab(R"({"a": 0, "b": 0})"), "model.vocab['b']: id 0 is already taken by 'a'"},
      {with_vocab(R"({"a": 0})", R"(, "added_tokens": [{"id": -5, "content": "<x>"}])"),
       "ids.json: added_tokens[0].id: -5 is out of range"},
      {with_vocab(R"({"a": 0})", R"(, "added_tokens": [{"id": 1000000000, "content": "<x>"}])"),
       "added_tokens[0].id: 1000000000 is out of range [0, 65538)"},
      {with_vocab(R"({"a": 0})", R"(, "added_tokens": [{"id": "1", "content": "<x>"}])"), "added_tokens[0].id: expected an integer id"},
      {with_vocab(R"({"a": 0})", R"(, "added_tokens": [{"id": 1}])"), "added_tokens[0].content: expected a string"},
      {with_vocab(R"({"a": 0})", R"(, "added_tokens": [7])"), "added_tokens[0]: expected an object"},
      {with_vocab(R"({"a": 0})", R"(, "added_tokens": {"id": 1})"), "added_tokens: expected a list"},
      {with_vocab(R"({"a": 0})", R"(, "added_tokens": [{"id": 1, "content": "<x>", "special": "yes"}])"),
       "added_tokens[0].special: expected true or false"},
      {with_vocab(R"({"a": 0})", R"(, "added_tokens": [{"id": 1, "content": "<x>"}, {"id": 1, "content": "<y>"}])"),
       "added_tokens[1]: id 1 is already used by added token '<x>'"},
      {with_vocab(R"({"a": 0})", R"(, "added_tokens": [{"id": 1, "content": "<x>"}, {"id": 2, "content": "<x>"}])"),
       "added_tokens[1]: '<x>' is listed twice (also added_tokens[0])"},
      {with_vocab(R"({"a": 0})", R"(, "added_tokens": [{"id": 0, "content": "<x>"}])"),
       "added_tokens[0]: id 0 ('<x>') is model.vocab's 'a' as well"},
      {with_vocab(R"({"a": 0, "<x>": 1})", R"(, "added_tokens": [{"id": 2, "content": "<x>"}])"),
       "added_tokens[0]: '<x>' has id 2 but model.vocab gives it id 1"},
      {with_vocab(R"({"a": 0})", R"(, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [99999]}}})"),
       "post_processor special token '<s>': id 99999 is not a token id in [0, 1)"},
      {with_vocab(R"({"a": 0})", R"(, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [-1]}}})"),
       "id -1 is not a token id"},
  };
  // Wrong types name the member instead of passing a JSON library message through.
  const Case shapes[] = {
      {R"({"model": null})", "ids.json: model: expected an object"},
      {R"({"model": {"type": 5, "vocab": {}}})", "model.type: expected a string"},
      {R"({"model": {"vocab": {}, "merges": {"a": 1}}})", "model.merges: expected a list"},
      {R"({"model": {"vocab": {}, "unk_token": 5}})", "model.unk_token: expected a string"},
      {with_vocab("{}", R"(, "decoder": "ByteLevel")"), "decoder: expected an object"},
      {with_vocab("{}", R"(, "decoder": {"type": "Sequence", "decoders": 3})"), "decoder.decoders: expected a list"},
      {with_vocab("{}", R"(, "post_processor": [1])"), "post_processor: expected an object"},
      {with_vocab("{}", R"(, "post_processor": {"type": "Sequence", "processors": 5})"), "post_processor.processors: expected a list"},
      {with_vocab("{}", R"(, "post_processor": {"type": "TemplateProcessing", "single": 5})"), "(TemplateProcessing).single: expected a list"},
      {with_vocab("{}", R"(, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}], "special_tokens": {"<s>": {"ids": 4}}})"),
       "special token '<s>': expected an object with a list 'ids'"},
  };
  for (const Case& c : cases) EXPECT_NE(err(c.text).find(c.expect), std::string::npos) << c.text << "\n -> " << err(c.text);
  for (const Case& c : shapes) EXPECT_NE(err(c.text).find(c.expect), std::string::npos) << c.text << "\n -> " << err(c.text);
  // An added token that repeats its vocabulary entry (as real tokenizers do), and holes in the
  // id space, load.
  auto t = Tokenizer::from_json_text(with_vocab(R"({"a": 0, "<x>": 1, "b": 5})", R"(, "added_tokens": [{"id": 1, "content": "<x>", "special": true}, {"id": 9, "content": "<y>"}])"), "ok.json");
  EXPECT_EQ(t->vocab_size(), 10);
  EXPECT_EQ(t->id_to_token(9), "<y>");
  EXPECT_EQ(t->id_to_token(7), "");
}
