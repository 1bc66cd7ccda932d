#include "tokenizer/chat_encoding.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/json_input.h"
#include "tokenizer/tokenizer.h"

// The reference encoder works in passes; this file keeps them apart in the same order:
//   1. read:   validate every message, flatten list content (images -> placeholder text),
//              render each assistant's DSML tool-call block;
//   2. merge:  tool messages become <tool_result> blocks of a user turn (appended to a user
//              turn right before them), consecutive user turns join into one;
//   3. sort:   within a user turn, tool results follow the latest assistant's call order;
//   4. drop:   thinking mode with drop_thinking (and no tools anywhere): developer turns
//              before the last user-like turn disappear;
//   5. render: BOS, then each turn, then the transition after it (generation header or
//              task token) when it is last or followed by an assistant / latest_reminder.

namespace deepinfer::tokenizer {

namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kUserToken = "<｜User｜>";
constexpr std::string_view kAssistantToken = "<｜Assistant｜>";
constexpr std::string_view kSystemToken = "<｜System｜>";
constexpr std::string_view kReminderToken = "<｜latest_reminder｜>";
constexpr std::string_view kImagePlaceholder = "<｜deepseek_image｜>";

// DSML markup; V4.1 tag names start with a space ("<｜DSML｜ calls>").
constexpr std::string_view kCallsOpen = "<｜DSML｜ calls>";
constexpr std::string_view kCallsClose = "</｜DSML｜ calls>";
constexpr std::string_view kInvokeOpen = "<｜DSML｜ invoke name=\"";
constexpr std::string_view kInvokeClose = "</｜DSML｜ invoke>";
constexpr std::string_view kParamOpen = "<｜DSML｜ parameter name=\"";
constexpr std::string_view kParamClose = "</｜DSML｜ parameter>";

// The "## Tools" section of a system/developer turn, around the tool schema lines.
constexpr std::string_view kToolsHead =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    "by writing a \"<｜DSML｜ calls>\" block like the following:\n\n"
    "<｜DSML｜ calls>\n"
    "<｜DSML｜ invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜ parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜ parameter>\n"
    "...\n"
    "</｜DSML｜ invoke>\n"
    "<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜ invoke>\n"
    "</｜DSML｜ calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
constexpr std::string_view kResponseFormatHead =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";
constexpr std::string_view kEffortHead = "Reasoning Effort: ";
constexpr std::string_view kEffortTail =
    " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";

constexpr std::string_view kTasks[] = {"action", "query", "authority", "domain", "title", "read_url"};

enum class Role { kSystem, kDeveloper, kUser, kAssistant, kTool, kLatestReminder };

// A block of a user turn, already rendered; only its position may still change (sort pass).
struct Block {
  std::string text;
  bool tool_result = false;
  std::string tool_use_id;
};

// A content block as read from a list: images are already "text" blocks holding the
// placeholder; for "tool_result" `text` holds the rendered inner content; for other types
// `text` is unused.
struct RawBlock {
  std::string type;
  std::string text;
  std::string tool_use_id;
};

struct Turn {
  Role role = Role::kUser;
  std::string content;                    // all roles but user: the text
  std::vector<Block> blocks;              // user
  std::string reasoning;                  // assistant reasoning_content
  std::string tool_calls;                 // assistant: "\n\n<｜DSML｜ calls>...", or ""
  bool has_tool_calls = false;            // non-empty tool_calls list
  std::vector<std::string> call_ids;      // per call; "" when it has none
  std::string tool_call_id;               // tool
  const Json* tools = nullptr;            // non-empty tool list, else null
  const Json* response_format = nullptr;  // truthy response_format, else null
  std::string task;                       // "" = none
  bool wo_eos = false;
};

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw Error("chat " + where + ": " + what);
}

// Python's bool(value) for a JSON value.
bool truthy(const Json& j) {
  switch (j.type()) {
    case Json::value_t::boolean: return j.get<bool>();
    case Json::value_t::number_integer: return j.get<int64_t>() != 0;
    case Json::value_t::number_unsigned: return j.get<uint64_t>() != 0;
    case Json::value_t::number_float: return j.get<double>() != 0.0;
    case Json::value_t::string: return !j.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
    case Json::value_t::binary: return !j.empty();
    case Json::value_t::null:
    case Json::value_t::discarded: return false;
  }
  return false;
}

const Json* field(const Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF).
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) { ++i; continue; }
    if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1Fu; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0Fu; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07u; }
    else return false;
    if (i + n >= s.size()) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto t = static_cast<unsigned char>(s[i + k]);
      if ((t & 0xC0u) != 0x80u) return false;
      cp = (cp << 6) | (t & 0x3Fu);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

bool all_utf8(const Json& j) {
  if (j.is_string()) return valid_utf8(j.get_ref<const std::string&>());
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (!valid_utf8(it.key()) || !all_utf8(it.value())) return false;
  } else if (j.is_array()) {
    for (const Json& e : j)
      if (!all_utf8(e)) return false;
  }
  return true;
}

// ---- Python json.dumps(ensure_ascii=False) ----

int effort_budget(const ChatOptions& options) {
  const std::string effort = options.reasoning_effort.empty() ? "high" : options.reasoning_effort;
  const bool numeric = effort.size() <= 3 && effort[0] != '0' &&
                       std::all_of(effort.begin(), effort.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (numeric) {
    const int n = std::atoi(effort.c_str());
    if (n >= 1 && n <= 100) return n;
  }
  struct Alias { std::string_view name; int budget; };
  static constexpr Alias kQuarter[] = {{"low", 25}, {"high", 50}, {"xhigh", 75}, {"max", 100}};
  static constexpr Alias kThree[] = {{"low", 50}, {"high", 75}, {"max", 100}};
  const bool quarter = options.effort_aliases == EffortAliases::kQuarterSteps;
  std::string names;
  for (const Alias& a : quarter ? std::span<const Alias>(kQuarter) : std::span<const Alias>(kThree)) {
    if (a.name == effort) return a.budget;
    names += names.empty() ? "" : ", ";
    names += a.name;
  }
  throw Error("chat option reasoning_effort: '" + effort + "' is not an integer 1..100 or one of " + names);
}

// An optional string field of `object`: "" when absent (or null, if `null_ok`).
std::string string_field(const Json& object, const char* key, const std::string& where, bool null_ok) {
  const Json* v = field(object, key);
  if (!v || (null_ok && v->is_null())) return {};
  if (!v->is_string()) fail(where + "." + key, std::string("expected a string, got ") + v->type_name());
  return v->get<std::string>();
}

void check_image(const Json& block, const std::string& where, const std::string& type) {
  bool has_source = false;
  if (type == "image_url") {
    const Json* url = field(block, "image_url");
    if (url && url->is_string()) {
      has_source = truthy(*url);
    } else if (url && url->is_object()) {
      const Json* inner = field(*url, "url");
      has_source = inner && truthy(*inner);
    } else if (url && truthy(*url)) {
      fail(where + ".image_url", std::string("expected a URL string or an object with \"url\", got ") +
                                     url->type_name());
    }
  } else {
    for (const char* key : {"source", "url", "data"}) {
      const Json* v = field(block, key);
      has_source = has_source || (v && truthy(*v));
    }
  }
  if (!has_source) fail(where, "image block has no source (image_url.url, or source/url/data)");
}

std::vector<RawBlock> read_blocks(const Json& list, const std::string& where);

// A tool_result block's content as rendered inside <tool_result>...</tool_result>.
std::string tool_result_text(const Json& block, const std::string& where) {
  const Json* c = field(block, "content");
  if (!c) return {};
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array())
    fail(where + ".content", std::string("expected a string or a list of blocks, got ") + c->type_name());
  std::string text;
  bool first = true;
  for (const RawBlock& b : read_blocks(*c, where + ".content")) {
    if (!first) text += "\n\n";
    first = false;
    text += b.type == "text" ? b.text : "[Unsupported " + b.type + "]";
  }
  return text;
}

std::vector<RawBlock> read_blocks(const Json& list, const std::string& where) {
  std::vector<RawBlock> blocks;
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& b = list[i];
    const std::string w = where + "[" + std::to_string(i) + "]";
    if (!b.is_object()) fail(w, std::string("expected a content block object, got ") + b.type_name());
    const Json* type = field(b, "type");
    if (!type || !type->is_string()) fail(w + ".type", "expected the block type as a string");
    RawBlock out;
    out.type = type->get<std::string>();
    if (out.type == "image" || out.type == "image_url") {
      check_image(b, w, out.type);
      out.type = "text";
      out.text = kImagePlaceholder;
    } else if (out.type == "text") {
      out.text = string_field(b, "text", w, false);
      if (contains(out.text, kImagePlaceholder))
        fail(w + ".text", "contains the image placeholder " + std::string(kImagePlaceholder) +
                              "; send images as image blocks");
    } else if (out.type == "tool_result") {
      out.text = tool_result_text(b, w);
      out.tool_use_id = string_field(b, "tool_use_id", w, true);
    }
    blocks.push_back(std::move(out));
  }
  return blocks;
}

void check_tools(const Json& tools, const std::string& where) {
  if (tools.is_null()) return;
  if (!tools.is_array()) fail(where, std::string("expected a list of tools, got ") + tools.type_name());
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const Json* fn = tools[i].is_object() ? field(tools[i], "function") : nullptr;
    if (!fn || !fn->is_object()) fail(w, "expected {\"type\": \"function\", \"function\": {...}}");
  }
}

// One DSML invoke element for an assistant tool call.
std::string render_call(const Json& call, const std::string& where) {
  if (!call.is_object()) fail(where, std::string("expected a tool call object, got ") + call.type_name());
  const Json* fn = field(call, "function");
  if (!fn || !fn->is_object()) fail(where + ".function", "expected an object with name and arguments");
  const Json* name = field(*fn, "name");
  if (!name || !name->is_string()) fail(where + ".function.name", "expected a string");
  const Json* args = field(*fn, "arguments");
  if (!args) fail(where + ".function.arguments", "missing");
  Json parsed;
  if (args->is_string()) {
    const std::string& text = args->get_ref<const std::string&>();
    if (json_text_depth(text) > kMaxJsonDepth)
      fail(where + ".function.arguments", "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    try {
      parsed = Json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail(where + ".function.arguments", std::string("not valid JSON: ") + e.what());
    }
    args = &parsed;
  }
  if (!args->is_object())
    fail(where + ".function.arguments", std::string("must be a JSON object, got ") + args->type_name());
  std::string out(kInvokeOpen);
  out += name->get_ref<const std::string&>();
  out += "\">\n";
  bool first = true;
  for (auto it = args->begin(); it != args->end(); ++it) {
    if (!first) out += '\n';
    first = false;
    const bool is_string = it.value().is_string();
    out += kParamOpen;
    out += it.key();
    out += is_string ? "\" string=\"true\">" : "\" string=\"false\">";
    if (is_string) out += it.value().get_ref<const std::string&>();
    else out += to_python_json(it.value());
    out += kParamClose;
  }
  out += '\n';
  out += kInvokeClose;
  return out;
}

Turn read_message(const Json& m, size_t index) {
  const std::string where = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) fail(where, std::string("expected a message object, got ") + m.type_name());
  if (!all_utf8(m)) fail(where, "contains a string that is not valid UTF-8");
  Turn t;
  const Json* role = field(m, "role");
  if (!role || !role->is_string()) fail(where + ".role", "expected a string");
  const std::string& r = role->get_ref<const std::string&>();
  if (r == "system") t.role = Role::kSystem;
  else if (r == "developer") t.role = Role::kDeveloper;
  else if (r == "user") t.role = Role::kUser;
  else if (r == "assistant") t.role = Role::kAssistant;
  else if (r == "tool") t.role = Role::kTool;
  else if (r == "latest_reminder") t.role = Role::kLatestReminder;
  else fail(where + ".role", "unknown role '" + r + "' (expected system, developer, user, assistant, tool or latest_reminder)");

  // Content: a string, or a list of blocks; only an assistant may leave it out or null.
  const Json* content = field(m, "content");
  const bool optional = t.role == Role::kAssistant;
  if (!content || content->is_null()) {
    if (!optional) fail(where + ".content", "missing (expected a string or a list of content blocks)");
  } else if (content->is_string()) {
    t.content = content->get<std::string>();
    if (contains(t.content, kImagePlaceholder))
      fail(where + ".content", "contains the image placeholder " + std::string(kImagePlaceholder) +
                                   "; send images as image blocks");
    if (t.role == Role::kUser) t.blocks.push_back({t.content, false, {}});
  } else if (content->is_array()) {
    if (content->empty() && t.role == Role::kLatestReminder)  // the reference would print "None"
      fail(where + ".content", "an empty block list");
    bool first = true;
    for (const RawBlock& b : read_blocks(*content, where + ".content")) {
      if (t.role == Role::kUser) {
        if (b.type == "text") t.blocks.push_back({b.text, false, {}});
        else if (b.type == "tool_result") t.blocks.push_back({"<tool_result>" + b.text + "</tool_result>", true, b.tool_use_id});
        else t.blocks.push_back({"[Unsupported " + b.type + "]", false, {}});
      } else if (b.type == "text") {  // other roles keep only the text blocks
        if (!first) t.content += "\n\n";
        first = false;
        t.content += b.text;
      }
    }
  } else {
    fail(where + ".content", std::string("expected a string or a list of content blocks, got ") + content->type_name());
  }
  if (t.role == Role::kDeveloper && t.content.empty()) fail(where + ".content", "a developer message needs non-empty content");

  t.reasoning = string_field(m, "reasoning_content", where, true);
  if (contains(t.reasoning, kImagePlaceholder))
    fail(where + ".reasoning_content", "contains the image placeholder " + std::string(kImagePlaceholder));

  if (const Json* tools = field(m, "tools")) {
    check_tools(*tools, where + ".tools");
    if (truthy(*tools)) t.tools = tools;
  }
  if (const Json* rf = field(m, "response_format"); rf && truthy(*rf)) t.response_format = rf;

  if (const Json* calls = field(m, "tool_calls"); calls && !calls->is_null()) {
    if (!calls->is_array()) fail(where + ".tool_calls", std::string("expected a list, got ") + calls->type_name());
    std::string invokes;
    for (size_t i = 0; i < calls->size(); ++i) {
      const std::string w = where + ".tool_calls[" + std::to_string(i) + "]";
      if (i > 0) invokes += '\n';
      invokes += render_call((*calls)[i], w);
      // Call id for the result sort: "id", else "function.id".
      std::string id = string_field((*calls)[i], "id", w, true);
      if (id.empty()) id = string_field((*calls)[i]["function"], "id", w + ".function", true);
      t.call_ids.push_back(std::move(id));
    }
    if (!calls->empty()) {
      t.has_tool_calls = true;
      t.tool_calls = "\n\n" + std::string(kCallsOpen) + "\n" + invokes + "\n" + std::string(kCallsClose);
    }
  }
  if (t.role == Role::kTool) t.tool_call_id = string_field(m, "tool_call_id", where, true);

  if (const Json* task = field(m, "task"); task && !task->is_null()) {
    const bool known = task->is_string() && std::find(std::begin(kTasks), std::end(kTasks),
                                                      task->get_ref<const std::string&>()) != std::end(kTasks);
    if (!known) fail(where + ".task", "expected one of action, query, authority, domain, title, read_url");
    t.task = task->get<std::string>();
  }
  if (const Json* wo = field(m, "wo_eos"); wo && !wo->is_null()) {
    if (!wo->is_boolean()) fail(where + ".wo_eos", std::string("expected a boolean, got ") + wo->type_name());
    t.wo_eos = wo->get<bool>();
  }
  return t;
}

// ---- Passes 2-4 ----

std::vector<Turn> merge_tool_turns(std::vector<Turn>& turns) {
  std::vector<Turn> merged;
  for (Turn& t : turns) {
    const bool after_user = !merged.empty() && merged.back().role == Role::kUser;
    if (t.role == Role::kTool) {
      Block b{"<tool_result>" + t.content + "</tool_result>", true, t.tool_call_id};
      if (after_user) {
        merged.back().blocks.push_back(std::move(b));
      } else {
        Turn u;
        u.blocks.push_back(std::move(b));
        merged.push_back(std::move(u));
      }
    } else if (t.role == Role::kUser && after_user && merged.back().task.empty()) {
      // The later user message's own fields (task, tools, ...) are dropped, as in the reference.
      for (Block& b : t.blocks) merged.back().blocks.push_back(std::move(b));
    } else {
      merged.push_back(std::move(t));
    }
  }
  return merged;
}

void sort_tool_results(std::vector<Turn>& turns) {
  std::unordered_map<std::string, size_t> order;  // call id -> position in the latest call list
  for (Turn& t : turns) {
    if (t.role == Role::kAssistant && t.has_tool_calls) {
      order.clear();
      for (size_t i = 0; i < t.call_ids.size(); ++i)
        if (!t.call_ids[i].empty()) order[t.call_ids[i]] = i;
    } else if (t.role == Role::kUser && !order.empty()) {
      std::vector<size_t> slots;
      for (size_t i = 0; i < t.blocks.size(); ++i)
        if (t.blocks[i].tool_result) slots.push_back(i);
      if (slots.size() < 2) continue;
      std::vector<Block> results;
      for (size_t s : slots) results.push_back(t.blocks[s]);
      auto key = [&](const Block& b) {
        auto it = order.find(b.tool_use_id);
        return it == order.end() ? size_t{0} : it->second;  // unknown ids sort as position 0
      };
      std::stable_sort(results.begin(), results.end(), [&](const Block& a, const Block& b) { return key(a) < key(b); });
      for (size_t k = 0; k < slots.size(); ++k) t.blocks[slots[k]] = std::move(results[k]);
    }
  }
}

// Index of the last user or developer turn, or system turn past index 0; -1 if none.
long last_user_index(const std::vector<Turn>& turns) {
  for (size_t i = turns.size(); i-- > 0;) {
    const Role r = turns[i].role;
    if (r == Role::kUser || r == Role::kDeveloper || (r == Role::kSystem && i > 0)) return static_cast<long>(i);
  }
  return -1;
}

// Developer turns before the last user-like turn are removed. (The reference also clears
// those assistants' reasoning; it would not be rendered anyway.)
std::vector<Turn> drop_early_turns(std::vector<Turn>& turns) {
  const long last = last_user_index(turns);
  std::vector<Turn> kept;
  for (size_t i = 0; i < turns.size(); ++i)
    if (turns[i].role != Role::kDeveloper || static_cast<long>(i) >= last) kept.push_back(std::move(turns[i]));
  return kept;
}

// ---- Pass 5: rendering ----

void append_tools_and_format(std::string& out, const Turn& t) {
  if (t.tools) {
    out += "\n\n";
    out += kToolsHead;
    bool first = true;
    for (const Json& tool : *t.tools) {
      if (!first) out += '\n';
      first = false;
      out += to_python_json(tool["function"]);
    }
    out += kToolsTail;
  }
  if (t.response_format) {
    out += "\n\n";
    out += kResponseFormatHead;
    out += to_python_json(*t.response_format);
  }
}

}  // namespace

std::string encode_chat(const nlohmann::ordered_json& messages, const ChatOptions& options) {
  if (!messages.is_array())
    throw Error(std::string("chat messages: expected a JSON array of message objects, got ") + messages.type_name());
  // The checks and the renderer below recurse once per nesting level.
  check_json_depth(messages, "chat messages");
  check_json_depth(options.tools, "options.tools");
  const int budget = effort_budget(options);  // validated in both modes, like the reference

  std::vector<Turn> turns;
  for (size_t i = 0; i < messages.size(); ++i) turns.push_back(read_message(messages[i], i));

  check_tools(options.tools, "options.tools");
  if (!all_utf8(options.tools)) fail("options.tools", "contains a string that is not valid UTF-8");
  if (truthy(options.tools)) {
    if (!turns.empty() && (turns[0].role == Role::kSystem || turns[0].role == Role::kDeveloper)) {
      if (turns[0].tools) fail("messages[0].tools", "tools are given both here and in the options");
      turns[0].tools = &options.tools;
    } else {
      Turn system;
      system.role = Role::kSystem;
      system.tools = &options.tools;
      turns.insert(turns.begin(), std::move(system));
    }
  }

  std::vector<Turn> list = merge_tool_turns(turns);
  sort_tool_results(list);
  const bool any_tools = std::any_of(list.begin(), list.end(), [](const Turn& t) { return t.tools != nullptr; });
  const bool drop = options.drop_thinking && !any_tools;
  const bool thinking = options.thinking;
  if (thinking && drop) list = drop_early_turns(list);

  std::string out(options.add_bos ? kBos : std::string_view{});
  const long last_user = last_user_index(list);
  for (size_t i = 0; i < list.size(); ++i) {
    const Turn& t = list[i];
    if (i == 0 && thinking) {
      out += kSystemToken;
      out += kEffortHead;
      out += std::to_string(budget);
      out += kEffortTail;
    } else if (i == 0 && t.role == Role::kSystem) {
      out += kSystemToken;
    }
    switch (t.role) {
      case Role::kSystem:
        if (i > 0) out += kSystemToken;
        out += t.content;
        append_tools_and_format(out, t);
        break;
      case Role::kDeveloper:
        out += kUserToken;
        out += t.content;
        append_tools_and_format(out, t);
        break;
      case Role::kUser:
        out += kUserToken;
        for (size_t b = 0; b < t.blocks.size(); ++b) {
          if (b > 0) out += "\n\n";
          out += t.blocks[b].text;
        }
        break;
      case Role::kLatestReminder:
        out += kReminderToken;
        out += t.content;
        break;
      case Role::kAssistant: {
        // The reasoning closes with </think> (its <think> ended the previous header); a turn
        // answering a task, and in drop mode a turn before the last user turn, has none.
        const bool after_task = i > 0 && !list[i - 1].task.empty();
        if (thinking && !after_task && (!drop || static_cast<long>(i) > last_user)) {
          out += t.reasoning;
          out += kThinkEnd;
        }
        out += t.content;
        out += t.tool_calls;
        if (!t.wo_eos) out += kEos;
        break;
      }
      case Role::kTool: DI_CHECK(false, "tool turns are merged into user turns before rendering");
    }

    // Transition, only when this turn is last or an assistant / latest_reminder follows.
    const bool last = i + 1 == list.size();
    if (!last && list[i + 1].role != Role::kAssistant && list[i + 1].role != Role::kLatestReminder) continue;
    if (last && !options.add_generation_prompt) continue;
    if (!t.task.empty()) {
      if (t.task != "action") {
        out += "<｜" + t.task + "｜>";
      } else {
        out += kAssistantToken;
        out += thinking ? kThinkStart : kThinkEnd;
        out += "<｜action｜>";
      }
    } else if (t.role == Role::kUser || t.role == Role::kDeveloper || (t.role == Role::kSystem && i > 0)) {
      out += kAssistantToken;
      out += thinking && (!drop || static_cast<long>(i) >= last_user) ? kThinkStart : kThinkEnd;
    }
  }
  return out;
}

std::vector<int32_t> encode_chat_ids(const Tokenizer& tok, const nlohmann::ordered_json& messages, const ChatOptions& options) {
  return tok.encode(encode_chat(messages, options), /*add_special_tokens=*/false);
}

}  // namespace deepinfer::tokenizer
