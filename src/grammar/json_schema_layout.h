// Internal to the JSON-Schema compiler: white space and separators, the shared any-JSON
// value rule and the JSON string expression. Not a public interface.
// Threading: stateless functions over a Grammar being built.
#pragma once

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace deepinfer::grammar::detail {

struct JsonLayout {
  int32_t ws = -1;     // between tokens (after '{' / '[', before '}' / ']')
  int32_t comma = -1;  // between items / members
  int32_t colon = -1;  // between a key and its value
};

JsonLayout make_layout(Grammar& g, const JsonSchemaOptions& o);
// "..." with any JSON string content.
int32_t json_string_expr(Grammar& g);
// The recursive rule `json_value` (created once per grammar).
int32_t json_value_rule(Grammar& g, const JsonLayout& l);

}  // namespace deepinfer::grammar::detail
