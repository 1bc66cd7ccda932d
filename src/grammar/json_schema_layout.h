// Internal to the JSON-Schema compiler: white space and separators, the shared any-JSON
// value rule, the JSON string expression, keyword checks and allOf merging. Not a public
// interface.
// Threading: stateless functions over a Grammar being built.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
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

using ojson = nlohmann::ordered_json;
// A schema no value satisfies (thrown by merge_all_of: types, enums or consts that do not
// meet, a `false` member, a required key another member forbids).
class Unsatisfiable : public Error {
 public:
  using Error::Error;
};
// "JSON schema at PATH: " (the prefix of every error).
std::string at(const std::string& path);
// A JSON Schema keyword that can restrict a value (not an annotation such as title, $defs,
// and not a keyword outside the vocabulary such as x-*, which are ignored).
bool is_constraint(const std::string& keyword);
// Throws for a vocabulary keyword the compiler does not enforce, and with `strict_keywords`
// for any keyword outside the JSON Schema vocabulary.
void check_schema_keywords(const ojson& s, const std::string& path, bool strict_keywords);
// Resolves a "$ref" inside the document (errors name `path`).
using RefResolver = std::function<const ojson&(const std::string& ref, const std::string& path)>;
// allOf: the members (with $ref resolved one level, nested allOf flattened) as one schema:
// types intersect, properties and required unite (a member's additionalProperties applies
// to the other members' properties), bounds tighten, enums intersect, anyOf/oneOf distribute.
ojson merge_all_of(const ojson& members, const std::string& path, const RefResolver& resolve);
// oneOf is generated as anyOf: "" when no value one branch generates can be valid against
// another (types, const/enum values, object discriminators, required keys another branch
// forbids; see json_schema_oneof.cpp), else the error naming two overlapping branches.
// `strict`: a missing additionalProperties generates no extra keys.
// `index`: the branches' positions in the schema's oneOf (for the message).
std::string one_of_overlap(const std::vector<ojson>& branches, const std::string& path, const RefResolver& resolve,
                           bool strict, const std::vector<size_t>& index);
// The branches ($ref and allOf merged) restricted so that each never writes one key that
// each other branch requires and it does not (`"properties": {key: false}`), and, where
// other branches name their types, generates only types none of them accepts. Every value
// a restricted branch generates is valid against the original branch.
std::vector<ojson> one_of_restricted(const std::vector<ojson>& branches, const std::string& path, const RefResolver& resolve,
                                     bool strict);
// keep[i]: no value generators[i] generates is valid against acceptors[j] for any j != i.
std::vector<bool> one_of_exclusive(const std::vector<ojson>& generators, const std::vector<ojson>& acceptors,
                                   const std::string& path, const RefResolver& resolve, bool strict);

// The strings of `src`'s raw expression `e` (literals and code-point classes) whose length
// in code points is within [lo, hi] (hi < 0: unbounded), emitted into `dst` (JSON-escaped
// when `json`); a subset where the lengths cannot be split exactly (json_schema_length.cpp).
// -1 when it produces nothing.
int32_t restrict_length(const Grammar& src, int32_t e, Grammar& dst, int64_t lo, int64_t hi, bool json);

}  // namespace deepinfer::grammar::detail
