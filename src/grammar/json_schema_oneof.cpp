// oneOf: the grammar generates the union of the branches (as anyOf), so a oneOf is accepted
// only where no value one branch generates can also be valid against another branch. The
// proof is conservative: what cannot be shown disjoint is not generated. Where branches
// overlap, the converter restricts them (one_of_restricted: a key another branch requires is
// left out, types another branch accepts are dropped) and generates only the restricted
// branches proven exclusive of every original branch (an error when none is).
#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <set>

#include "core/error.h"
#include "grammar/json_schema_layout.h"

namespace deepinfer::grammar::detail {
namespace {

const std::set<std::string> kAllTypes = {"object", "array", "string", "integer", "number", "boolean", "null"};

// The JSON type of a value ("integer" for an integer-valued number).
std::string type_of(const ojson& v) {
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  if (v.is_number_integer()) return "integer";
  const double d = v.get<double>();
  return std::isfinite(d) && d == std::floor(d) ? "integer" : "number";
}

// "integer" values are numbers too.
bool types_overlap(const std::string& a, const std::string& b) {
  return a == b || (a == "integer" && b == "number") || (a == "number" && b == "integer");
}

// What a (sub)schema allows, as far as this check reads it. `values` (const / enum) bound
// both what is generated and what is accepted; `gen_types` is what the converter generates
// (types inferred from keywords count, as the converter does); `acc_types` what a validator
// accepts (only an explicit "type" or the values restrict it).
struct Shape {
  const ojson* schema = nullptr;  // the normalised object schema, or null (true / unknown)
  std::optional<std::vector<ojson>> values;
  std::set<std::string> gen_types = kAllTypes, acc_types = kAllTypes;
};

class Checker {
 public:
  Checker(const std::string& path, const RefResolver& resolve, bool strict) : path_(path), resolve_(resolve), strict_(strict) {}

  // $ref (alone) resolved and allOf merged, as the converter does; null when that fails (the
  // converter reports it) or the schema is `true`.
  const ojson* normalise(const ojson& s0) {
    const ojson* s = &s0;
    for (int hop = 0; hop < 32; ++hop) {
      if (!s->is_object()) return nullptr;
      bool has_ref = s->contains("$ref"), has_all = s->contains("allOf");
      if (!has_ref && !has_all) return s;
      try {
        if (has_ref && !has_all) {
          bool siblings = false;
          for (auto& [k, v] : s->items()) siblings = siblings || (k != "$ref" && is_constraint(k));
          if (!siblings && (*s)["$ref"].is_string()) {
            s = &resolve_((*s)["$ref"].get<std::string>(), path_);
            continue;
          }
        }
        ojson members = ojson::array();
        ojson rest = *s;
        if (has_all) {
          members = (*s)["allOf"];
          rest.erase("allOf");
        }
        members.push_back(rest);
        keep_.push_back(merge_all_of(members, path_, resolve_));
        s = &keep_.back();
      } catch (const Error&) {
        return nullptr;
      }
    }
    return nullptr;
  }

  Shape shape(const ojson& s0) {
    Shape sh;
    const ojson* s = normalise(s0);
    if (!s) return sh;
    sh.schema = s;
    if (s->contains("type")) {
      const ojson& t = (*s)["type"];
      std::set<std::string> ts;
      if (t.is_string()) ts.insert(t.get<std::string>());
      if (t.is_array()) {
        for (const auto& x : t) {
          if (x.is_string()) ts.insert(x.get<std::string>());
        }
      }
      if (!ts.empty()) sh.gen_types = sh.acc_types = ts;
    } else {
      // The converter's inference (grammar/json_schema.cpp types_of): what is generated.
      auto has = [&](std::initializer_list<const char*> ks) {
        return std::any_of(ks.begin(), ks.end(), [&](const char* k) { return s->contains(k); });
      };
      std::set<std::string> ts;
      if (has({"properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties",
               "maxProperties"})) {
        ts.insert("object");
      }
      if (has({"items", "prefixItems", "additionalItems", "minItems", "maxItems"})) ts.insert("array");
      if (has({"minLength", "maxLength", "pattern", "format"})) ts.insert("string");
      if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) ts.insert("number");
      if (!ts.empty() && !s->contains("anyOf") && !s->contains("oneOf")) sh.gen_types = ts;
    }
    if (s->contains("const")) {
      sh.values = std::vector<ojson>{(*s)["const"]};
    } else if (s->contains("enum") && (*s)["enum"].is_array()) {
      sh.values = std::vector<ojson>((*s)["enum"].begin(), (*s)["enum"].end());
    }
    if (sh.values) {
      std::set<std::string> ts;
      for (const auto& v : *sh.values) ts.insert(type_of(v));
      sh.gen_types = ts;
      // acc_types stays as the explicit type (a value must also have it).
    }
    return sh;
  }

  // True when a validator rejects `v` against `b`.
  bool rejects(const Shape& b, const ojson& v) {
    if (b.values && std::find(b.values->begin(), b.values->end(), v) == b.values->end()) return true;
    const std::string t = type_of(v);
    if (std::none_of(b.acc_types.begin(), b.acc_types.end(), [&](const std::string& x) { return x == t || (t == "integer" && x == "number"); })) {
      return true;
    }
    return false;
  }

  // True when no value `a` generates is valid against `b`; else *why is left empty.
  bool exclusive(const Shape& a, const Shape& b, int depth = 0) {
    if (a.values) {
      bool all = true;
      for (const auto& v : *a.values) all = all && rejects(b, v);
      if (all) return true;
    }
    bool types_meet = false;
    for (const auto& x : a.gen_types) {
      for (const auto& y : b.acc_types) types_meet = types_meet || types_overlap(x, y);
    }
    if (!types_meet) return true;
    if (b.values && !a.values) {
      // b accepts only its values: a must generate none of them (only a type check here).
      bool all = true;
      for (const auto& v : *b.values) {
        const std::string t = type_of(v);
        all = all && std::none_of(a.gen_types.begin(), a.gen_types.end(), [&](const std::string& x) { return types_overlap(x, t); });
      }
      if (all) return true;
    }
    // Arrays: a always writes at least one item, its items are never valid against b's
    // items schema, and b's items schema applies to every item.
    if (a.gen_types == std::set<std::string>{"array"} && a.schema && b.schema && !a.values && depth < 8) {
      const ojson& as = *a.schema;
      const ojson& bs = *b.schema;
      auto single_items = [](const ojson& x) {
        return x.contains("items") && !x["items"].is_array() && !x.contains("prefixItems");
      };
      const bool nonempty = as.contains("minItems") && as["minItems"].is_number_integer() && as["minItems"].get<int64_t>() >= 1;
      if (nonempty && single_items(as) && single_items(bs) && exclusive(shape(as["items"]), shape(bs["items"]), depth + 1)) {
        return true;
      }
    }
    // Objects: a always writes a required key that b rejects (a different const/enum or
    // type, or a key b forbids), or b requires a key a never writes.
    if (a.gen_types == std::set<std::string>{"object"} && a.schema && b.schema && !a.values) {
      const ojson& as = *a.schema;
      const ojson& bs = *b.schema;
      const ojson empty = ojson::object();
      const ojson& ap = as.contains("properties") && as["properties"].is_object() ? as["properties"] : empty;
      const ojson& bp = bs.contains("properties") && bs["properties"].is_object() ? bs["properties"] : empty;
      const bool b_closed = bs.contains("additionalProperties") && bs["additionalProperties"] == false;
      const bool a_closed = as.contains("additionalProperties") ? as["additionalProperties"] == false : strict_;
      if (as.contains("required") && as["required"].is_array()) {
        for (const auto& r : as["required"]) {
          if (!r.is_string()) continue;
          const std::string key = r.get<std::string>();
          if (!bp.contains(key)) {
            if (b_closed) return true;
            continue;
          }
          if (!ap.contains(key) || depth >= 8) continue;
          if (exclusive(shape(ap[key]), shape(bp[key]), depth + 1)) return true;
        }
      }
      if (bs.contains("required") && bs["required"].is_array()) {
        for (const auto& r : bs["required"]) {
          if (!r.is_string()) continue;
          const std::string key = r.get<std::string>();
          if ((a_closed && !ap.contains(key)) || (ap.contains(key) && ap[key] == false)) return true;
        }
      }
    }
    return false;
  }

 private:
  const std::string& path_;
  const RefResolver& resolve_;
  bool strict_;
  std::deque<ojson> keep_;  // merged schemas the shapes point into
};

}  // namespace

std::string one_of_overlap(const std::vector<ojson>& branches, const std::string& path, const RefResolver& resolve, bool strict,
                           const std::vector<size_t>& index) {
  Checker c(path, resolve, strict);
  std::vector<Shape> shapes;
  for (const auto& b : branches) shapes.push_back(c.shape(b));
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (size_t j = 0; j < shapes.size(); ++j) {
      if (i == j || c.exclusive(shapes[i], shapes[j])) continue;
      const std::string bi = std::to_string(index.at(i)), bj = std::to_string(index.at(j));
      return at(path) + "'oneOf' branches " + bi + " and " + bj + " are not provably exclusive: a value generated for branch " +
             bi + " could also be valid against branch " + bj +
             ", which 'oneOf' forbids. Make them exclusive (different types, different const/enum values, a required "
             "property with different const values, a required property the other branch does not require, or a "
             "required key the other branch forbids with \"additionalProperties\": false) or use 'anyOf'";
    }
  }
  return "";
}

std::vector<ojson> one_of_restricted(const std::vector<ojson>& branches, const std::string& path, const RefResolver& resolve,
                                     bool strict) {
  std::vector<ojson> out;
  std::vector<std::set<std::string>> required;
  for (const auto& b : branches) {
    out.push_back(merge_all_of(ojson::array({b}), path, resolve));
    std::set<std::string> r;
    if (out.back().contains("required") && out.back()["required"].is_array()) {
      for (const auto& k : out.back()["required"]) {
        if (k.is_string()) r.insert(k.get<std::string>());
      }
    }
    required.push_back(std::move(r));
  }
  Checker c(path, resolve, strict);
  std::vector<Shape> originals;
  for (const auto& b : branches) originals.push_back(c.shape(b));
  for (size_t i = 0; i < out.size(); ++i) {
    for (size_t j = 0; j < out.size(); ++j) {
      if (i == j) continue;
      for (const auto& k : required[j]) {
        if (required[i].count(k)) continue;
        if (!out[i].contains("properties") || !out[i]["properties"].is_object()) out[i]["properties"] = ojson::object();
        out[i]["properties"][k] = false;
        break;
      }
    }
    // Arrays: at least one item where another branch accepts arrays (the empty array would
    // be valid against both).
    const Shape own = c.shape(out[i]);
    const bool max_zero = out[i].contains("maxItems") && out[i]["maxItems"] == 0;
    const bool min_zero = !out[i].contains("minItems") || out[i]["minItems"] == 0;
    if (own.gen_types == std::set<std::string>{"array"} && min_zero && !max_zero) {
      for (size_t j = 0; j < out.size(); ++j) {
        if (i != j && originals[j].acc_types.count("array")) {
          out[i]["minItems"] = 1;
          break;
        }
      }
    }
    // Types no other branch accepts (integers count as numbers both ways).
    std::set<std::string> types = c.shape(out[i]).gen_types;
    for (size_t j = 0; j < out.size(); ++j) {
      if (i == j || originals[j].values) continue;
      std::erase_if(types, [&](const std::string& t) {
        return std::any_of(originals[j].acc_types.begin(), originals[j].acc_types.end(), [&](const std::string& a) {
          return types_overlap(t, a) || (t == "number" && a == "integer");
        });
      });
    }
    if (!types.empty() && types != c.shape(out[i]).gen_types) {
      ojson list = ojson::array();
      for (const auto& t : types) list.push_back(t);
      try {
        out[i] = merge_all_of(ojson::array({out[i], ojson{{"type", list}}}), path, resolve);
      } catch (const Error&) {
        // the types do not combine with the branch's own: left as it is
      }
    }
  }
  return out;
}

std::vector<bool> one_of_exclusive(const std::vector<ojson>& generators, const std::vector<ojson>& acceptors,
                                   const std::string& path, const RefResolver& resolve, bool strict) {
  Checker c(path, resolve, strict);
  std::vector<bool> keep(generators.size(), true);
  for (size_t i = 0; i < generators.size(); ++i) {
    const Shape g = c.shape(generators[i]);
    for (size_t j = 0; j < acceptors.size() && keep[i]; ++j) {
      if (i != j && !c.exclusive(g, c.shape(acceptors[j]))) keep[i] = false;
    }
  }
  return keep;
}

}  // namespace deepinfer::grammar::detail
