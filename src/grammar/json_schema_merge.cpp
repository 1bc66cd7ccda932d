// allOf merging and the keyword tables of the JSON-Schema compiler (grammar/json_schema.cpp).
#include <algorithm>
#include <functional>
#include <set>

#include "core/error.h"
#include "grammar/json_schema_layout.h"

namespace deepinfer::grammar::detail {
namespace {

// Keywords of the JSON Schema vocabularies (draft-04 to 2020-12) that never restrict a value:
// annotations, identifiers, definitions containers.
const std::set<std::string> kAnnotations = {
    "title", "description", "default", "examples", "$schema", "$id", "id", "$comment", "deprecated", "readOnly",
    "writeOnly", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "contentEncoding", "contentMediaType",
    "contentSchema", "$defs", "definitions"};
// Assertions and applicators the compiler enforces.
const std::set<std::string> kKeywords = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "additionalItems", "minItems",
    "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "uniqueItems", "patternProperties", "propertyNames",
    "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies", "not", "if", "then",
    "else"};
// The rest of the vocabulary: assertions the compiler does not enforce (an error).
const std::set<std::string> kUnsupported = {
    "multipleOf", "divisibleBy", "contains", "minContains", "maxContains",
    "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef", "disallow", "extends"};

ojson merge_two_impl(const ojson& a, const ojson& b, const std::string& path) {
  ojson r = a;
  auto fail = [&](const std::string& k) { throw Error(at(path) + "cannot combine '" + k + "' in allOf"); };
  // A property that only one member declares is, for the other member, an additional
  // property: that member's additionalProperties schema applies to it too.
  auto cross = [&](const ojson& owner, const ojson& other, ojson& out_props) {
    if (!owner.contains("properties") || !owner["properties"].is_object()) return;
    if (!other.contains("additionalProperties") || !other["additionalProperties"].is_object()) return;
    for (auto& [p, ps] : owner["properties"].items()) {
      const bool declared = other.contains("properties") && other["properties"].is_object() && other["properties"].contains(p);
      if (!declared) out_props[p] = ps == false ? ps : ojson{{"allOf", ojson::array({ps, other["additionalProperties"]})}};
    }
  };
  // Keys from one member's patternProperties are additional properties for the other.
  auto opens = [](const ojson& s) { return !s.contains("additionalProperties") || s["additionalProperties"] == true; };
  if ((a.contains("patternProperties") && !opens(b)) || (b.contains("patternProperties") && !opens(a))) {
    fail("patternProperties' with 'additionalProperties");
  }
  ojson crossed_a = ojson::object(), crossed_b = ojson::object();
  cross(a, b, crossed_a);
  cross(b, a, crossed_b);
  auto closed = [](const ojson& s) { return s.contains("additionalProperties") && s["additionalProperties"] == false; };
  auto prop_names = [](const ojson& s) {
    std::set<std::string> n;
    if (s.contains("properties") && s["properties"].is_object()) {
      for (auto& [k, v] : s["properties"].items()) n.insert(k);
    }
    return n;
  };
  for (auto& [k, v] : b.items()) {
    if (!is_constraint(k)) continue;
    check_schema_keywords(ojson{{k, v}}, path, false);
    if (!r.contains(k)) {
      r[k] = v;
      continue;
    }
    ojson& x = r[k];
    if (x == v) continue;
    if (k == "type") {
      auto list = [](const ojson& t) { return t.is_array() ? t : ojson::array({t}); };
      ojson out = ojson::array();
      for (const auto& t1 : list(x)) {
        for (const auto& t2 : list(v)) {
          if (t1 == t2) out.push_back(t1);
          else if ((t1 == "integer" && t2 == "number") || (t1 == "number" && t2 == "integer")) out.push_back("integer");
        }
      }
      if (out.empty()) throw Unsatisfiable(at(path) + "allOf: the types do not intersect");
      x = out;
    } else if (k == "patternProperties") {
      if (!x.is_object() || !v.is_object()) fail(k);
      for (auto& [p, ps] : v.items()) {
        if (!x.contains(p) || ps == false) x[p] = ps;
        else if (x[p] != false) x[p] = ojson{{"allOf", ojson::array({x[p], ps})}};
      }
    } else if (k == "properties") {
      if (!x.is_object() || !v.is_object()) fail(k);
      for (auto& [p, ps] : v.items()) {
        if (!x.contains(p) || ps == false) x[p] = ps;
        else if (x[p] != false) x[p] = ojson{{"allOf", ojson::array({x[p], ps})}};
      }
    } else if (k == "required") {
      for (const auto& q : v) {
        if (std::find(x.begin(), x.end(), q) == x.end()) x.push_back(q);
      }
    } else if (k == "additionalProperties" || k == "items") {
      if (x == false || v == false) x = false;
      else if (x == true) x = v;
      else if (v != true) x = ojson{{"allOf", ojson::array({x, v})}};
    } else if (k == "prefixItems") {
      for (size_t i = 0; i < v.size(); ++i) {
        if (i < x.size()) x[i] = ojson{{"allOf", ojson::array({x[i], v[i]})}};
        else x.push_back(v[i]);
      }
    } else if (k == "minItems" || k == "minLength" || k == "minProperties" || k == "minimum" || k == "exclusiveMinimum") {
      if (!x.is_number() || !v.is_number()) fail(k);
      if (compare_decimal(decimal_of(v), decimal_of(x)) > 0) x = v;  // exact: no rounding to doubles
    } else if (k == "maxItems" || k == "maxLength" || k == "maxProperties" || k == "maximum" || k == "exclusiveMaximum") {
      if (!x.is_number() || !v.is_number()) fail(k);
      if (compare_decimal(decimal_of(v), decimal_of(x)) < 0) x = v;
    } else if (k == "enum") {
      ojson out = ojson::array();
      for (const auto& e : x) {
        if (std::find(v.begin(), v.end(), e) != v.end()) out.push_back(e);
      }
      if (out.empty()) throw Unsatisfiable(at(path) + "allOf: the 'enum' lists have no common value");
      x = out;
    } else if (k == "anyOf" || k == "oneOf") {
      if (x.size() * v.size() > 256) fail(k);
      ojson out = ojson::array();
      for (const auto& p : x) {
        for (const auto& q : v) out.push_back(ojson{{"allOf", ojson::array({p, q})}});
      }
      x = out;
    } else if (k == "uniqueItems") {
      x = x == true || v == true;
    } else if (k == "const") {
      throw Unsatisfiable(at(path) + "allOf: the 'const' values differ");
    } else {
      fail(k);  // pattern, format, uniqueItems... that differ
    }
  }
  for (const ojson* crossed : {&crossed_a, &crossed_b}) {
    for (auto& [p, ps] : crossed->items()) r["properties"][p] = ps;
  }
  // additionalProperties: false in one member restricts the other's properties.
  for (const ojson* closed_side : {&a, &b}) {
    if (!closed(*closed_side)) continue;
    std::set<std::string> allowed = prop_names(*closed_side);
    if (r.contains("properties")) {
      for (auto it = r["properties"].begin(); it != r["properties"].end();) {
        it = allowed.count(it.key()) ? std::next(it) : r["properties"].erase(it);
      }
    }
    if (r.contains("required")) {
      for (const auto& q : r["required"]) {
        if (q.is_string() && !allowed.count(q.get<std::string>())) {
          throw Unsatisfiable(at(path) + "allOf: required property '" + q.get<std::string>() + "' is excluded by 'additionalProperties': false");
        }
      }
    }
    r["additionalProperties"] = false;
  }
  return r;
}

}  // namespace

std::string at(const std::string& path) { return "JSON schema at " + path + ": "; }

bool is_constraint(const std::string& k) { return kKeywords.count(k) > 0 || kUnsupported.count(k) > 0; }

void check_schema_keywords(const ojson& s, const std::string& path, bool strict_keywords) {
  for (auto& [k, v] : s.items()) {
    if (kAnnotations.count(k) || kKeywords.count(k)) continue;
    if (kUnsupported.count(k)) {
      if (k == "multipleOf" && v.is_number() && v == 1) continue;  // integers: enforced by the converter
      std::string why;
      if (k == "contains" || k == "minContains" || k == "maxContains") why = ": a grammar does not count matching items";
      else if (k == "multipleOf" || k == "divisibleBy") why = ": only multipleOf 1 is enforced (an integer)";
      else if (k == "unevaluatedProperties" || k == "unevaluatedItems") why = ": annotation-dependent keywords are not enforced";
      else if (k == "$dynamicRef" || k == "$recursiveRef") why = ": dynamic references are not supported";
      throw Error(at(path) + "keyword '" + k + "' is not supported" + why);
    }
    if (strict_keywords) {
      throw Error(at(path) + "keyword '" + k + "' is not JSON Schema vocabulary (rejected with strict_keywords)");
    }
  }
  if (s.contains("uniqueItems") && !s["uniqueItems"].is_boolean()) throw Error(at(path) + "'uniqueItems' must be a boolean");
}

ojson merge_all_of(const ojson& members, const std::string& path, const RefResolver& resolve) {
  ojson out = ojson::object();
  std::vector<ojson> flat;
  std::function<void(const ojson&, int)> add = [&](const ojson& m, int depth) {
    if (depth > 32) throw Error(at(path) + "allOf/$ref nested too deeply");
    if (m.is_boolean()) {
      if (!m.get<bool>()) throw Unsatisfiable(at(path) + "allOf contains the schema 'false'");
      return;
    }
    if (!m.is_object()) throw Error(at(path) + "allOf members must be schemas");
    ojson rest = m;
    if (m.contains("$ref")) {
      if (!m["$ref"].is_string()) throw Error(at(path) + "'$ref' must be a string");
      add(resolve(m["$ref"].get<std::string>(), path), depth + 1);
      rest.erase("$ref");
    }
    if (m.contains("allOf")) {
      if (!m["allOf"].is_array()) throw Error(at(path) + "'allOf' must be an array");
      for (const auto& x : m["allOf"]) add(x, depth + 1);
      rest.erase("allOf");
    }
    flat.push_back(std::move(rest));
  };
  for (const auto& m : members) add(m, 0);
  for (const auto& m : flat) out = merge_two_impl(out, m, path);
  return out;
}

}  // namespace deepinfer::grammar::detail
