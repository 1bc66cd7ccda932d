// String formats and the any-JSON grammar. A format generates a subset of its valid strings
// (every generated string is valid under the format's RFC and Python jsonschema's checker).
#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/json_schema_layout.h"
#include "grammar/json_string.h"

namespace deepinfer::grammar {
namespace detail {
namespace {

int32_t cls(Grammar& g, std::vector<CodeRange> r) { return g.char_class(std::move(r)); }
int32_t lit(Grammar& g, const char* s) { return g.literal(s); }
int32_t digit(Grammar& g) { return cls(g, {{'0', '9'}}); }
int32_t digits(Grammar& g, int n) { return g.repeat(digit(g), n, n); }
// Two-digit numbers 00..max (max >= 10).
int32_t two_digits_upto(Grammar& g, int max) {
  const auto tens = static_cast<uint32_t>('0' + max / 10), ones = static_cast<uint32_t>('0' + max % 10);
  return g.alt({g.seq({cls(g, {{'0', tens - 1}}), digit(g)}), g.seq({g.literal(std::string(1, static_cast<char>(tens))), cls(g, {{'0', ones}})})});
}

int32_t date(Grammar& g) {
  // Years 0001..9999; day ranges per month; 02-29 only in leap years.
  int32_t year = g.alt({g.seq({cls(g, {{'1', '9'}}), digits(g, 3)}), g.seq({lit(g, "0"), cls(g, {{'1', '9'}}), digits(g, 2)}),
                        g.seq({lit(g, "00"), cls(g, {{'1', '9'}}), digit(g)}), g.seq({lit(g, "000"), cls(g, {{'1', '9'}})})});
  int32_t leap4 = g.alt({g.seq({lit(g, "0"), cls(g, {{'4', '4'}, {'8', '8'}})}), g.seq({cls(g, {{'2', '2'}, {'4', '4'}, {'6', '6'}, {'8', '8'}}), cls(g, {{'0', '0'}, {'4', '4'}, {'8', '8'}})}),
                         g.seq({cls(g, {{'1', '1'}, {'3', '3'}, {'5', '5'}, {'7', '7'}, {'9', '9'}}), cls(g, {{'2', '2'}, {'6', '6'}})})});
  int32_t leap_year = g.alt({g.seq({digits(g, 2), leap4}), g.seq({leap4, lit(g, "00")})});
  int32_t d28 = g.alt({g.seq({lit(g, "0"), cls(g, {{'1', '9'}})}), g.seq({lit(g, "1"), digit(g)}), g.seq({lit(g, "2"), cls(g, {{'0', '8'}})})});
  int32_t d30 = g.alt({d28, lit(g, "29"), lit(g, "30")});
  int32_t d31 = g.alt({d30, lit(g, "31")});
  int32_t m31 = g.alt({lit(g, "01"), lit(g, "03"), lit(g, "05"), lit(g, "07"), lit(g, "08"), lit(g, "10"), lit(g, "12")});
  int32_t m30 = g.alt({lit(g, "04"), lit(g, "06"), lit(g, "09"), lit(g, "11")});
  int32_t md = g.alt({g.seq({m31, lit(g, "-"), d31}), g.seq({m30, lit(g, "-"), d30}), g.seq({lit(g, "02-"), d28})});
  return g.alt({g.seq({year, lit(g, "-"), md}), g.seq({leap_year, lit(g, "-02-29")})});
}

int32_t time(Grammar& g) {
  int32_t hh = g.alt({g.seq({cls(g, {{'0', '1'}}), digit(g)}), g.seq({lit(g, "2"), cls(g, {{'0', '3'}})})});
  int32_t mm = two_digits_upto(g, 59);
  int32_t frac = g.optional(g.seq({lit(g, "."), g.repeat(digit(g), 1, 9)}));
  int32_t offset = g.alt({lit(g, "Z"), g.seq({cls(g, {{'+', '+'}, {'-', '-'}}), hh, lit(g, ":"), mm})});
  return g.seq({hh, lit(g, ":"), mm, lit(g, ":"), mm, frac, offset});
}

int32_t email(Grammar& g) {
  int32_t atom = g.plus(cls(g, {{'A', 'Z'}, {'a', 'z'}, {'0', '9'}, {'!', '!'}, {'#', '\''}, {'*', '+'}, {'-', '-'}, {'/', '/'},
                                {'=', '='}, {'?', '?'}, {'^', '`'}, {'{', '~'}}));
  int32_t local = g.seq({atom, g.star(g.seq({lit(g, "."), atom}))});
  int32_t alnum = cls(g, {{'A', 'Z'}, {'a', 'z'}, {'0', '9'}});
  int32_t label = g.seq({alnum, g.optional(g.seq({g.star(cls(g, {{'A', 'Z'}, {'a', 'z'}, {'0', '9'}, {'-', '-'}})), alnum}))});
  return g.seq({local, lit(g, "@"), label, g.plus(g.seq({lit(g, "."), label}))});
}

int32_t uuid(Grammar& g) {
  auto hex = [&](int n) { return g.repeat(cls(g, {{'0', '9'}, {'A', 'F'}, {'a', 'f'}}), n, n); };
  return g.seq({hex(8), lit(g, "-"), hex(4), lit(g, "-"), hex(4), lit(g, "-"), hex(4), lit(g, "-"), hex(12)});
}

int32_t ipv4(Grammar& g) {
  auto octet = [&] {
    return g.alt({g.seq({lit(g, "25"), cls(g, {{'0', '5'}})}), g.seq({lit(g, "2"), cls(g, {{'0', '4'}}), digit(g)}),
                  g.seq({lit(g, "1"), digits(g, 2)}), g.seq({cls(g, {{'1', '9'}}), digit(g)}), digit(g)});
  };
  return g.seq({octet(), lit(g, "."), octet(), lit(g, "."), octet(), lit(g, "."), octet()});
}

// RFC 1123 host names (what a host name validator accepts): one to three labels of letters,
// digits and inner hyphens, at most 63 characters each; the last label starts with a letter
// (never all-numeric).
int32_t hostname(Grammar& g) {
  auto alnum = [&] { return cls(g, {{'0', '9'}, {'a', 'z'}}); };
  auto tail = [&] { return g.optional(g.seq({g.repeat(cls(g, {{'-', '-'}, {'0', '9'}, {'a', 'z'}}), 0, 61), alnum()})); };
  int32_t label = g.seq({alnum(), tail()});
  int32_t last = g.seq({cls(g, {{'a', 'z'}}), tail()});
  return g.seq({g.repeat(g.seq({label, lit(g, ".")}), 0, 2), last});
}

// Absolute URIs (RFC 3986, also valid IRIs and URI/IRI references): scheme "://" host name,
// then path segments, a query and a fragment of unreserved characters (plus = and & in the
// query).
int32_t uri(Grammar& g) {
  auto unreserved = [&](std::vector<CodeRange> extra) {
    std::vector<CodeRange> r = {{'-', '.'}, {'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}, {'~', '~'}};
    r.insert(r.end(), extra.begin(), extra.end());
    return g.star(g.char_class(std::move(r)));
  };
  int32_t scheme = g.seq({cls(g, {{'a', 'z'}}), g.repeat(cls(g, {{'+', '+'}, {'-', '.'}, {'0', '9'}, {'a', 'z'}}), 0, 15)});
  int32_t path = g.star(g.seq({lit(g, "/"), unreserved({})}));
  int32_t query = g.optional(g.seq({lit(g, "?"), unreserved({{'&', '&'}, {'=', '='}})}));
  int32_t fragment = g.optional(g.seq({lit(g, "#"), unreserved({})}));
  return g.seq({scheme, lit(g, "://"), hostname(g), path, query, fragment});
}

// IPv6 in its full form: eight groups of one to four hex digits.
int32_t ipv6(Grammar& g) {
  auto h16 = [&] { return g.repeat(cls(g, {{'0', '9'}, {'a', 'f'}}), 1, 4); };
  return g.seq({h16(), g.repeat(g.seq({lit(g, ":"), h16()}), 7, 7)});
}

// JSON pointers (RFC 6901): "/"-separated tokens, '~' only as ~0 or ~1.
int32_t json_pointer(Grammar& g) {
  int32_t ch = json_char_class(g, normalize_ranges({{'/', '/'}, {'~', '~'}}, true));
  int32_t token = g.star(g.alt({ch, lit(g, "~0"), lit(g, "~1")}));
  return g.star(g.seq({lit(g, "/"), token}));
}

// Durations (RFC 3339 appendix A): PnD, PnW or PTnH / PTnM / PTnS.
int32_t duration(Grammar& g) {
  int32_t n = g.seq({cls(g, {{'1', '9'}}), g.repeat(digit(g), 0, 3)});
  return g.alt({g.seq({lit(g, "P"), n, cls(g, {{'D', 'D'}, {'W', 'W'}})}),
                g.seq({lit(g, "PT"), n, cls(g, {{'H', 'H'}, {'M', 'M'}, {'S', 'S'}})})});
}

}  // namespace

int32_t format_expr(Grammar& g, std::string_view format, const std::string& where) {
  if (format == "date") return date(g);
  if (format == "time") return time(g);
  if (format == "date-time") return g.seq({date(g), g.literal("T"), time(g)});
  if (format == "email") return email(g);
  if (format == "uuid") return uuid(g);
  if (format == "ipv4") return ipv4(g);
  if (format == "ipv6") return ipv6(g);
  if (format == "hostname" || format == "idn-hostname") return hostname(g);
  if (format == "idn-email") return email(g);
  if (format == "uri" || format == "uri-reference" || format == "iri" || format == "iri-reference") return uri(g);
  if (format == "json-pointer") return json_pointer(g);
  if (format == "relative-json-pointer") {
    int32_t n = g.alt({lit(g, "0"), g.seq({cls(g, {{'1', '9'}}), g.repeat(digit(g), 0, 5)})});
    return g.seq({n, g.alt({lit(g, "#"), json_pointer(g)})});
  }
  if (format == "duration") return duration(g);
  for (const char* known : {"uri-template", "regex"}) {
    if (format == known) {
      throw Error("JSON schema at " + where + ": format '" + std::string(format) +
                  "' is not supported (supported: date, time, date-time, duration, email, idn-email, hostname, "
                  "idn-hostname, ipv4, ipv6, uri, uri-reference, iri, iri-reference, json-pointer, "
                  "relative-json-pointer, uuid)");
    }
  }
  return -1;
}

JsonLayout make_layout(Grammar& g, const JsonSchemaOptions& o) {
  JsonLayout l;
  if (o.any_whitespace) {
    int32_t ch = g.char_class({{'\t', '\n'}, {'\r', '\r'}, {' ', ' '}});
    l.ws = o.max_whitespace >= 0 ? g.repeat(ch, 0, o.max_whitespace) : g.star(ch);
    l.comma = g.seq({l.ws, g.literal(","), l.ws});
    l.colon = g.seq({l.ws, g.literal(":"), l.ws});
  } else {
    l.ws = g.empty();
    l.comma = g.literal(", ");
    l.colon = g.literal(": ");
  }
  return l;
}

int32_t json_string_expr(Grammar& g) { return g.seq({g.literal("\""), g.star(json_string_char(g)), g.literal("\"")}); }

int32_t json_value_rule(Grammar& g, const JsonLayout& l) {
  int32_t existing = g.find_rule("json_value");
  if (existing >= 0) return existing;
  int32_t value = g.declare_rule("json_value");
  int32_t v = g.ref(value);
  int32_t str = json_string_expr(g);
  int32_t member = g.seq({str, l.colon, v});
  int32_t object = g.seq({g.literal("{"), l.ws, g.optional(g.seq({member, g.star(g.seq({l.comma, member})), l.ws})), g.literal("}")});
  int32_t array = g.seq({g.literal("["), l.ws, g.optional(g.seq({v, g.star(g.seq({l.comma, v})), l.ws})), g.literal("]")});
  int32_t number = number_range_expr(g, {});
  g.define_rule(value, g.alt({object, array, str, number, g.literal("true"), g.literal("false"), g.literal("null")}));
  return value;
}

}  // namespace detail

Grammar builtin_json_grammar(bool object_only, const JsonSchemaOptions& opts) {
  Grammar g;
  detail::JsonLayout l = detail::make_layout(g, opts);
  int32_t value = detail::json_value_rule(g, l);
  int32_t root = g.declare_rule("root");
  if (object_only) {
    int32_t v = g.ref(value);
    int32_t member = g.seq({detail::json_string_expr(g), l.colon, v});
    g.define_rule(root, g.seq({g.literal("{"), l.ws, g.optional(g.seq({member, g.star(g.seq({l.comma, member})), l.ws})), g.literal("}")}));
  } else {
    g.define_rule(root, g.ref(value));
  }
  g.set_root(root);
  return g;
}

}  // namespace deepinfer::grammar
