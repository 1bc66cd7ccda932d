#include "api/batch_file.h"

#include <cmath>
#include <istream>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_input.h"
#include "tokenizer/utf8.h"

namespace deepinfer::api {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& what) { throw Error("body." + field + ": " + what); }

// A field that is present and not null (null means "not given", as in OpenAI's API).
bool has(const json& b, const char* k) { return b.contains(k) && !b[k].is_null(); }

int64_t get_int(const json& b, const char* k, int64_t lo, int64_t hi) {
  const json& v = b.at(k);
  if (!v.is_number_integer()) bad(k, "expected an integer, got " + v.dump().substr(0, 80));
  const std::string range = "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got ";
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) bad(k, range + v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad(k, range + v.dump());
  return x;
}
float get_float(const json& b, const char* k) {
  const json& v = b.at(k);
  if (!v.is_number()) bad(k, "expected a number, got " + v.dump().substr(0, 80));
  const double x = v.get<double>();
  if (!std::isfinite(x) || std::fabs(x) > static_cast<double>(std::numeric_limits<float>::max()))
    bad(k, "out of range, got " + v.dump());
  return static_cast<float>(x);
}
bool get_bool(const json& b, const char* k) {
  const json& v = b.at(k);
  if (!v.is_boolean()) bad(k, "expected true or false, got " + v.dump().substr(0, 80));
  return v.get<bool>();
}
std::vector<int32_t> get_ids(const json& b, const char* k) {
  const json& v = b.at(k);
  if (!v.is_array()) bad(k, "expected a list of token ids, got " + v.dump().substr(0, 80));
  std::vector<int32_t> ids;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string f = std::string(k) + "[" + std::to_string(i) + "]";
    if (!v[i].is_number_integer()) bad(f, "expected an integer token id, got " + v[i].dump().substr(0, 80));
    if (v[i].is_number_unsigned() && v[i].get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
      bad(f, "token id " + v[i].dump() + " is out of range");
    const int64_t x = v[i].get<int64_t>();
    if (x < 0 || x > std::numeric_limits<int32_t>::max()) bad(f, "token id " + v[i].dump() + " is out of range (ids are >= 0)");
    ids.push_back(static_cast<int32_t>(x));
  }
  return ids;
}

// A schema given as an object/boolean (dumped, keys in their original order) or as JSON text.
std::string schema_text(const nlohmann::ordered_json& v, const std::string& field) {
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (v.is_string()) return v.get<std::string>();
  bad(field, "expected a JSON schema (an object or its JSON text), got " + v.dump().substr(0, 80));
}
std::string string_field(const nlohmann::ordered_json& v, const std::string& field) {
  if (!v.is_string() || v.get<std::string>().empty()) bad(field, "expected a non-empty string");
  return v.get<std::string>();
}

// OpenAI's response_format, vLLM's structured_outputs and guided_json / guided_regex /
// guided_grammar (at most one of them). `b` is read with its keys in file order, so a
// schema's properties are generated in the order the user wrote them.
void parse_structured_output(const nlohmann::ordered_json& b, SamplingParams& s) {
  using json = nlohmann::ordered_json;
  using Kind = StructuredOutput::Kind;
  int given = 0;
  for (const char* k : {"response_format", "structured_outputs", "guided_json", "guided_regex", "guided_grammar"})
    given += b.contains(k) && !b[k].is_null() ? 1 : 0;
  if (given == 0) return;
  if (given > 1) throw Error("body: give at most one of response_format, structured_outputs, guided_json, guided_regex, guided_grammar");
  StructuredOutput so;
  if (b.contains("response_format") && !b["response_format"].is_null()) {
    const json& rf = b["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      bad("response_format", "expected {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}");
    const std::string type = rf["type"].get<std::string>();
    if (type == "text") return;
    if (type == "json_object") {
      so.kind = Kind::kJsonObject;
    } else if (type == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
        bad("response_format.json_schema", "expected an object {\"name\", \"schema\"}");
      const json& js = rf["json_schema"];
      if (js.contains("name") && !js["name"].is_string()) bad("response_format.json_schema.name", "expected a string");
      if (js.contains("strict") && !js["strict"].is_boolean() && !js["strict"].is_null())
        bad("response_format.json_schema.strict", "expected true or false");
      so.source = js.contains("schema") ? schema_text(js["schema"], "response_format.json_schema.schema") : "{}";
    } else {
      bad("response_format.type", "expected text, json_object or json_schema, got \"" + type + "\"");
    }
  } else if (b.contains("structured_outputs") && !b["structured_outputs"].is_null()) {
    const json& so_j = b["structured_outputs"];
    if (!so_j.is_object()) bad("structured_outputs", "expected an object");
    int kinds = 0;
    for (auto it = so_j.begin(); it != so_j.end(); ++it) {
      const std::string k = it.key();
      const std::string f = "structured_outputs." + k;
      if (k == "json") {
        so.kind = Kind::kJsonSchema, so.source = schema_text(it.value(), f), ++kinds;
      } else if (k == "regex") {
        so.kind = Kind::kRegex, so.source = string_field(it.value(), f), ++kinds;
      } else if (k == "grammar") {
        so.kind = Kind::kGrammar, so.source = string_field(it.value(), f), ++kinds;
      } else if (k == "json_object") {
        if (!it.value().is_boolean()) bad(f, "expected true or false");
        if (it.value().get<bool>()) so.kind = Kind::kJsonObject, ++kinds;
      } else if (k == "disable_any_whitespace") {
        if (!it.value().is_boolean()) bad(f, "expected true or false");
        so.any_whitespace = !it.value().get<bool>();
      } else {
        bad(f, "unknown field (expected json, regex, grammar, json_object or disable_any_whitespace)");
      }
    }
    if (kinds != 1) bad("structured_outputs", "give exactly one of json, regex, grammar, json_object");
  } else if (b.contains("guided_json") && !b["guided_json"].is_null()) {
    so.kind = Kind::kJsonSchema, so.source = schema_text(b["guided_json"], "guided_json");
  } else if (b.contains("guided_regex") && !b["guided_regex"].is_null()) {
    so.kind = Kind::kRegex, so.source = string_field(b["guided_regex"], "guided_regex");
  } else {
    so.kind = Kind::kGrammar, so.source = string_field(b["guided_grammar"], "guided_grammar");
  }
  s.structured_output = so;
}

void parse_body(const json& b, Request& r) {
  if (!b.is_object()) throw Error("body: expected an object");
  static const char* kKnown[] = {"model", "prompt", "prompt_token_ids", "messages", "max_tokens", "max_completion_tokens",
                                 "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "ignore_eos",
                                 "logprobs", "top_logprobs", "n", "presence_penalty", "frequency_penalty",
                                 "repetition_penalty", "min_tokens", "skip_special_tokens", "thinking", "reasoning_effort",
                                 "chat_template_kwargs", "stream", "user", "response_format", "structured_outputs",
                                 "guided_json", "guided_regex", "guided_grammar"};
  for (auto it = b.begin(); it != b.end(); ++it) {
    bool known = false;
    for (const char* k : kKnown) known = known || it.key() == k;
    if (!known) bad(it.key(), "unknown field");
  }
  const int inputs = (b.contains("prompt") ? 1 : 0) + (b.contains("prompt_token_ids") ? 1 : 0) + (b.contains("messages") ? 1 : 0);
  if (inputs != 1) throw Error("body: give exactly one of prompt, prompt_token_ids or messages");
  if (b.contains("prompt")) {
    const json& p = b["prompt"];
    if (p.is_string()) r.prompt.text = p.get<std::string>();
    else if (p.is_array()) r.prompt.token_ids = get_ids(b, "prompt");
    else bad("prompt", "expected a string or a list of token ids");
    if (p.is_string() && r.prompt.text.empty()) bad("prompt", "is empty");
  } else if (b.contains("prompt_token_ids")) {
    r.prompt.token_ids = get_ids(b, "prompt_token_ids");
    if (r.prompt.token_ids.empty()) bad("prompt_token_ids", "is empty");
  } else {
    if (!b["messages"].is_array() || b["messages"].empty()) bad("messages", "expected a non-empty list of messages");
    r.messages_json = b["messages"].dump();
  }
  SamplingParams& s = r.params;
  const int64_t kMax = std::numeric_limits<int32_t>::max();
  if (has(b, "max_tokens")) s.max_tokens = static_cast<int>(get_int(b, "max_tokens", 1, kMax));
  if (has(b, "max_completion_tokens")) s.max_tokens = static_cast<int>(get_int(b, "max_completion_tokens", 1, kMax));
  if (has(b, "min_tokens")) s.min_tokens = static_cast<int>(get_int(b, "min_tokens", 0, kMax));
  if (has(b, "n")) s.n = static_cast<int>(get_int(b, "n", 1, 1024));
  if (has(b, "top_k")) s.top_k = static_cast<int>(get_int(b, "top_k", -1, kMax));
  if (has(b, "temperature")) s.temperature = get_float(b, "temperature");
  if (has(b, "top_p")) s.top_p = get_float(b, "top_p");
  if (has(b, "min_p")) s.min_p = get_float(b, "min_p");
  if (has(b, "presence_penalty")) s.presence_penalty = get_float(b, "presence_penalty");
  if (has(b, "frequency_penalty")) s.frequency_penalty = get_float(b, "frequency_penalty");
  if (has(b, "repetition_penalty")) s.repetition_penalty = get_float(b, "repetition_penalty");
  if (has(b, "seed")) {
    const json& v = b["seed"];
    if (!v.is_number_integer()) bad("seed", "expected an integer, got " + v.dump().substr(0, 80));
    if (!v.is_number_unsigned() && v.get<int64_t>() < 0) bad("seed", "must be in [0, 18446744073709551615], got " + v.dump());
    s.seed = v.get<uint64_t>();
  }
  if (has(b, "ignore_eos")) s.ignore_eos = get_bool(b, "ignore_eos");
  if (has(b, "skip_special_tokens")) s.skip_special_tokens = get_bool(b, "skip_special_tokens");
  if (has(b, "stop")) {
    const json& v = b["stop"];
    if (v.is_string()) s.stop = {v.get<std::string>()};
    else if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string()) bad("stop[" + std::to_string(i) + "]", "expected a string, got " + v[i].dump().substr(0, 80));
        s.stop.push_back(v[i].get<std::string>());
      }
    } else {
      bad("stop", "expected a string or a list of strings, got " + v.dump().substr(0, 80));
    }
  }
  if (has(b, "stop_token_ids")) s.stop_token_ids = get_ids(b, "stop_token_ids");
  // Completions-style logprobs (an int) or chat-style logprobs (bool) + top_logprobs (int).
  const bool chat_logprobs = has(b, "logprobs") && b["logprobs"].is_boolean() && b["logprobs"].get<bool>();
  const int top_logprobs = has(b, "top_logprobs") ? static_cast<int>(get_int(b, "top_logprobs", 0, 20)) : 0;
  if (has(b, "top_logprobs") && !chat_logprobs) bad("top_logprobs", "needs \"logprobs\": true");
  if (has(b, "logprobs")) {
    const json& v = b["logprobs"];
    if (v.is_boolean()) {
      if (v.get<bool>()) s.logprobs = top_logprobs;
    } else if (v.is_number_integer()) {
      s.logprobs = static_cast<int>(get_int(b, "logprobs", 0, 20));
    } else {
      bad("logprobs", "expected an integer or a boolean, got " + v.dump().substr(0, 80));
    }
  }
  if (has(b, "thinking")) r.chat_options.thinking = get_bool(b, "thinking");
  if (has(b, "chat_template_kwargs")) {
    const json& k = b["chat_template_kwargs"];
    if (!k.is_object()) bad("chat_template_kwargs", "expected an object, got " + k.dump().substr(0, 80));
    if (has(k, "thinking")) {
      if (!k["thinking"].is_boolean()) bad("chat_template_kwargs.thinking", "expected true or false, got " + k["thinking"].dump().substr(0, 80));
      r.chat_options.thinking = k["thinking"].get<bool>();
    }
  }
  if (has(b, "reasoning_effort")) {
    if (!b["reasoning_effort"].is_string()) bad("reasoning_effort", "expected a string, got " + b["reasoning_effort"].dump().substr(0, 80));
    r.chat_options.reasoning_effort = b["reasoning_effort"].get<std::string>();
  }
  for (const char* k : {"model", "user"})
    if (has(b, k) && !b[k].is_string()) bad(k, "expected a string, got " + b[k].dump().substr(0, 80));
  if (has(b, "stream")) {
    if (!b["stream"].is_boolean()) bad("stream", "expected true or false, got " + b["stream"].dump().substr(0, 80));
    if (b["stream"].get<bool>()) bad("stream", "streaming is not available in batch files");
  }
}

}  // namespace

// Reads one line of at most `limit` bytes (the '\n' dropped). A longer line is consumed up to
// its end without being kept: *too_long is set and *length holds its size.
bool read_line_bounded(std::istream& in, std::string& line, size_t limit, bool* too_long, size_t* length) {
  line.clear();
  *too_long = false;
  *length = 0;
  std::streambuf* sb = in.rdbuf();
  bool any = false;
  for (int c = sb->sbumpc(); c != std::char_traits<char>::eof(); c = sb->sbumpc()) {
    any = true;
    if (c == '\n') return true;
    ++*length;
    if (*length > limit) {
      if (!*too_long) line.clear(), line.shrink_to_fit();
      *too_long = true;
    } else {
      line.push_back(static_cast<char>(c));
    }
  }
  return any;
}

Request parse_batch_line(const std::string& line, size_t line_no) {
  Request r;
  const std::string where = "line " + std::to_string(line_no);
  r.request_id = where;
  if (line.size() > kMaxBatchLineBytes) {
    r.error = where + ": " + std::to_string(line.size()) + " bytes, more than the limit of " +
              std::to_string(kMaxBatchLineBytes) + " bytes per line";
    return r;
  }
  if (const size_t at = tokenizer::find_invalid_utf8(line); at != std::string::npos) {
    r.error = where + ": invalid UTF-8 at byte offset " + std::to_string(at);
    return r;
  }
  // nlohmann parses iteratively, but dump() and copies recurse once per level.
  if (json_text_depth(line) > kMaxJsonDepth) {
    r.error = where + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return r;
  }
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    r.error = "malformed JSON on " + where + ": " + e.what();
    return r;
  }
  if (!j.is_object()) {
    r.error = where + ": expected a JSON object";
    return r;
  }
  if (j.contains("custom_id")) {
    if (j["custom_id"].is_string()) r.request_id = j["custom_id"].get<std::string>();
    else {
      r.error = "custom_id: expected a string, got " + j["custom_id"].dump().substr(0, 80);
      return r;
    }
  }
  if (!j.contains("body")) {
    r.error = "body: missing";
    return r;
  }
  try {
    parse_body(j["body"], r);
    const json& b = j["body"];
    for (const char* k : {"response_format", "structured_outputs", "guided_json", "guided_regex", "guided_grammar"}) {
      if (b.contains(k)) {  // read again with the keys in file order
        parse_structured_output(nlohmann::ordered_json::parse(line)["body"], r.params);
        break;
      }
    }
  } catch (const Error& e) {
    r.error = e.what();
  } catch (const std::exception& e) {  // a value nlohmann could not convert: still this line's error alone
    r.error = where + ": " + e.what();
  }
  return r;
}

std::string format_batch_output(const std::string& custom_id, const RequestOutput& out) {
  json j;
  j["custom_id"] = custom_id;
  if (!out.error.empty()) {
    j["error"] = {{"message", out.error}};
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  json choices = json::array();
  int64_t completion_tokens = 0;
  for (const auto& c : out.outputs) {
    json ch = {{"index", c.index}, {"text", c.text}, {"token_ids", c.token_ids}, {"finish_reason", to_string(c.finish_reason)}};
    if (!c.stop_reason.empty()) ch["stop_reason"] = c.stop_reason;
    if (!c.logprobs.empty()) {
      json lp = json::array();
      for (const auto& t : c.logprobs) {
        json top = json::array();
        for (const auto& [id, v] : t.top) top.push_back({{"token_id", id}, {"logprob", v}});
        lp.push_back({{"token_id", t.token_id}, {"logprob", t.logprob}, {"top_logprobs", top}});
      }
      ch["logprobs"] = lp;
    }
    completion_tokens += static_cast<int64_t>(c.token_ids.size());
    choices.push_back(ch);
  }
  json resp;
  if (!out.outputs.empty()) {
    resp["text"] = out.outputs[0].text;
    resp["token_ids"] = out.outputs[0].token_ids;
    resp["finish_reason"] = to_string(out.outputs[0].finish_reason);
  }
  resp["usage"] = {{"prompt_tokens", out.prompt_token_ids.size()},
                   {"completion_tokens", completion_tokens},
                   {"total_tokens", static_cast<int64_t>(out.prompt_token_ids.size()) + completion_tokens}};
  resp["choices"] = choices;
  j["response"] = resp;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace deepinfer::api
