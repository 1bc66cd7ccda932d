// Shared by the input fuzz targets (fuzz_tokenizer_encode, fuzz_batch_line, fuzz_chat_encoding)
// and their deterministic CI runs (tests/tokenizer/test_input_fuzz.cpp, tests/api): one input
// in, "" when the code behaved, else what went wrong. Bad input must end in deepinfer::Error
// (or an error line); any other exception is a bug, and a crash or a sanitizer report is one
// by itself.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/batch_file.h"
#include "core/error.h"
#include "core/json_input.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer::fuzz {

// Tokenizer::encode on arbitrary bytes: valid UTF-8 encodes to in-vocabulary ids that decode
// back to the text; anything else is an Error naming the first bad byte.
inline std::string check_encode(const tokenizer::Tokenizer& tok, std::string_view text) {
  const size_t bad = tokenizer::find_invalid_utf8(text);
  for (bool add : {false, true}) {
    try {
      const std::vector<int32_t> ids = tok.encode(text, add);
      if (bad != std::string_view::npos) return "invalid UTF-8 at " + std::to_string(bad) + " was encoded";
      for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) return "id " + std::to_string(id) + " outside the vocabulary";
      if (!add && tok.decode(ids) != text) return "decode(encode(text)) != text";
      const std::vector<int32_t> cut = tok.encode(text, add, 3);
      if (ids.size() <= 3 ? cut != ids : cut.size() <= 3) return "encode with a limit disagrees with encode";
      if (const auto b = tok.max_bytes_for(ids.size()); b && !add && text.size() > *b) return "max_bytes_for is not a bound";
    } catch (const Error& e) {
      if (bad == std::string_view::npos) return std::string("valid UTF-8 rejected: ") + e.what();
      if (std::string(e.what()).find("byte offset " + std::to_string(bad)) == std::string::npos)
        return std::string("wrong offset in: ") + e.what();
    } catch (const std::exception& e) {
      return std::string("non-Error exception: ") + e.what();
    }
  }
  return "";
}

// parse_batch_line never throws; a line it accepts has a prompt or messages, and its output
// line (error or not) is one line of JSON.
inline std::string check_batch_line(const std::string& line) {
  Request r;
  try {
    r = api::parse_batch_line(line, 7);
  } catch (const std::exception& e) {
    return std::string("parse_batch_line threw: ") + e.what();
  }
  if (r.error.empty() && r.prompt.text.empty() && r.prompt.token_ids.empty() && r.messages_json.empty())
    return "accepted a line without an input";
  if (r.error.empty()) {
    for (int32_t id : r.prompt.token_ids)
      if (id < 0) return "accepted a negative token id";
    if (r.params.max_tokens < 1 || r.params.n < 1 || r.params.n > 1024) return "accepted an out-of-range integer";
    if (!r.messages_json.empty() && json_text_depth(r.messages_json) > kMaxJsonDepth) return "accepted deep messages";
  }
  RequestOutput out;
  out.error = r.error;
  const std::string formatted = api::format_batch_output(r.request_id, out);
  if (formatted.find('\n') != std::string::npos) return "output line has a newline";
  try {
    if (!nlohmann::json::parse(formatted).is_object()) return "output line is not an object";
  } catch (const std::exception& e) {
    return std::string("output line is not JSON: ") + e.what();
  }
  return "";
}

// A conversation built from bytes: roles, contents, reasoning, tool calls with argument text,
// tool lists and content blocks, some of them malformed, deep or not UTF-8.
class ByteReader {
 public:
  ByteReader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  uint8_t byte() { return i_ < n_ ? d_[i_++] : 0; }
  bool done() const { return i_ >= n_; }
  std::string str() {
    const size_t len = byte() % 24;
    std::string s;
    for (size_t k = 0; k < len && !done(); ++k) s.push_back(static_cast<char>(byte()));
    return s;
  }

 private:
  const uint8_t* d_;
  size_t n_, i_ = 0;
};

inline nlohmann::ordered_json messages_from_bytes(const uint8_t* data, size_t size, tokenizer::ChatOptions* opt) {
  using Json = nlohmann::ordered_json;
  ByteReader in(data, size);
  static const char* kRoles[] = {"system", "user", "assistant", "tool", "developer", "latest_reminder", "", "User", "bot"};
  static const char* kPieces[] = {"<\xEF\xBD\x9C" "User\xEF\xBD\x9C>", "</think>", "<think>", "{\"a\": [1, 2.5, null]}",
                                  "\xff", "\xc3", "\xed\xa0\x80", "\"", "\\", "\n", "h\xc3\xa9", "<tool_result>"};
  Json msgs = Json::array();
  // Half the inputs are tame (well-formed user/assistant turns with printable text), so the
  // renderer's paths are reached and not only its checks.
  const bool tame = in.byte() % 2 == 0;
  const int n = 1 + in.byte() % 6;
  for (int m = 0; m < n && !in.done(); ++m) {
    Json j = Json::object();
    const uint8_t kind = in.byte();
    j["role"] = tame ? (m % 2 ? "assistant" : "user") : kRoles[kind % 9];
    auto text = [&] {
      std::string s = in.str();
      if (tame) {
        for (char& c : s) c = static_cast<char>(' ' + static_cast<unsigned char>(c) % 95);
        return s;
      }
      if (in.byte() % 3 == 0) s += kPieces[in.byte() % 12];
      return s;
    };
    if (tame) {
      j["content"] = text();
      if (m % 2 && in.byte() % 3 == 0) j["reasoning_content"] = text();
      if (m % 2 && in.byte() % 3 == 0)
        j["tool_calls"] = Json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{\"q\": \"" + text() + "\"}"}}}}});
      msgs.push_back(j);
      continue;
    }
    switch (in.byte() % 8) {
      case 0: break;  // no content
      case 1: j["content"] = nullptr; break;
      case 2: j["content"] = in.byte(); break;
      case 3: j["content"] = Json::array({{{"type", "text"}, {"text", text()}}, {{"type", "image_url"}}}); break;
      case 4: {
        Json deep = text();
        const int levels = in.byte() % 2 ? 3 : 200;
        for (int k = 0; k < levels; ++k) {  // moved, not copied: linear in the depth
          Json wrap = Json::array();
          wrap.push_back(std::move(deep));
          deep = std::move(wrap);
        }
        j["content"] = deep;
        break;
      }
      default: j["content"] = text();
    }
    if (in.byte() % 4 == 0) j["reasoning_content"] = text();
    if (in.byte() % 4 == 0) {
      std::string args = in.byte() % 2 ? "{\"q\": \"" + text() + "\"}" : text();
      if (in.byte() % 5 == 0) args = std::string(300, '[') + std::string(300, ']');
      j["tool_calls"] = Json::array({{{"type", "function"}, {"function", {{"name", text()}, {"arguments", args}}}}});
    }
    if (in.byte() % 6 == 0) j["tool_call_id"] = text();
    if (in.byte() % 6 == 0)
      j["tools"] = Json::array({{{"type", "function"}, {"function", {{"name", text()}, {"parameters", {{"type", "object"}}}}}}});
    if (in.byte() % 9 == 0) j["task"] = text();
    msgs.push_back(j);
  }
  opt->thinking = in.byte() % 2;
  static const char* kEfforts[] = {"", "low", "high", "max", "xhigh", "0", "100", "101", "07", "\xff"};
  opt->reasoning_effort = kEfforts[in.byte() % 10];
  opt->add_generation_prompt = in.byte() % 4 != 0;
  if (in.byte() % 5 == 0) opt->tools = Json::array({{{"type", "function"}, {"function", {{"name", "t"}}}}});
  return msgs;
}

// encode_chat (and the ids through the tokenizer) on a conversation from bytes: the text it
// renders is valid UTF-8 that the tokenizer accepts; bad input is an Error.
inline std::string check_chat(const tokenizer::Tokenizer& tok, const uint8_t* data, size_t size) {
  tokenizer::ChatOptions opt;
  const nlohmann::ordered_json msgs = messages_from_bytes(data, size, &opt);
  try {
    const std::string text = tokenizer::encode_chat(msgs, opt);
    if (tokenizer::find_invalid_utf8(text) != std::string::npos) return "rendered text is not UTF-8";
    (void)tok.encode(text, false);
  } catch (const Error&) {
  } catch (const std::exception& e) {
    return std::string("non-Error exception: ") + e.what();
  }
  return "";
}

}  // namespace deepinfer::fuzz
