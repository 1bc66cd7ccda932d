// Bounds on JSON that comes from users (run-batch lines, chat messages, tool lists, schemas).
//
// Purpose: nlohmann's parser is iterative, but dump(), copies, comparisons and our own
// renderers recurse once per nesting level; a line of 100,000 '[' would overflow the stack.
// Every JSON value from outside is therefore checked against kMaxJsonDepth, in its text before
// parsing (parse_json_input) or as a parsed value (check_json_depth, iterative), so no
// recursion depth is input-controlled.
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace deepinfer {

// Deepest nesting of arrays and objects accepted in user JSON (a scalar is depth 0, [] is 1).
inline constexpr size_t kMaxJsonDepth = 128;

// Nesting depth of JSON text (brackets inside strings are skipped); the scan stops as soon as
// the depth passes `stop_after`. Malformed text gives some depth; the parser reports it.
inline size_t json_text_depth(std::string_view text, size_t stop_after = kMaxJsonDepth) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > stop_after) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// Nesting depth of a parsed value, without recursion; stops once past `stop_after`.
template <class Json>
size_t json_value_depth(const Json& v, size_t stop_after = kMaxJsonDepth) {
  size_t deepest = 0;
  std::vector<std::pair<const Json*, size_t>> stack{{&v, 0}};
  while (!stack.empty()) {
    auto [j, d] = stack.back();
    stack.pop_back();
    if (!j->is_structured()) continue;
    if (d + 1 > deepest) deepest = d + 1;
    if (deepest > stop_after) return deepest;
    for (const auto& child : *j) stack.emplace_back(&child, d + 1);
  }
  return deepest;
}

// Throws Error "<field>: JSON nested deeper than 128 levels" for a value that is too deep.
template <class Json>
void check_json_depth(const Json& v, const std::string& field) {
  if (json_value_depth(v) > kMaxJsonDepth)
    throw Error(field + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
}

// Parses user JSON text: Error "<field>: JSON nested deeper than 128 levels" or
// "<field>: invalid JSON: ..." instead of nlohmann's exceptions.
template <class Json = nlohmann::json>
Json parse_json_input(std::string_view text, const std::string& field) {
  if (json_text_depth(text) > kMaxJsonDepth)
    throw Error(field + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(field + ": invalid JSON: " + e.what());
  }
}

}  // namespace deepinfer
