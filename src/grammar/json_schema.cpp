// JSON Schema -> Grammar (see grammar/json_schema.h for the supported subset).
#include "grammar/json_schema.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "grammar/automaton.h"
#include "grammar/json_schema_layout.h"
#include "grammar/json_string.h"
#include "grammar/regex_parser.h"
#include "grammar/utf8_ranges.h"

namespace deepinfer::grammar {
namespace {

using ojson = nlohmann::ordered_json;

// Numbers whose text the parser rounded: the double's bits -> the text as written.
using InexactNumbers = std::map<uint64_t, std::string>;

// Deepest nesting of arrays and objects accepted in a schema document: the converter and
// nlohmann's copies and comparisons recurse over the document.
constexpr int kMaxDocumentDepth = 512;

std::string too_deep() {
  return "JSON schema: the document nests arrays/objects deeper than " + std::to_string(kMaxDocumentDepth) + " levels";
}

// The nesting depth of a parsed document (an explicit stack), for the ojson entry point.
void check_document_depth(const ojson& doc) {
  std::vector<std::pair<const ojson*, int>> stack{{&doc, 1}};
  while (!stack.empty()) {
    auto [v, d] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    if (d > kMaxDocumentDepth) throw Error(too_deep());
    for (const auto& x : *v) stack.push_back({&x, d + 1});
  }
}

// A pass over the text before it is parsed into a document: its depth (stopping at the
// limit, before any recursive code sees it) and the numbers the parser would round.
struct PrePass : nlohmann::json_sax<ojson> {
  InexactNumbers inexact;
  int depth = 0;
  bool too_deep = false;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t v, const string_t& text) override {
    if (!detail::number_text_is_exact(text, v)) inexact.emplace(std::bit_cast<uint64_t>(v), text);
    return true;
  }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return --depth, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
  bool open() {
    if (++depth > kMaxDocumentDepth) too_deep = true;
    return !too_deep;
  }
};

// Keywords an enum/const value is checked against (anything else beside enum/const is an error).
const std::set<std::string> kValueChecks = {"type", "enum", "const", "minimum", "maximum", "exclusiveMinimum",
                                            "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems"};
const ojson kFalse = false;
const std::set<std::string> kTypes = {"object", "array", "string", "integer", "number", "boolean", "null"};

using detail::at;
using detail::check_schema_keywords;
using detail::is_constraint;

// "name" as a JSON string literal (canonical escapes).
std::string json_quoted(const std::string& name) {
  std::string s = "\"";
  s += json_escape(name);
  s += '"';
  return s;
}

class Converter {
 public:
  Converter(const ojson& root, const JsonSchemaOptions& o, const InexactNumbers& inexact)
      : root_(root), o_(o), inexact_(inexact) {
    layout_ = detail::make_layout(g_, o);
  }

  Grammar run() {
    int32_t root_rule = g_.declare_rule("root");
    ref_rules_["#"] = root_rule;
    g_.define_rule(root_rule, visit(root_, "#"));
    g_.set_root(root_rule);
    return std::move(g_);
  }

 private:
  // ---------------------------------------------------------------- dispatch
  int32_t visit(const ojson& s, const std::string& path) {
    if (++depth_ > 200) throw Error(at(path) + "schema nested too deeply");
    int32_t e = visit_inner(s, path);
    --depth_;
    return e;
  }

  int32_t visit_inner(const ojson& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) throw Error(at(path) + "the schema 'false' accepts no value");
      return any_value();
    }
    if (!s.is_object()) throw Error(at(path) + "a schema must be an object or a boolean");
    check_schema_keywords(s, path, o_.strict_keywords);
    if (s.contains("$ref")) {
      bool siblings = false;
      for (auto& [k, v] : s.items()) siblings = siblings || (k != "$ref" && is_constraint(k));
      if (!siblings) return g_.ref(ref_rule(s["$ref"], path));
      return visit(detail::merge_all_of(ojson::array({ojson{{"$ref", s["$ref"]}}, without(s, {"$ref"})}), path, resolver()), path);
    }
    if (s.contains("if") || s.contains("then") || s.contains("else")) return if_then_else_expr(s, path);
    if (s.contains("not")) {
      const ojson rest = without(s, {"not"});
      const ojson addition = not_as_schema(s["not"], rest, path + "/not");
      try {
        return visit(detail::merge_all_of(ojson::array({rest, addition}), path, resolver()), path);
      } catch (const detail::Unsatisfiable& e) {
        throw Error(at(path) + "no value satisfies the schema with its 'not': " + e.what());
      }
    }
    if (s.contains("allOf")) {
      const ojson& all = s["allOf"];
      if (!all.is_array() || all.empty()) throw Error(at(path) + "'allOf' must be a non-empty array");
      ojson members = all;
      members.push_back(without(s, {"allOf"}));
      return visit(detail::merge_all_of(members, path + "/allOf", resolver()), path + "/allOf");
    }
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (!s.contains(kw)) continue;
      if (s.contains("anyOf") && s.contains("oneOf")) throw Error(at(path) + "both 'anyOf' and 'oneOf' are not supported");
      const ojson& branches = s[kw];
      if (!branches.is_array() || branches.empty()) throw Error(at(path) + "'" + kw + "' must be a non-empty array");
      ojson base = without(s, {kw});
      bool has_base = false;
      for (auto& [k, v] : base.items()) has_base = has_base || is_constraint(k);
      std::vector<ojson> merged;
      std::vector<std::string> paths;
      std::vector<size_t> index;
      for (size_t i = 0; i < branches.size(); ++i) {
        const std::string p = path + "/" + kw + "/" + std::to_string(i);
        if (branches[i] == false) continue;  // matches nothing: never the branch that holds
        try {
          ojson m = has_base ? detail::merge_all_of(ojson::array({base, branches[i]}), p, resolver()) : branches[i];
          if (unsatisfiable(m, p)) continue;
          merged.push_back(std::move(m));
        } catch (const detail::Unsatisfiable&) {
          continue;  // no value satisfies this branch: it never holds
        }
        paths.push_back(p);
        index.push_back(i);
      }
      if (merged.empty()) throw Error(at(path) + "no '" + kw + "' branch can be satisfied");
      if (std::string_view(kw) == "oneOf") {
        std::string why = detail::one_of_overlap(merged, path + "/oneOf", resolver(), o_.strict, index);
        if (!why.empty()) {
          // Each branch leaves out a key the others require and keeps to types no other
          // branch accepts; a branch that still overlaps another is not generated.
          std::vector<ojson> restricted = detail::one_of_restricted(merged, path + "/oneOf", resolver(), o_.strict);
          std::vector<bool> keep = detail::one_of_exclusive(restricted, merged, path + "/oneOf", resolver(), o_.strict);
          std::vector<ojson> kept;
          std::vector<std::string> kept_paths;
          for (size_t i = 0; i < keep.size(); ++i) {
            if (!keep[i]) continue;
            kept.push_back(std::move(restricted[i]));
            kept_paths.push_back(paths[i]);
          }
          if (kept.empty()) throw Error(why);
          merged = std::move(kept);
          paths = std::move(kept_paths);
        }
      }
      std::vector<int32_t> alts;
      for (size_t i = 0; i < merged.size(); ++i) alts.push_back(visit(merged[i], paths[i]));
      return g_.alt(alts);
    }
    if (s.contains("dependentRequired") || s.contains("dependentSchemas") || s.contains("dependencies")) {
      return dependencies_expr(s, path);
    }
    std::vector<std::string> types = types_of(s, path);
    if (s.contains("const") || s.contains("enum")) {
      for (auto& [k, v] : s.items()) {
        if (is_constraint(k) && !kValueChecks.count(k)) {
          throw Error(at(path) + "'enum'/'const' together with '" + k + "' is not supported");
        }
      }
      ojson values = ojson::array();
      if (s.contains("const")) {
        values.push_back(s["const"]);
      } else if (!s["enum"].is_array()) {
        throw Error(at(path + "/enum") + "'enum' must be an array");
      } else {
        values = s["enum"];
      }
      value_path_ = path + (s.contains("const") ? "/const" : "/enum");
      std::vector<int32_t> alts;
      for (const auto& v : values) {
        if ((types.empty() || value_has_type(v, types)) && value_in_bounds(v, s)) alts.push_back(value_expr(v));
      }
      if (alts.empty()) {
        throw Error(at(path) + (s.contains("const") ? "'const' does not match 'type' or the bounds"
                                                    : "no 'enum' value matches the schema's type or bounds"));
      }
      return g_.alt(alts);
    }
    if (types.empty()) return any_value();
    std::vector<int32_t> alts;
    for (const auto& t : types) alts.push_back(type_expr(t, s, path));
    return g_.alt(alts);
  }

  // dependentRequired, dependentSchemas and draft-04..07 dependencies: for each key A with a
  // dependency, objects without A (`"properties": {A: false}`) or with A and what it
  // requires (its keys required, its schema merged), generated as alternatives. Exact for
  // up to kMaxSplitDependencies optional keys; further optional keys with dependencies are
  // left out of the generated objects.
  static constexpr int kMaxSplitDependencies = 3;
  int32_t dependencies_expr(const ojson& s, const std::string& path) {
    struct Dep {
      std::string key;
      ojson addition;  // what holds when the key is present
    };
    std::vector<Dep> deps;
    auto add_required = [&](const std::string& key, const ojson& list, const std::string& where) {
      if (!list.is_array()) throw Error(at(where) + "must be an array of property names");
      ojson req = ojson::array({key});
      for (const auto& x : list) {
        if (!x.is_string()) throw Error(at(where) + "must be an array of property names");
        req.push_back(x);
      }
      deps.push_back({key, ojson{{"required", req}}});
    };
    auto add_schema = [&](const std::string& key, const ojson& schema) {
      deps.push_back({key, ojson{{"required", ojson::array({key})}, {"allOf", ojson::array({schema})}}});
    };
    for (const char* kw : {"dependentRequired", "dependentSchemas", "dependencies"}) {
      if (!s.contains(kw)) continue;
      if (!s[kw].is_object()) throw Error(at(path + "/" + kw) + "'" + kw + "' must be an object");
      for (auto& [k, v] : s[kw].items()) {
        const std::string where = path + "/" + kw + "/" + k;
        if (std::string_view(kw) == "dependentRequired" || (std::string_view(kw) == "dependencies" && v.is_array())) {
          add_required(k, v, where);
        } else {
          add_schema(k, v);
        }
      }
    }
    const ojson rest = without(s, {"dependentRequired", "dependentSchemas", "dependencies"});
    // A variant that certainly has no valid object (a required key its properties or
    // additionalProperties forbid) is dropped.
    auto possible = [&](const ojson& v) {
      if (!v.contains("required") || !v["required"].is_array()) return true;
      const bool closed = v.contains("additionalProperties") ? v["additionalProperties"] == false : o_.strict;
      for (const auto& r : v["required"]) {
        if (!r.is_string()) continue;
        const std::string k = r.get<std::string>();
        const bool declared = v.contains("properties") && v["properties"].is_object() && v["properties"].contains(k);
        if (declared && v["properties"][k] == false) return false;
        if (!declared && closed && !v.contains("patternProperties")) return false;
      }
      return true;
    };
    auto merged = [&](const ojson& v, const ojson& addition, std::vector<ojson>& out) {
      try {
        ojson m = detail::merge_all_of(ojson::array({v, addition}), path, resolver());
        if (possible(m)) out.push_back(std::move(m));
      } catch (const Error&) {
        // no object both satisfies the variant and the addition: the variant is dropped
      }
    };
    std::vector<ojson> variants = {rest};
    int split = 0;
    for (const auto& d : deps) {
      const ojson absent = ojson{{"properties", ojson{{d.key, false}}}};
      std::vector<ojson> next;
      for (const auto& v : variants) {
        const bool required = v.contains("required") && v["required"].is_array() &&
                              std::find(v["required"].begin(), v["required"].end(), ojson(d.key)) != v["required"].end();
        if (required || split < kMaxSplitDependencies) merged(v, d.addition, next);
        if (!required) merged(v, absent, next);
      }
      split += 1;
      variants = std::move(next);
      if (variants.empty()) throw Error(at(path) + "no object satisfies the dependencies on '" + d.key + "'");
    }
    std::vector<int32_t> alts;
    for (const auto& v : variants) alts.push_back(visit(v, path));
    return g_.alt(alts);
  }

  // True where the schema certainly has no valid value: an allOf (or $ref with siblings)
  // whose members do not meet, or const/enum values none of which has the schema's type.
  // Side-effect free (no grammar is built).
  bool unsatisfiable(const ojson& s, const std::string& path) {
    if (!s.is_object()) return s == false;
    // `not` of a schema without constraints ({} or true): nothing is valid.
    auto not_everything = [](const ojson& x) {
      if (!x.contains("not")) return false;
      const ojson& n = x["not"];
      if (n == true) return true;
      if (!n.is_object()) return false;
      for (auto& [k, v] : n.items()) {
        if (is_constraint(k)) return false;
      }
      return true;
    };
    if (not_everything(s)) return true;
    // An object-only schema requiring a key that additionalProperties: false forbids.
    if (s.contains("type") && (s["type"] == "object" || s["type"] == ojson::array({"object"})) && s.contains("required") &&
        s["required"].is_array() && s.contains("additionalProperties") && s["additionalProperties"] == false &&
        !s.contains("patternProperties")) {
      for (const auto& r : s["required"]) {
        if (r.is_string() && !(s.contains("properties") && s["properties"].is_object() && s["properties"].contains(r.get<std::string>()))) return true;
      }
    }
    try {
      if (s.contains("allOf") || (s.contains("$ref") && s.size() > 1)) {
        ojson members = ojson::array();
        ojson rest = without(s, {"allOf", "$ref"});
        if (s.contains("$ref")) members.push_back(ojson{{"$ref", s["$ref"]}});
        if (s.contains("allOf") && s["allOf"].is_array()) {
          for (const auto& m : s["allOf"]) members.push_back(m);
        }
        members.push_back(rest);
        if (not_everything(detail::merge_all_of(members, path, resolver()))) return true;
      }
    } catch (const detail::Unsatisfiable&) {
      return true;
    } catch (const Error&) {
      return false;  // reported where the schema is converted
    }
    if ((s.contains("const") || s.contains("enum")) && s.contains("type")) {
      std::vector<std::string> types;
      try {
        types = types_of(s, path);
      } catch (const Error&) {
        return false;
      }
      ojson values = s.contains("const") ? ojson::array({s["const"]}) : s["enum"];
      if (!values.is_array()) return false;
      return std::none_of(values.begin(), values.end(), [&](const ojson& v) { return value_has_type(v, types); });
    }
    return false;
  }

  // `not: n` beside the schema `rest`, as a schema to merge into `rest`: exact for `not`
  // over types (their complement; a number type is left out with integer), over required
  // keys (directly, in allOf, in anyOf: keys left out), over const/enum where `rest` lists
  // its values, and `not: false`. Anything else is an error naming the reason.
  ojson not_as_schema(const ojson& n0, const ojson& rest, const std::string& path) {
    const ojson* n = &n0;
    for (int hop = 0; hop < 32 && n->is_object() && n->contains("$ref") && n->size() == 1 && (*n)["$ref"].is_string(); ++hop) {
      n = &resolve((*n)["$ref"].get<std::string>(), path);
    }
    if (*n == false) return ojson::object();
    auto unsupported = [&]() -> Error {
      return Error(at(path) + "'not' is enforced only over 'type', 'required' (also in allOf / anyOf of required), and "
                   "'enum'/'const' where the schema lists its own values: a grammar cannot complement other schemas");
    };
    if (!n->is_object()) throw unsupported();
    std::set<std::string> keys;
    for (auto& [k, v] : n->items()) {
      if (is_constraint(k)) keys.insert(k);
    }
    if (keys.empty()) throw Error(at(path) + "'not' of a schema every value satisfies: no value is valid");
    std::set<std::string> rest_required;
    if (rest.contains("required") && rest["required"].is_array()) {
      for (const auto& r : rest["required"]) {
        if (r.is_string()) rest_required.insert(r.get<std::string>());
      }
    }
    // Required-key sets of which each must be incomplete (all of them: the anyOf form).
    auto required_sets = [&](const ojson& x, std::vector<std::vector<std::string>>& out) -> bool {
      std::set<std::string> ks;
      for (auto& [k, v] : x.items()) {
        if (is_constraint(k)) ks.insert(k);
      }
      if (ks != std::set<std::string>{"required"} && ks != std::set<std::string>{"required", "type"}) return false;
      if (ks.count("type") && x["type"] != "object") return false;
      if (!x["required"].is_array()) return false;
      std::vector<std::string> set;
      for (const auto& r : x["required"]) {
        if (!r.is_string()) return false;
        set.push_back(r.get<std::string>());
      }
      out.push_back(std::move(set));
      return true;
    };
    std::vector<std::vector<std::string>> sets;
    bool ok = false;
    if (keys == std::set<std::string>{"allOf"} && (*n)["allOf"].is_array()) {
      std::vector<std::vector<std::string>> parts;
      ok = std::all_of((*n)["allOf"].begin(), (*n)["allOf"].end(), [&](const ojson& m) { return m.is_object() && required_sets(m, parts); });
      std::vector<std::string> all;
      for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
      if (ok) sets.push_back(all);
    } else if (keys == std::set<std::string>{"anyOf"} && (*n)["anyOf"].is_array()) {
      ok = std::all_of((*n)["anyOf"].begin(), (*n)["anyOf"].end(), [&](const ojson& m) { return m.is_object() && required_sets(m, sets); });
    } else {
      ok = required_sets(*n, sets);
    }
    if (ok) {
      ojson props = ojson::object();
      for (const auto& set : sets) {
        auto it = std::find_if(set.begin(), set.end(), [&](const std::string& k) { return !rest_required.count(k); });
        if (it == set.end()) throw Error(at(path) + "'not' forbids keys the schema requires: no value is valid");
        props[*it] = false;
      }
      return ojson{{"properties", props}};
    }
    if (keys == std::set<std::string>{"type"}) {
      std::vector<std::string> excluded = types_of(*n, path);
      std::set<std::string> left = kTypes;
      for (const auto& t : excluded) {
        left.erase(t);
        if (t == "number" || t == "integer") left.erase("number"), left.erase("integer");
      }
      if (left.empty()) throw Error(at(path) + "'not' excludes every type: no value is valid");
      ojson list = ojson::array();
      for (const auto& t : left) list.push_back(t);
      return ojson{{"type", list}};
    }
    if ((keys == std::set<std::string>{"enum"} || keys == std::set<std::string>{"const"}) && (rest.contains("enum") || rest.contains("const"))) {
      const ojson excluded = n->contains("const") ? ojson::array({(*n)["const"]}) : (*n)["enum"];
      const ojson own = rest.contains("const") ? ojson::array({rest["const"]}) : rest["enum"];
      if (!excluded.is_array() || !own.is_array()) throw unsupported();
      ojson keep = ojson::array();
      for (const auto& v : own) {
        const nlohmann::json plain = v;
        bool out = false;
        for (const auto& x : excluded) out = out || (x.is_number() && v.is_number() ? x == v : nlohmann::json(x) == plain);
        if (!out) keep.push_back(v);
      }
      if (keep.empty()) throw Error(at(path) + "'not' excludes every value of the schema's 'enum'/'const'");
      return ojson{{"enum", keep}};
    }
    throw unsupported();
  }

  // if / then / else as alternatives: objects where the condition holds (with `then`) and
  // objects where it fails (with `else`). Conditions: required keys (fails: one left out),
  // a property's const or enum, with or without requiring it (fails: the key left out where
  // not required, or its value outside the list where the property lists its own values;
  // otherwise only objects where the condition holds are generated). Others are an error.
  int32_t if_then_else_expr(const ojson& s, const std::string& path) {
    const ojson rest = without(s, {"if", "then", "else"});
    if (!s.contains("if")) return visit(rest, path);  // then / else without if: no effect
    const ojson& cond = s["if"];
    const ojson then_s = s.contains("then") ? s["then"] : ojson(true);
    const ojson else_s = s.contains("else") ? s["else"] : ojson(true);
    auto unsupported = [&]() {
      return Error(at(path + "/if") + "'if' is enforced only for conditions on required keys or on one property's "
                   "const/enum: a grammar cannot branch on other conditions");
    };
    if (cond == true) return visit(detail::merge_all_of(ojson::array({rest, then_s}), path, resolver()), path);
    if (cond == false) return visit(detail::merge_all_of(ojson::array({rest, else_s}), path, resolver()), path);
    if (!cond.is_object()) throw unsupported();
    std::set<std::string> keys;
    for (auto& [k, v] : cond.items()) {
      if (is_constraint(k)) keys.insert(k);
    }
    std::vector<ojson> holds, fails;  // additions for the two cases
    if (keys == std::set<std::string>{"required"}) {
      holds.push_back(ojson{{"required", cond["required"]}});
      fails.push_back(not_as_schema(ojson{{"required", cond["required"]}}, rest, path + "/if"));
    } else if (keys == std::set<std::string>{"properties"} || keys == std::set<std::string>{"properties", "required"}) {
      const ojson& props = cond["properties"];
      if (!props.is_object() || props.size() != 1) throw unsupported();
      const std::string k = props.begin().key();
      const ojson& ks = props.begin().value();
      if (!ks.is_object() || !(ks.contains("const") || ks.contains("enum"))) throw unsupported();
      for (auto& [kk, v] : ks.items()) {
        if (is_constraint(kk) && kk != "const" && kk != "enum") throw unsupported();
      }
      const bool req = keys.count("required") > 0;
      if (req && cond["required"] != ojson::array({k})) throw unsupported();
      ojson h = ojson{{"properties", ojson{{k, ks}}}};
      if (req) h["required"] = ojson::array({k});
      holds.push_back(h);
      if (req) fails.push_back(ojson{{"properties", ojson{{k, false}}}});
      // The key present with another value: where the property lists its own values.
      const ojson merged_rest = detail::merge_all_of(ojson::array({rest}), path, resolver());
      const ojson* own = merged_rest.contains("properties") && merged_rest["properties"].is_object() &&
                                 merged_rest["properties"].contains(k)
                             ? &merged_rest["properties"][k]
                             : nullptr;
      if (own && own->is_object() && (own->contains("enum") || own->contains("const"))) {
        fails.push_back(ojson{{"properties", ojson{{k, ojson{{"not", ks}}}}}, {"required", ojson::array({k})}});
      }
    } else {
      throw unsupported();
    }
    std::vector<int32_t> alts;
    auto add = [&](const ojson& addition, const ojson& branch) {
      try {
        const ojson m = detail::merge_all_of(ojson::array({rest, addition, branch}), path, resolver());
        if (!unsatisfiable(m, path)) alts.push_back(visit(m, path));
      } catch (const detail::Unsatisfiable&) {
        // this case has no valid value
      }
    };
    for (const auto& h : holds) add(h, then_s);
    // Only objects fail these conditions (other values satisfy them vacuously).
    for (const auto& f : fails) add(detail::merge_all_of(ojson::array({f, ojson{{"type", "object"}}}), path, resolver()), else_s);
    if (alts.empty()) throw Error(at(path) + "no value satisfies the schema with its 'if'/'then'/'else'");
    return g_.alt(alts);
  }

  static ojson without(const ojson& s, std::initializer_list<const char*> keys) {
    ojson o = s;
    for (const char* k : keys) o.erase(k);
    return o;
  }

  std::vector<std::string> types_of(const ojson& s, const std::string& path) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const ojson& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const auto& x : t) {
          if (!x.is_string()) throw Error(at(path + "/type") + "'type' must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        throw Error(at(path + "/type") + "'type' must be a string or a non-empty array of strings");
      }
      for (const auto& x : types) {
        if (!kTypes.count(x)) throw Error(at(path + "/type") + "unknown type '" + x + "'");
      }
      return types;
    }
    auto has = [&](std::initializer_list<const char*> ks) {
      for (const char* k : ks) {
        if (s.contains(k)) return true;
      }
      return false;
    };
    if (has({"properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties",
             "maxProperties", "dependentRequired", "dependentSchemas", "dependencies"})) {
      types.push_back("object");
    }
    if (has({"items", "prefixItems", "additionalItems", "minItems", "maxItems"})) types.push_back("array");
    if (has({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
    if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})) types.push_back("number");
    return types;
  }

  static bool value_has_type(const ojson& v, const std::vector<std::string>& types) {
    for (const auto& t : types) {
      if ((t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "string" && v.is_string()) ||
          (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null())) {
        return true;
      }
      if (t == "integer" && v.is_number() &&
          (v.is_number_integer() || (std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>())))) {
        return true;
      }
    }
    return false;
  }

  // The bounds of `s` that apply to `v`'s type hold.
  bool value_in_bounds(const ojson& v, const ojson& s) const {
    if (v.is_number()) {
      check_exact(v, value_path_, "the value");
      const detail::Decimal x = detail::decimal_of(v);
      auto cmp = [&](const char* k) {
        check_exact(s[k], value_path_, std::string("'") + k + "'");
        return detail::compare_decimal(x, detail::decimal_of(s[k]));
      };
      auto num = [&](const char* k) { return s.contains(k) && s[k].is_number(); };
      auto flag = [&](const char* k) { return s.contains(k) && s[k].is_boolean() && s[k].get<bool>(); };
      if (num("minimum") && cmp("minimum") < (flag("exclusiveMinimum") ? 1 : 0)) return false;
      if (num("maximum") && cmp("maximum") > (flag("exclusiveMaximum") ? -1 : 0)) return false;
      if (num("exclusiveMinimum") && cmp("exclusiveMinimum") <= 0) return false;
      if (num("exclusiveMaximum") && cmp("exclusiveMaximum") >= 0) return false;
    }
    auto count_ok = [&](size_t n, const char* lo, const char* hi) {
      if (s.contains(lo) && s[lo].is_number_integer() && static_cast<int64_t>(n) < s[lo].get<int64_t>()) return false;
      if (s.contains(hi) && s[hi].is_number_integer() && static_cast<int64_t>(n) > s[hi].get<int64_t>()) return false;
      return true;
    };
    if (v.is_string()) {
      size_t n = 0;
      for (unsigned char c : v.get_ref<const std::string&>()) n += (c & 0xC0) != 0x80;
      if (!count_ok(n, "minLength", "maxLength")) return false;
    }
    if (v.is_array() && !count_ok(v.size(), "minItems", "maxItems")) return false;
    return true;
  }

  int32_t as_rule(const char* prefix, int32_t expr) {
    int32_t r = g_.new_rule(prefix);
    g_.define_rule(r, expr);
    return g_.ref(r);
  }

  int32_t any_value() { return g_.ref(detail::json_value_rule(g_, layout_)); }

  int32_t type_expr(const std::string& t0, const ojson& s, const std::string& path) {
    // multipleOf 1 (the only value check_schema_keywords lets through): integers.
    const std::string t = t0 == "number" && s.contains("multipleOf") ? "integer" : t0;
    if (t == "object") return as_rule("object", object_expr(s, path));
    if (t == "array") return as_rule("array", array_expr(s, path));
    if (t == "string") return string_expr(s, path);
    if (t == "integer" || t == "number") return number_expr(s, path, t == "integer");
    if (t == "boolean") return g_.alt({g_.literal("true"), g_.literal("false")});
    return g_.literal("null");
  }

  // A number the JSON parser could not hold exactly (its text is in inexact_) would be
  // enforced or written as a different value: an error naming it.
  void check_exact(const ojson& v, const std::string& where, const std::string& what) const {
    if (!v.is_number_float()) return;
    auto it = inexact_.find(std::bit_cast<uint64_t>(v.get<double>()));
    if (it == inexact_.end()) return;
    throw Error(at(where) + what + " " + it->second +
                " cannot be represented exactly (integers are exact up to 64 bits, other numbers are read as doubles; it "
                "would become " + v.dump() + "); write a value a double or a 64-bit integer holds exactly");
  }

  // ---------------------------------------------------------------- values
  int32_t value_expr(const ojson& v) {
    check_exact(v, value_path_, "the value");
    if (v.is_object()) {
      std::vector<int32_t> members;
      for (auto& [k, x] : v.items()) members.push_back(g_.seq({g_.literal(json_quoted(k)), layout_.colon, value_expr(x)}));
      return bracketed("{", members, "}");
    }
    if (v.is_array()) {
      std::vector<int32_t> items;
      for (const auto& x : v) items.push_back(value_expr(x));
      return bracketed("[", items, "]");
    }
    if (v.is_string()) return g_.literal(json_quoted(v.get<std::string>()));
    if (v.is_number_float() && !std::isfinite(v.get<double>())) throw Error("JSON schema: non-finite number in const/enum");
    return g_.literal(v.dump());
  }
  int32_t bracketed(const char* open, const std::vector<int32_t>& items, const char* close) {
    std::vector<int32_t> seq{g_.literal(open)};
    for (size_t i = 0; i < items.size(); ++i) {
      seq.push_back(i == 0 ? layout_.ws : layout_.comma);
      seq.push_back(items[i]);
    }
    if (!items.empty()) seq.push_back(layout_.ws);
    seq.push_back(g_.literal(close));
    return g_.seq(seq);
  }

  // ---------------------------------------------------------------- numbers
  int32_t number_expr(const ojson& s, const std::string& path, bool integer) {
    detail::Decimal lo, hi;
    detail::NumberBounds b;
    auto bound = [&](const char* key) -> const ojson* {
      if (!s.contains(key)) return nullptr;
      const ojson& v = s[key];
      if (v.is_boolean()) return nullptr;  // draft-4 exclusive flags, read below
      if (!v.is_number()) throw Error(at(path + "/" + key) + "'" + key + "' must be a number");
      check_exact(v, path + "/" + key, std::string("'") + key + "'");
      return &v;
    };
    if (const ojson* v = bound("minimum")) {
      lo = detail::decimal_of(*v);
      b.lo = &lo;
      b.lo_exclusive = s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean() && s["exclusiveMinimum"].get<bool>();
    }
    if (const ojson* v = bound("exclusiveMinimum")) {
      detail::Decimal x = detail::decimal_of(*v);
      if (!b.lo || detail::compare_decimal(x, lo) >= 0) {
        lo = x;
        b.lo = &lo;
        b.lo_exclusive = true;
      }
    }
    if (const ojson* v = bound("maximum")) {
      hi = detail::decimal_of(*v);
      b.hi = &hi;
      b.hi_exclusive = s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean() && s["exclusiveMaximum"].get<bool>();
    }
    if (const ojson* v = bound("exclusiveMaximum")) {
      detail::Decimal x = detail::decimal_of(*v);
      if (!b.hi || detail::compare_decimal(x, hi) <= 0) {
        hi = x;
        b.hi = &hi;
        b.hi_exclusive = true;
      }
    }
    int32_t e = integer ? detail::integer_range_expr(g_, b) : detail::number_range_expr(g_, b);
    if (e < 0) throw Error(at(path) + "no " + (integer ? "integer" : "number") + " satisfies the bounds");
    return e;
  }

  // ---------------------------------------------------------------- strings
  int32_t count_of(const ojson& s, const char* key, const std::string& path, int32_t dflt) {
    if (!s.contains(key)) return dflt;
    const ojson& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) throw Error(at(path + "/" + key) + "'" + key + "' must be a non-negative integer");
    if (v.get<int64_t>() > 100000) throw Error(at(path + "/" + key) + "'" + key + "' above 100000 is not supported");
    return static_cast<int32_t>(v.get<int64_t>());
  }

  // Strings with a pattern or format are one rule per (pattern, format, minLength,
  // maxLength): a schema that repeats them compiles each once (small ones are inlined).
  int32_t string_expr(const ojson& s, const std::string& path) {
    if (!s.contains("pattern") && !s.contains("format")) return string_expr_uncached(s, path);
    std::string key;
    for (const char* k : {"pattern", "format", "minLength", "maxLength"}) key += (s.contains(k) ? s[k].dump() : "-") + "\x01";
    auto it = string_rules_.find(key);
    if (it != string_rules_.end()) return it->second;
    const int32_t e = as_rule("string", string_expr_uncached(s, path));
    string_rules_.emplace(key, e);
    return e;
  }

  int32_t string_expr_uncached(const ojson& s, const std::string& path) {
    const int32_t min = count_of(s, "minLength", path, 0), max = count_of(s, "maxLength", path, kUnbounded);
    if (max != kUnbounded && max < min) throw Error(at(path) + "'maxLength' is below 'minLength'");
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    int32_t content = -1;
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) throw Error(at(path + "/pattern") + "'pattern' must be a string");
      if (s.contains("format")) throw Error(at(path) + "'pattern' together with 'format' is not supported (the intersection of two patterns)");
      const std::string pattern = s["pattern"].get<std::string>();
      try {
        if (!has_len) {
          content = regex_to_expr(g_, pattern, {.json_string = true, .search = true});
        } else {
          // Strings that fully match the pattern (a subset of those it finds a match in),
          // else strings around a match, restricted to the length range.
          Grammar raw;
          content = detail::restrict_length(raw, regex_to_expr(raw, pattern, {}), g_, min, max, /*json=*/true);
          if (content < 0) {  // strings around a match
            content = detail::restrict_length(raw, regex_to_expr(raw, pattern, {.search = true}), g_, min, max, /*json=*/true);
          }
          if (content < 0) {
            throw Error("no string both matches the pattern and has a length within 'minLength'/'maxLength' (or the "
                        "pattern's structure does not allow restricting its length)");
          }
        }
      } catch (const Error& e) {
        throw Error(at(path + "/pattern") + e.what());
      }
    } else if (s.contains("format")) {
      if (!s["format"].is_string()) throw Error(at(path + "/format") + "'format' must be a string");
      const std::string format = s["format"].get<std::string>();
      content = detail::format_expr(g_, format, path + "/format");
      if (content >= 0 && has_len) {
        if (format == "json-pointer" || format == "relative-json-pointer") {
          throw Error(at(path) + "'format' " + format + " together with 'minLength'/'maxLength' is not supported");
        }
        // Formats are ASCII without characters JSON escapes: bytes are code points.
        content = detail::restrict_length(g_, content, g_, min, max, /*json=*/false);
        if (content < 0) throw Error(at(path) + "no string of format '" + format + "' has a length within 'minLength'/'maxLength'");
      }
    }
    if (content < 0) {
      // Long counted strings are one rule per (minLength, maxLength), compiled once however
      // many properties use it.
      if (max != kUnbounded && max > 64) {
        const std::string key = std::to_string(min) + "," + std::to_string(max);
        auto it = string_rules_.find(key);
        if (it == string_rules_.end()) it = string_rules_.emplace(key, as_rule("string", g_.repeat(json_string_char(g_), min, max))).first;
        content = it->second;
      } else {
        content = g_.repeat(json_string_char(g_), min, max);
      }
    }
    return g_.seq({g_.literal("\""), content, g_.literal("\"")});
  }

  // ---------------------------------------------------------------- arrays
  // The values of a schema that allows only finitely many (const, enum, boolean, null),
  // in schema order without repeats; nullopt for any other schema.
  std::optional<std::vector<ojson>> finite_values(const ojson& s0, const std::string& path) {
    const ojson* s = &s0;
    for (int hop = 0; hop < 32 && s->is_object() && s->contains("$ref") && s->size() == 1 && (*s)["$ref"].is_string(); ++hop) {
      s = &resolve((*s)["$ref"].get<std::string>(), path);
    }
    if (!s->is_object()) return std::nullopt;
    for (auto& [k, v] : s->items()) {
      if (is_constraint(k) && !kValueChecks.count(k)) return std::nullopt;
    }
    std::vector<std::string> types = types_of(*s, path);
    ojson candidates;
    if (s->contains("const")) {
      candidates = ojson::array({(*s)["const"]});
    } else if (s->contains("enum") && (*s)["enum"].is_array()) {
      candidates = (*s)["enum"];
    } else if (!types.empty() && std::all_of(types.begin(), types.end(), [](const std::string& t) { return t == "boolean" || t == "null"; })) {
      candidates = ojson::array();
      for (const auto& t : types) {
        if (t == "boolean") candidates.push_back(true), candidates.push_back(false);
        else candidates.push_back(nullptr);
      }
    } else {
      return std::nullopt;
    }
    std::vector<ojson> out;
    std::vector<nlohmann::json> seen;  // JSON equality: object key order ignored, 1 == 1.0
    value_path_ = path;
    for (const auto& v : candidates) {
      if ((!types.empty() && !value_has_type(v, types)) || !value_in_bounds(v, *s)) continue;
      nlohmann::json plain = v;
      if (std::find(seen.begin(), seen.end(), plain) != seen.end()) continue;
      seen.push_back(plain);
      out.push_back(v);
    }
    return out;
  }

  // uniqueItems over a finite set of values: each value at most once, in the set's order.
  int32_t unique_array_expr(const std::vector<ojson>& values, int32_t lo, int32_t hi, const std::string& path) {
    const auto n = static_cast<int32_t>(values.size());
    if (hi == kUnbounded || hi > n) hi = n;
    if (lo > hi) throw Error(at(path) + "'minItems' exceeds the distinct values the items may take ('uniqueItems')");
    std::vector<int32_t> item;
    for (const auto& v : values) item.push_back(value_expr(v));
    // suffix[k][c]: items from values k.. after c were written.
    std::vector<std::vector<int32_t>> suffix(static_cast<size_t>(n) + 1, std::vector<int32_t>(static_cast<size_t>(hi) + 1, -1));
    for (int32_t c = 0; c <= hi; ++c) suffix[static_cast<size_t>(n)][static_cast<size_t>(c)] = c >= lo ? g_.empty() : -1;
    for (int32_t k = n - 1; k >= 0; --k) {
      for (int32_t c = 0; c <= hi; ++c) {
        std::vector<int32_t> alts;
        const int32_t skip = suffix[static_cast<size_t>(k) + 1][static_cast<size_t>(c)];
        if (skip >= 0) alts.push_back(skip);
        if (c < hi && suffix[static_cast<size_t>(k) + 1][static_cast<size_t>(c) + 1] >= 0) {
          alts.push_back(g_.seq({c > 0 ? layout_.comma : g_.empty(), item[static_cast<size_t>(k)],
                                 suffix[static_cast<size_t>(k) + 1][static_cast<size_t>(c) + 1]}));
        }
        if (!alts.empty()) suffix[static_cast<size_t>(k)][static_cast<size_t>(c)] = n > 8 ? as_rule("unique", g_.alt(alts)) : g_.alt(alts);
      }
    }
    int32_t all = suffix[0][0];
    if (all < 0) throw Error(at(path) + "no array of distinct values satisfies minItems/maxItems");
    int32_t body = lo == 0 ? g_.alt({g_.empty(), g_.seq({suffix[0][0], layout_.ws})}) : g_.seq({all, layout_.ws});
    return g_.seq({g_.literal("["), layout_.ws, body, g_.literal("]")});
  }

  int32_t array_expr(const ojson& s, const std::string& path) {
    if (s.contains("uniqueItems") && s["uniqueItems"] == true) {
      const int32_t lo = count_of(s, "minItems", path, 0), hi = count_of(s, "maxItems", path, kUnbounded);
      const bool tuple = s.contains("prefixItems") || (s.contains("items") && s["items"].is_array());
      std::optional<std::vector<ojson>> values;
      if (!tuple) values = finite_values(s.contains("items") ? s["items"] : ojson(true), path + "/items");
      if (values) return unique_array_expr(*values, lo, hi, path);
      if (hi == kUnbounded || hi > 1) {
        throw Error(at(path) + "'uniqueItems' is enforced only where the items take finitely many values (const, enum, "
                    "boolean, null) or maxItems is at most 1: a grammar cannot compare arbitrary items");
      }
    }
    std::vector<int32_t> prefix;
    const ojson* items = s.contains("items") ? &s["items"] : nullptr;
    std::string items_path = path + "/items";
    if (s.contains("prefixItems") || (items && items->is_array())) {
      const bool draft7 = !s.contains("prefixItems");
      const ojson& pre = draft7 ? *items : s["prefixItems"];
      const std::string pre_path = path + (draft7 ? "/items" : "/prefixItems");
      if (!pre.is_array()) throw Error(at(pre_path) + "must be an array");
      size_t i = 0;
      for (; i < pre.size() && pre[i] != false; ++i) prefix.push_back(visit(pre[i], pre_path + "/" + std::to_string(i)));
      if (draft7) {
        items = s.contains("additionalItems") ? &s["additionalItems"] : nullptr;
        items_path = path + "/additionalItems";
      }
      if (i < pre.size()) items = &kFalse;  // item i matches nothing: the array ends before it
    }
    int32_t min = count_of(s, "minItems", path, 0), max = count_of(s, "maxItems", path, kUnbounded);
    if (max != kUnbounded && static_cast<int32_t>(prefix.size()) > max) prefix.resize(static_cast<size_t>(max));
    const auto n_prefix = static_cast<int32_t>(prefix.size());
    int32_t item = -1;
    const bool items_false = (items && items->is_boolean() && !items->get<bool>()) || (!items && n_prefix > 0 && o_.strict);
    if (items_false) {
      max = max == kUnbounded ? n_prefix : std::min(max, n_prefix);
      if (min > n_prefix) throw Error(at(path) + "'minItems' exceeds the tuple length and no further items are allowed");
    } else {
      item = items ? visit(*items, items_path) : any_value();
    }
    if (max != kUnbounded && max < min) throw Error(at(path) + "no array satisfies minItems/maxItems (and the tuple length)");
    auto sep_item = [&] { return g_.seq({layout_.comma, item}); };
    int32_t tail;  // items from index n_prefix on, after at least one item
    if (item < 0 || max == n_prefix) {
      tail = g_.empty();
    } else {
      tail = g_.repeat(sep_item(), std::max(0, min - n_prefix), max == kUnbounded ? kUnbounded : max - n_prefix);
    }
    int32_t content;
    if (n_prefix == 0) {
      if (max == 0 || item < 0) {
        content = g_.empty();
      } else {
        int32_t body = g_.seq({item, g_.repeat(sep_item(), std::max(0, min - 1), max == kUnbounded ? kUnbounded : max - 1)});
        content = min == 0 ? g_.optional(g_.seq({body, layout_.ws})) : g_.seq({body, layout_.ws});
      }
    } else {
      for (int32_t i = n_prefix - 1; i >= 0; --i) {
        int32_t body = g_.seq({i > 0 ? layout_.comma : g_.empty(), prefix[static_cast<size_t>(i)], tail});
        tail = i >= min ? g_.optional(body) : body;
      }
      content = max == 0 ? g_.empty() : (min == 0 ? g_.optional(g_.seq({tail, layout_.ws})) : g_.seq({tail, layout_.ws}));
    }
    return g_.seq({g_.literal("["), layout_.ws, content, g_.literal("]")});
  }

  // ---------------------------------------------------------------- objects
  struct Prop {
    std::string name;
    int32_t value = -1;
    bool required = false;
  };

  int32_t object_expr(const ojson& s, const std::string& path) {
    const ojson empty = ojson::object();
    const ojson& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) throw Error(at(path + "/properties") + "'properties' must be an object");
    const ojson& pp = s.contains("patternProperties") ? s["patternProperties"] : empty;
    if (!pp.is_object()) throw Error(at(path + "/patternProperties") + "'patternProperties' must be an object");
    const std::string pp_path = path + "/patternProperties";
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) throw Error(at(path + "/required") + "'required' must be an array of strings");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) throw Error(at(path + "/required") + "'required' must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    const ojson ap = s.contains("additionalProperties") ? s["additionalProperties"] : ojson(!o_.strict);
    const bool ap_false = ap.is_boolean() && !ap.get<bool>();
    const int32_t min_props = count_of(s, "minProperties", path, 0);
    const int32_t max_props = count_of(s, "maxProperties", path, kUnbounded);
    if (max_props != kUnbounded && max_props < min_props) throw Error(at(path) + "'maxProperties' is below 'minProperties'");
    const ojson* names_schema = s.contains("propertyNames") ? &s["propertyNames"] : nullptr;
    const std::string pn_path = path + "/propertyNames";
    for (int hop = 0; hop < 32 && names_schema && names_schema->is_object() && names_schema->size() == 1 &&
                      names_schema->contains("$ref") && (*names_schema)["$ref"].is_string();
         ++hop) {
      names_schema = &resolve((*names_schema)["$ref"].get<std::string>(), pn_path);
    }
    if (names_schema) check_property_names_schema(*names_schema, pn_path);
    // The schema a member named `name` must satisfy: its declared schema (or, undeclared,
    // additionalProperties) and every patternProperties schema whose pattern matches it;
    // `false` when it may not appear.
    auto member_schema = [&](const std::string& name, const ojson* declared) -> ojson {
      if (names_schema && !name_allowed(*names_schema, name, pn_path)) return false;
      ojson all = ojson::array();
      if (declared) all.push_back(*declared);
      for (auto& [pat, ps] : pp.items()) {
        if (pattern_finds(pat, name, pp_path + "/" + pat)) all.push_back(ps);
      }
      // An undeclared key (a required one: additional keys are generated apart) takes
      // additionalProperties, or any value where the schema leaves it out (strict mode only
      // stops the generation of other keys).
      if (!declared && all.empty()) all.push_back(s.contains("additionalProperties") ? ap : ojson(true));
      for (const auto& x : all) {
        if (x == false || unsatisfiable(x, path)) return false;
      }
      return all.size() == 1 ? all[0] : ojson{{"allOf", all}};
    };
    std::vector<Prop> list;
    std::set<std::string> names;
    for (auto& [k, v] : props.items()) {
      names.insert(k);  // a `false` property never appears, not even as an additional one
      ojson ms = member_schema(k, &v);
      if (!required.count(k) && unsatisfiable(ms, path + "/properties/" + k)) ms = false;  // never valid: left out
      if (ms == false) {
        if (required.count(k)) throw Error(at(path + "/properties/" + k) + "required property '" + k + "' is never valid (its schema, propertyNames or a patternProperties schema is 'false')");
        continue;
      }
      list.push_back({k, visit(ms, path + "/properties/" + k), required.count(k) > 0});
    }
    for (const auto& r : required) {
      if (names.count(r)) continue;
      const ojson ms = member_schema(r, nullptr);
      if (ms == false) throw Error(at(path) + "required property '" + r + "' is not allowed ('additionalProperties', 'patternProperties' or 'propertyNames')");
      list.push_back({r, visit(ms, path + "/additionalProperties"), true});
      names.insert(r);
    }
    // Additional members (keys outside `names`). Keys from a pattern are generated only where
    // no declared name matches it (so they never repeat one), their values satisfy every
    // pattern's schema (a key may match several); with patternProperties, keys for
    // additionalProperties would have to avoid every pattern and are not generated.
    std::vector<int32_t> extras;
    const bool names_restricted = names_schema && !(*names_schema == true || *names_schema == ojson::object());
    for (auto& [pat, ps] : pp.items()) {
      if (ps == false || names_restricted || unsatisfiable(ps, pp_path + "/" + pat)) continue;
      bool clash = false;
      for (const auto& nm : names) clash = clash || pattern_finds(pat, nm, pp_path + "/" + pat);
      if (clash) continue;
      ojson all = ojson::array({ps});
      bool usable = true;
      for (auto& [pat2, ps2] : pp.items()) {
        if (pat2 == pat) continue;
        if (ps2 == false || unsatisfiable(ps2, pp_path + "/" + pat2)) usable = false;
        all.push_back(ps2);
      }
      if (!usable) continue;
      if (all.size() > 1) {
        try {
          detail::merge_all_of(all, pp_path, resolver());
        } catch (const Error&) {
          continue;  // the patterns' schemas have no common value: keys of this pattern are not generated
        }
      }
      int32_t key = -1;
      try {
        key = regex_to_expr(g_, pat, {.json_string = true, .search = true});
      } catch (const Error& e) {
        throw Error(at(pp_path + "/" + pat) + e.what());
      }
      const ojson vs = all.size() == 1 ? all[0] : ojson{{"allOf", all}};
      extras.push_back(g_.seq({g_.literal("\""), key, g_.literal("\""), layout_.colon, visit(vs, pp_path + "/" + pat)}));
    }
    if (!ap_false && pp.empty()) {
      int32_t key = -1;
      if (!names_restricted) {
        key = not_in(names);
      } else if (property_names_pattern_only(*names_schema)) {
        const std::string pat = (*names_schema)["pattern"].get<std::string>();
        bool clash = false;
        for (const auto& nm : names) clash = clash || pattern_finds(pat, nm, pn_path + "/pattern");
        if (!clash) key = regex_to_expr(g_, pat, {.json_string = true, .search = true});
      }
      if (key >= 0) extras.push_back(g_.seq({g_.literal("\""), key, g_.literal("\""), layout_.colon, visit(ap, path + "/additionalProperties")}));
    }
    const int32_t extra = extras.empty() ? -1 : g_.alt(extras);  // one additional member
    return object_members(list, extra, min_props, max_props, path);
  }

  // "{" members "}" in list order (optional ones may be left out), then any number of
  // `extra` members (-1: none), with minProperties / maxProperties counted exactly.
  int32_t object_members(const std::vector<Prop>& list, int32_t extra, int32_t lo, int32_t hi, const std::string& path) {
    const size_t n = list.size();
    int32_t n_required = 0;
    for (const auto& p : list) n_required += p.required ? 1 : 0;
    if (hi != kUnbounded && n_required > hi) throw Error(at(path) + "more required properties than 'maxProperties'");
    // Additional keys may repeat one another (a JSON parser keeps one of them), so they count
    // towards maxProperties, and towards minProperties as one at most (at least one distinct
    // key when any is written).
    if (static_cast<int32_t>(n) + (extra >= 0 ? 1 : 0) < lo) {
      throw Error(at(path) + "'minProperties' exceeds the declared properties that may appear (additional keys could repeat one another)");
    }
    std::vector<int32_t> member(n);
    for (size_t i = 0; i < n; ++i) member[i] = g_.seq({g_.literal(json_quoted(list[i].name)), layout_.colon, list[i].value});
    // c: members written so far, capped where the bounds stop telling counts apart.
    const int32_t cap = hi != kUnbounded ? hi : lo;
    auto capped = [&](int32_t c) { return std::min(c, cap); };
    auto extras_from = [&](int32_t c) -> int32_t {  // the trailing extras after c declared members
      const int32_t need = c >= lo ? 0 : 1;  // one distinct additional key at most counts
      if (c + need < lo) return -1;
      if (extra < 0 || (hi != kUnbounded && c >= hi)) return need > 0 ? -1 : g_.empty();
      return g_.repeat(g_.seq({layout_.comma, extra}), need, hi == kUnbounded ? kUnbounded : hi - c);
    };
    const bool share = n > 8;
    if (static_cast<size_t>(cap + 1) * (n + 1) > 200000) throw Error(at(path) + "'minProperties'/'maxProperties' too large for this many properties");
    // suffix[k][c]: members k.. after c (>= 1) members were written; -1 when none can follow.
    std::vector<std::vector<int32_t>> suffix(n + 1, std::vector<int32_t>(static_cast<size_t>(cap) + 1, -1));
    for (int32_t c = 0; c <= cap; ++c) suffix[n][static_cast<size_t>(c)] = extras_from(c);
    for (size_t k = n; k-- > 0;) {
      for (int32_t c = 0; c <= cap; ++c) {
        std::vector<int32_t> alts;
        if (hi == kUnbounded || c < hi) {
          int32_t rest = suffix[k + 1][static_cast<size_t>(capped(c + 1))];
          if (rest >= 0) alts.push_back(g_.seq({layout_.comma, member[k], rest}));
        }
        if (!list[k].required && suffix[k + 1][static_cast<size_t>(c)] >= 0) alts.push_back(suffix[k + 1][static_cast<size_t>(c)]);
        if (alts.empty()) continue;
        int32_t e = g_.alt(alts);
        suffix[k][static_cast<size_t>(c)] = share ? as_rule("members", e) : e;
      }
    }
    std::vector<int32_t> firsts;
    bool all_optional_before = true;
    for (size_t j = 0; j < n && all_optional_before; ++j) {
      if (hi == kUnbounded || hi >= 1) {
        int32_t rest = suffix[j + 1][static_cast<size_t>(capped(1))];
        if (rest >= 0) firsts.push_back(g_.seq({member[j], rest}));
      }
      all_optional_before = !list[j].required;
    }
    if (all_optional_before && extra >= 0 && lo <= 1 && (hi == kUnbounded || hi >= 1)) {
      firsts.push_back(g_.seq({extra, g_.repeat(g_.seq({layout_.comma, extra}), 0, hi == kUnbounded ? kUnbounded : hi - 1)}));
    }
    const bool can_be_empty = all_optional_before && lo == 0;
    if (firsts.empty() && !can_be_empty) throw Error(at(path) + "no object satisfies the properties and minProperties/maxProperties");
    int32_t content = firsts.empty() ? g_.empty() : g_.seq({g_.alt(firsts), layout_.ws});
    if (can_be_empty && !firsts.empty()) content = g_.optional(content);
    return g_.seq({g_.literal("{"), layout_.ws, content, g_.literal("}")});
  }

  // ---------------------------------------------------------------- property names
  // propertyNames: a schema over strings of which the compiler reads type, enum, const,
  // pattern, minLength, maxLength (and the annotations); anything else is an error.
  void check_property_names_schema(const ojson& ns, const std::string& path) const {
    if (ns.is_boolean()) return;
    if (!ns.is_object()) throw Error(at(path) + "a schema must be an object or a boolean");
    for (auto& [k, v] : ns.items()) {
      if (!is_constraint(k)) continue;
      if (k == "type" && v == "string") continue;
      if (k == "enum" || k == "const" || k == "pattern" || k == "minLength" || k == "maxLength") continue;
      throw Error(at(path) + "'propertyNames' with '" + k + "' is not supported (supported: type string, enum, const, pattern, minLength, maxLength)");
    }
    if (ns.contains("pattern") && !ns["pattern"].is_string()) throw Error(at(path + "/pattern") + "'pattern' must be a string");
    if (ns.contains("enum") && !ns["enum"].is_array()) throw Error(at(path + "/enum") + "'enum' must be an array");
  }

  static bool property_names_pattern_only(const ojson& ns) {
    if (!ns.is_object() || !ns.contains("pattern")) return false;
    for (auto& [k, v] : ns.items()) {
      if (is_constraint(k) && k != "pattern" && !(k == "type" && v == "string")) return false;
    }
    return true;
  }

  bool name_allowed(const ojson& ns, const std::string& name, const std::string& path) {
    if (ns.is_boolean()) return ns.get<bool>();
    if (ns.contains("const") && ns["const"] != name) return false;
    if (ns.contains("enum") && std::find(ns["enum"].begin(), ns["enum"].end(), ojson(name)) == ns["enum"].end()) return false;
    int64_t n = 0;
    for (unsigned char c : name) n += (c & 0xC0) != 0x80;
    if (ns.contains("minLength") && ns["minLength"].is_number_integer() && n < ns["minLength"].get<int64_t>()) return false;
    if (ns.contains("maxLength") && ns["maxLength"].is_number_integer() && n > ns["maxLength"].get<int64_t>()) return false;
    if (ns.contains("pattern") && !pattern_finds(ns["pattern"].get<std::string>(), name, path + "/pattern")) return false;
    return true;
  }

  // True when the JSON Schema `pattern` (a search) matches `text`. Decided by the compiler's
  // own regex automaton, which agrees with ECMA-262 and Python `re` on printable ASCII;
  // a name with other characters is an error (where `.`, `\s`, `\d`, `\w` and `$` differ).
  bool pattern_finds(const std::string& pattern, const std::string& text, const std::string& where) {
    for (unsigned char c : text) {
      if (c < 0x20 || c >= 0x7f) {
        throw Error(at(where) + "property name '" + json_escape(text) +
                    "' has characters outside printable ASCII: whether the pattern matches it is not decided");
      }
    }
    auto it = pattern_tables_.find(pattern);
    if (it == pattern_tables_.end()) {
      Grammar g;
      int32_t root = g.declare_rule("root");
      try {
        g.define_rule(root, regex_to_expr(g, pattern, {.search = true}));
      } catch (const Error& e) {
        throw Error(at(where) + e.what());
      }
      g.set_root(root);
      it = pattern_tables_.emplace(pattern, build_pda(g)).first;
    }
    const PdaTables& t = it->second;
    int32_t st = t.rules[static_cast<size_t>(t.root)].start;
    for (unsigned char c : text) {
      if (t.has(st, PdaTables::kHasCalls)) throw Error(at(where) + "internal: a pattern automaton with calls");
      st = t.step(st, c);
      if (st < 0) return false;
    }
    return t.has(st, PdaTables::kFinal);
  }

  // A JSON string's content (canonical escapes only) that is not one of `names`.
  int32_t not_in(const std::set<std::string>& names) {
    struct Node {
      std::map<uint32_t, size_t> kids;
      bool terminal = false;
    };
    std::vector<Node> trie(1);
    for (const auto& name : names) {
      size_t cur = 0, i = 0;
      while (i < name.size()) {
        uint32_t cp = 0;
        size_t len = utf8_decode(name, i, &cp);
        if (len == 0) throw Error("JSON schema: property name is not valid UTF-8");
        i += len;
        auto it = trie[cur].kids.find(cp);
        if (it == trie[cur].kids.end()) {
          trie.emplace_back();
          it = trie[cur].kids.emplace(cp, trie.size() - 1).first;
        }
        cur = it->second;
      }
      trie[cur].terminal = true;
    }
    const int32_t any = g_.star(json_char_class(g_, normalize_ranges({}, true)));
    // Children are created after their parent: build from the last node back (no recursion
    // over the length of a name). Every 64 levels a node becomes a rule, so a long name does
    // not nest one expression deeper than the grammar allows.
    std::vector<int32_t> built(trie.size(), -1);
    std::vector<int32_t> level(trie.size(), 0);
    for (size_t node = 0; node < trie.size(); ++node) {
      for (auto& [cp, child] : trie[node].kids) level[child] = level[node] + 1;
    }
    for (size_t node = trie.size(); node-- > 0;) {
      std::vector<int32_t> alts;
      if (!trie[node].terminal) alts.push_back(g_.empty());
      std::vector<CodeRange> kids;
      for (auto& [cp, child] : trie[node].kids) kids.push_back({cp, cp});
      auto others = normalize_ranges(kids, true);
      if (!others.empty()) alts.push_back(g_.seq({json_char_class(g_, others), any}));
      for (auto& [cp, child] : trie[node].kids) alts.push_back(g_.seq({json_char_class(g_, {{cp, cp}}), built[child]}));
      int32_t e = g_.alt(alts);
      built[node] = (level[node] > 0 && level[node] % 64 == 0) ? as_rule("key", e) : e;
    }
    return built[0];
  }

  // ---------------------------------------------------------------- $ref and allOf
  const ojson& resolve(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#') throw Error(at(path) + "$ref '" + ref + "' is not supported (only references into this document, '#...')");
    const ojson* cur = &root_;
    size_t i = 1;
    if (i < ref.size() && ref[i] != '/') throw Error(at(path) + "$ref '" + ref + "': anchors are not supported");
    while (i < ref.size()) {
      size_t j = ref.find('/', i + 1);
      std::string tok = ref.substr(i + 1, (j == std::string::npos ? ref.size() : j) - i - 1);
      std::string key;
      for (size_t k = 0; k < tok.size(); ++k) {
        if (tok[k] == '~' && k + 1 < tok.size() && (tok[k + 1] == '0' || tok[k + 1] == '1')) {
          key += tok[k + 1] == '0' ? '~' : '/';
          ++k;
        } else if (tok[k] == '%' && k + 2 < tok.size() && std::isxdigit(static_cast<unsigned char>(tok[k + 1])) &&
                   std::isxdigit(static_cast<unsigned char>(tok[k + 2]))) {
          key += static_cast<char>(std::stoi(tok.substr(k + 1, 2), nullptr, 16));
          k += 2;
        } else {
          key += tok[k];
        }
      }
      if (cur->is_object() && cur->contains(key)) {
        cur = &(*cur)[key];
      } else if (cur->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
                 key.size() < 9 && std::stoul(key) < cur->size()) {
        cur = &(*cur)[std::stoul(key)];
      } else {
        throw Error(at(path) + "$ref '" + ref + "' does not resolve");
      }
      i = j == std::string::npos ? ref.size() : j;
    }
    return *cur;
  }

  detail::RefResolver resolver() {
    return [this](const std::string& ref, const std::string& path) -> const ojson& { return resolve(ref, path); };
  }

  int32_t ref_rule(const ojson& ref, const std::string& path) {
    if (!ref.is_string()) throw Error(at(path) + "'$ref' must be a string");
    const std::string r = ref.get<std::string>();
    auto it = ref_rules_.find(r);
    if (it != ref_rules_.end()) return it->second;
    const ojson& target = resolve(r, path);
    std::string name = "ref";
    for (char c : r.substr(1)) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    int32_t rule = g_.new_rule(name.substr(0, 48));
    ref_rules_[r] = rule;
    g_.define_rule(rule, visit(target, r));
    return rule;
  }

  // allOf members (with $ref resolved one level and nested allOf flattened) as one schema.
  Grammar g_;
  const ojson& root_;
  JsonSchemaOptions o_;
  detail::JsonLayout layout_;
  std::map<std::string, int32_t> ref_rules_;
  std::map<std::string, PdaTables> pattern_tables_;
  std::map<std::string, int32_t> string_rules_;  // string keywords -> a reference to their rule  // patterns matched against property names
  const InexactNumbers& inexact_;
  std::string value_path_;  // the const/enum being converted (for errors)
  int depth_ = 0;
};

}  // namespace

Grammar json_schema_to_grammar(const nlohmann::ordered_json& schema, const JsonSchemaOptions& opts) {
  check_document_depth(schema);
  const InexactNumbers none;
  Converter c(schema, opts, none);
  return c.run();
}

Grammar json_schema_to_grammar(std::string_view schema_text, const JsonSchemaOptions& opts) {
  nlohmann::ordered_json schema;
  PrePass pre;
  (void)nlohmann::ordered_json::sax_parse(schema_text, &pre, nlohmann::json::input_format_t::json, false);
  if (pre.too_deep) throw Error(too_deep());
  try {
    schema = nlohmann::ordered_json::parse(schema_text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("JSON schema: not valid JSON: ") + e.what());
  }
  Converter c(schema, opts, pre.inexact);
  return c.run();
}

}  // namespace deepinfer::grammar
