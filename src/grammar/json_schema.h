// JSON Schema (and "any JSON") to Grammar.
//
// Purpose: the `json_schema` and `json_object` structured-output kinds. The rule: every
// value the grammar generates is valid against the schema; a keyword the grammar cannot
// enforce is a deepinfer::Error naming it, its location and the reason. Where a keyword is
// enforced on a subset of its valid values, the subset is named below.
// Enforced exactly: type (one or a list), properties (generated in the schema's order),
// required, additionalProperties (false / true / a schema), patternProperties (a declared name
// takes the schemas of the patterns it matches), propertyNames (type string, enum, const,
// pattern, minLength, maxLength), minProperties / maxProperties, items, prefixItems (and
// draft-04..07 tuple `items` with additionalItems), minItems / maxItems, enum, const, anyOf,
// allOf (merged: types intersect, properties and required unite, bounds tighten), $ref into
// the document ("#", "#/$defs/x", "#/definitions/x", any JSON pointer) including recursion,
// string minLength / maxLength / pattern (unanchored unless ^ / $, see grammar/regex_parser.h),
// integer and number minimum / maximum / exclusiveMinimum / exclusiveMaximum (draft-04's
// boolean forms too; any size: bounds are handled as decimal strings, and a number the JSON
// parser rounded is an error; bounded numbers are written without exponent), multipleOf 1,
// uniqueItems over items with finitely many values (const, enum, boolean, null) or
// maxItems <= 1, dependentRequired / dependentSchemas / dependencies (objects with and
// without each key; json_schema.cpp dependencies_expr), `not` over types, required keys and
// enum/const beside the schema's own values, if / then / else on required keys or one
// property's const/enum (if_then_else_expr), `true` / `false` subschemas (a `false` property
// never appears).
// Enforced on a subset: formats (date, time, date-time, duration, email, idn-email,
// hostname, idn-hostname, uri, uri-reference, iri, iri-reference, ipv4, ipv6, uuid,
// json-pointer, relative-json-pointer; unknown names are ignored as the specification says),
// pattern or format with minLength / maxLength (grammar/json_schema_length.cpp), keys from
// patternProperties (only patterns no declared name matches; values satisfy every pattern's
// schema), additional keys beside propertyNames (only for a lone pattern), oneOf (branches
// restricted until no generated value is valid against two branches, a branch that cannot
// be is left out; see json_schema_oneof.cpp).
// Keywords outside the JSON Schema vocabulary (x-*, OpenAPI's example, Snowplow's self) and
// annotations (title, description, default, examples, $schema, $id, id, $comment,
// deprecated, readOnly, writeOnly, ...) are ignored; with JsonSchemaOptions::strict_keywords a
// keyword outside the vocabulary is an error. Not enforced (an error): other if conditions,
// contains, multipleOf other than 1, unevaluatedProperties / unevaluatedItems, $dynamicRef,
// pattern with format, other `not` and overlapping oneOf branches.
// Output shape: with any_whitespace, JSON white space may appear between tokens (not before
// or after the top value); otherwise separators are exactly ", " and ": ". Strings use
// JSON escapes; a string's characters are counted as decoded code points.
// Strict mode (default, as in xgrammar/OpenAI): a missing additionalProperties means false,
// and a tuple (prefixItems) without `items` allows no further items.
// Threading: stateless.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

struct JsonSchemaOptions {
  bool any_whitespace = true;
  int max_whitespace = -1;  // with any_whitespace: longest run between tokens (-1: unbounded)
  bool strict = true;
  // Reject keywords outside the JSON Schema vocabulary (x-*, OpenAPI's example, ...), which
  // are otherwise ignored as the specification says.
  bool strict_keywords = false;
};

// `schema_text`: the schema as JSON text (errors name the parse position).
Grammar json_schema_to_grammar(std::string_view schema_text, const JsonSchemaOptions& opts = {});
Grammar json_schema_to_grammar(const nlohmann::ordered_json& schema, const JsonSchemaOptions& opts = {});
inline Grammar json_schema_to_grammar(const std::string& schema_text, const JsonSchemaOptions& opts = {}) {
  return json_schema_to_grammar(std::string_view(schema_text), opts);
}
inline Grammar json_schema_to_grammar(const char* schema_text, const JsonSchemaOptions& opts = {}) {
  return json_schema_to_grammar(std::string_view(schema_text), opts);
}
// Any JSON value (object_only: any JSON object, OpenAI's json_object mode).
Grammar builtin_json_grammar(bool object_only = false, const JsonSchemaOptions& opts = {});

namespace detail {
// Pieces used by the converter (json_schema_number.cpp, json_schema_format.cpp).
struct Decimal {
  bool negative = false;
  std::string int_digits = "0";  // no leading zeros
  std::string frac_digits;       // no trailing zeros
  bool is_zero() const { return int_digits == "0" && frac_digits.empty(); }
};
// A JSON number (integer or float) as an exact decimal of its shortest text form.
Decimal decimal_of(const nlohmann::ordered_json& number);
int compare_decimal(const Decimal& a, const Decimal& b);  // -1, 0, 1 (signed values)
// True when the JSON number text `text` has exactly the value `parsed` (the double the
// parser made of it); false when the parser rounded it (more digits than a double holds,
// an integer beyond 64 bits, an exponent out of range).
bool number_text_is_exact(const std::string& text, double parsed);
struct NumberBounds {
  const Decimal* lo = nullptr;
  bool lo_exclusive = false;
  const Decimal* hi = nullptr;
  bool hi_exclusive = false;
};
// Integers (no fraction, no exponent) within the bounds; -1 when none exist.
int32_t integer_range_expr(Grammar& g, const NumberBounds& b);
// Numbers within the bounds (no exponent when bounded); -1 when none exist.
int32_t number_range_expr(Grammar& g, const NumberBounds& b);
// The inside of a JSON string for a supported format; -1 if the format is unknown (ignored);
// throws for a known format we cannot generate.
int32_t format_expr(Grammar& g, std::string_view format, const std::string& where);
}  // namespace detail

}  // namespace deepinfer::grammar
