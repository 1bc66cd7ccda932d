// Integer and number ranges as grammar expressions over decimal text (any magnitude).
#include <cmath>
#include <optional>

#include "core/error.h"
#include "grammar/json_schema.h"

namespace deepinfer::grammar::detail {
namespace {

// Unbounded integer parts and fractions have at most this many digits, exponents at most
// two: every generated number is a finite double in every JSON parser.
constexpr int32_t kMaxDigits = 16;

// ---- decimal digit strings (non-negative, canonical: no leading zeros) ----

int cmp_uint(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a < b ? -1 : (a > b ? 1 : 0);
}
std::string add_one(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '9') {
      ++s[i];
      return s;
    }
    s[i] = '0';
  }
  return "1" + s;
}
std::string sub_one(std::string s) {  // s > 0
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '0') {
      --s[i];
      break;
    }
    s[i] = '9';
  }
  size_t nz = s.find_first_not_of('0');
  return nz == std::string::npos ? "0" : s.substr(nz);
}

// Signed comparison of decimals.
int cmp_dec(const Decimal& a, const Decimal& b) {
  if (a.is_zero() && b.is_zero()) return 0;
  const bool an = a.negative && !a.is_zero(), bn = b.negative && !b.is_zero();
  if (an != bn) return an ? -1 : 1;
  int c = cmp_uint(a.int_digits, b.int_digits);
  if (c == 0) {
    size_t n = std::max(a.frac_digits.size(), b.frac_digits.size());
    std::string fa = a.frac_digits + std::string(n - a.frac_digits.size(), '0');
    std::string fb = b.frac_digits + std::string(n - b.frac_digits.size(), '0');
    c = fa < fb ? -1 : (fa > fb ? 1 : 0);
  }
  return an ? -c : c;
}

struct SignedInt {
  bool negative = false;
  std::string mag = "0";
};
SignedInt inc(SignedInt x) {
  if (x.negative) {
    x.mag = sub_one(x.mag);
    if (x.mag == "0") x.negative = false;
  } else {
    x.mag = add_one(x.mag);
  }
  return x;
}
SignedInt dec(SignedInt x) {
  if (x.negative || x.mag == "0") {
    x.mag = add_one(x.mag);
    x.negative = true;
  } else {
    x.mag = sub_one(x.mag);
  }
  return x;
}
int cmp_int(const SignedInt& a, const SignedInt& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int c = cmp_uint(a.mag, b.mag);
  return a.negative ? -c : c;
}
SignedInt floor_of(const Decimal& d) {
  SignedInt r{d.negative && !d.is_zero(), d.int_digits};
  if (!d.frac_digits.empty() && r.negative) r.mag = add_one(r.mag);
  return r;
}
SignedInt ceil_of(const Decimal& d) {
  SignedInt r{d.negative && !d.is_zero(), d.int_digits};
  if (!d.frac_digits.empty() && !r.negative) r.mag = add_one(r.mag);
  if (r.mag == "0") r.negative = false;
  return r;
}

// ---- expressions ----

class RangeBuilder {
 public:
  explicit RangeBuilder(Grammar& g, int32_t max_frac_digits = kMaxDigits) : g_(g), max_frac_(max_frac_digits) {}

  int32_t digits(char lo, char hi) { return g_.char_class({{static_cast<uint32_t>(lo), static_cast<uint32_t>(hi)}}); }
  int32_t any_digits(int32_t min, int32_t max) { return g_.repeat(digits('0', '9'), min, max); }
  int32_t alt_or_none(std::vector<int32_t> alts) {
    std::erase(alts, -1);
    return alts.empty() ? -1 : g_.alt(std::move(alts));
  }
  int32_t seq_or_none(std::vector<int32_t> items) {
    for (int32_t x : items) {
      if (x < 0) return -1;
    }
    return g_.seq(std::move(items));
  }

  // Same-length digit strings >= s (top: no leading zero when longer than one digit).
  int32_t ge(const std::string& s, size_t i) {
    if (i == s.size()) return g_.empty();
    const char d = s[i];
    const auto rest = static_cast<int32_t>(s.size() - i - 1);
    return alt_or_none({d < '9' ? g_.seq({digits(static_cast<char>(d + 1), '9'), any_digits(rest, rest)}) : -1,
                        g_.seq({g_.literal(std::string(1, d)), ge(s, i + 1)})});
  }
  int32_t le(const std::string& s, size_t i, bool top) {
    if (i == s.size()) return g_.empty();
    const char d = s[i];
    const auto rest = static_cast<int32_t>(s.size() - i - 1);
    const char min = (top && s.size() > 1) ? '1' : '0';
    return alt_or_none({d > min ? g_.seq({digits(min, static_cast<char>(d - 1)), any_digits(rest, rest)}) : -1,
                        g_.seq({g_.literal(std::string(1, d)), le(s, i + 1, false)})});
  }
  int32_t between(const std::string& a, const std::string& b, size_t i) {
    if (i == a.size()) return g_.empty();
    if (a[i] == b[i]) return g_.seq({g_.literal(std::string(1, a[i])), between(a, b, i + 1)});
    const auto rest = static_cast<int32_t>(a.size() - i - 1);
    return alt_or_none({g_.seq({g_.literal(std::string(1, a[i])), ge(a, i + 1)}),
                        a[i] + 1 <= b[i] - 1 ? g_.seq({digits(static_cast<char>(a[i] + 1), static_cast<char>(b[i] - 1)), any_digits(rest, rest)}) : -1,
                        g_.seq({g_.literal(std::string(1, b[i])), le(b, i + 1, false)})});
  }

  // Canonical non-negative integers in [lo, hi]; -1 if none. Without hi: at most
  // kMaxDigits digits (or lo's length), so every value is a finite double everywhere.
  int32_t uint_range(const std::string& lo, std::optional<std::string> hi) {
    if (!hi) hi = std::string(std::max(static_cast<size_t>(kMaxDigits), lo.size()), '9');
    if (cmp_uint(lo, *hi) > 0) return -1;
    const auto len = static_cast<int32_t>(lo.size());
    if (hi && static_cast<int32_t>(hi->size()) == len) return between(lo, *hi, 0);
    std::vector<int32_t> alts{ge(lo, 0)};
    const auto hl = static_cast<int32_t>(hi->size());
    if (hl - 1 >= len + 1) alts.push_back(g_.seq({digits('1', '9'), any_digits(len, hl - 2)}));
    alts.push_back(le(*hi, 0, true));
    return alt_or_none(alts);
  }

  // Fraction digits D (after the point; empty = no fraction) with lo <= 0.D <= hi, each
  // bound optional (tl / th: still equal to that bound's prefix).
  struct FracBounds {
    const std::string* lo = nullptr;
    bool lo_excl = false;
    const std::string* hi = nullptr;
    bool hi_excl = false;
  };
  static char digit_at(const std::string* s, size_t i) { return i < s->size() ? (*s)[i] : '0'; }
  bool end_ok(const FracBounds& b, size_t i, bool tl, bool th) const {
    bool ok = true;
    if (tl) ok = ok && i >= b.lo->size() && !b.lo_excl;
    if (th) ok = ok && (i < b.hi->size() || !b.hi_excl);
    return ok;
  }
  // Non-empty digit strings from position i (plus the empty one when `allow_empty`), at
  // most max_frac_ digits in all.
  int32_t frac(const FracBounds& b, size_t i, bool tl, bool th, bool allow_empty) {
    std::vector<int32_t> alts;
    if (allow_empty && end_ok(b, i, tl, th)) alts.push_back(g_.empty());
    const int32_t rem = max_frac_ == kUnbounded ? kUnbounded : max_frac_ - static_cast<int32_t>(i);
    if (rem != kUnbounded && rem <= 0) return alt_or_none(alts);
    const int32_t rem1 = rem == kUnbounded ? kUnbounded : rem - 1;
    if (!tl && !th) {
      alts.push_back(any_digits(1, rem));
      return alt_or_none(alts);
    }
    const bool lo_done = tl && i >= b.lo->size(), hi_done = th && i >= b.hi->size();
    if ((!tl || lo_done) && (!th || hi_done)) {
      // Every remaining bound digit is 0.
      if (tl && th) {
        if (!b.lo_excl && !b.hi_excl) alts.push_back(g_.repeat(g_.literal("0"), 1, rem));
      } else if (tl) {
        alts.push_back(b.lo_excl ? nonzero_digits(rem) : any_digits(1, rem));
      } else if (!b.hi_excl) {
        alts.push_back(g_.repeat(g_.literal("0"), 1, rem));
      }
      return alt_or_none(alts);
    }
    const char lo_d = tl ? digit_at(b.lo, i) : '0';
    const char hi_d = th ? digit_at(b.hi, i) : '9';
    if (tl && th && lo_d == hi_d) {
      alts.push_back(seq_or_none({g_.literal(std::string(1, lo_d)), frac(b, i + 1, true, true, true)}));
      return alt_or_none(alts);
    }
    if (tl) alts.push_back(seq_or_none({g_.literal(std::string(1, lo_d)), frac(b, i + 1, true, false, true)}));
    if (th) alts.push_back(seq_or_none({g_.literal(std::string(1, hi_d)), frac(b, i + 1, false, true, true)}));
    const char m_lo = tl ? static_cast<char>(lo_d + 1) : lo_d, m_hi = th ? static_cast<char>(hi_d - 1) : hi_d;
    if (m_lo <= m_hi) alts.push_back(g_.seq({digits(m_lo, m_hi), any_digits(0, rem1)}));
    return alt_or_none(alts);
  }
  // 1..rem digits, at least one of them non-zero.
  int32_t nonzero_digits(int32_t rem) {
    if (rem == kUnbounded) return g_.seq({any_digits(0, kUnbounded), digits('1', '9'), any_digits(0, kUnbounded)});
    std::vector<int32_t> alts;
    for (int32_t j = 0; j < rem; ++j) {
      alts.push_back(g_.seq({g_.repeat(g_.literal("0"), j, j), digits('1', '9'), any_digits(0, rem - j - 1)}));
    }
    return g_.alt(alts);
  }
  // Optional ".digits" part: absent when a zero fraction is allowed.
  int32_t fraction(const FracBounds& b) {
    const bool tl = b.lo != nullptr, th = b.hi != nullptr;
    int32_t body = frac(b, 0, tl, th, false);
    return alt_or_none({end_ok(b, 0, tl, th) ? g_.empty() : -1, body < 0 ? -1 : g_.seq({g_.literal("."), body})});
  }

  // Non-negative decimals in the bounds (lo required, hi optional); -1 if none.
  int32_t nonneg_decimal(const Decimal& lo, bool lo_excl, const Decimal* hi, bool hi_excl) {
    if (hi) {
      int c = cmp_dec(lo, *hi);
      if (c > 0 || (c == 0 && (lo_excl || hi_excl))) return -1;
    }
    const std::string& ia = lo.int_digits;
    if (hi && hi->int_digits == ia) {
      return seq_or_none({g_.literal(ia), fraction({&lo.frac_digits, lo_excl, &hi->frac_digits, hi_excl})});
    }
    std::vector<int32_t> alts;
    alts.push_back(seq_or_none({g_.literal(ia), fraction({&lo.frac_digits, lo_excl, nullptr, false})}));
    std::optional<std::string> mid_hi;
    if (hi) mid_hi = hi->int_digits == "0" ? std::string("-") : sub_one(hi->int_digits);
    if (!mid_hi || *mid_hi != "-") {
      int32_t mid = uint_range(add_one(ia), mid_hi);
      if (mid >= 0) alts.push_back(g_.seq({mid, fraction({nullptr, false, nullptr, false})}));
    }
    if (hi) alts.push_back(seq_or_none({g_.literal(hi->int_digits), fraction({nullptr, false, &hi->frac_digits, hi_excl})}));
    return alt_or_none(alts);
  }

 private:
  Grammar& g_;
  int32_t max_frac_;
};

}  // namespace

int compare_decimal(const Decimal& a, const Decimal& b) { return cmp_dec(a, b); }

namespace {
// A JSON number's text as an exact decimal; false for an exponent too large to expand.
bool parse_decimal_text(const std::string& text, Decimal* out) {
  Decimal d;
  size_t i = 0;
  if (i < text.size() && text[i] == '-') {
    d.negative = true;
    ++i;
  }
  std::string mant;
  int64_t point = -1, exp = 0;
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    if (text[i] == '.') {
      point = static_cast<int64_t>(mant.size());
    } else {
      mant += text[i];
    }
  }
  if (i < text.size()) {
    size_t j = i + 1;
    bool neg = false;
    if (j < text.size() && (text[j] == '+' || text[j] == '-')) neg = text[j++] == '-';
    for (; j < text.size(); ++j) {
      exp = exp * 10 + (text[j] - '0');
      if (exp > 100000) return false;
    }
    if (neg) exp = -exp;
  }
  if (point < 0) point = static_cast<int64_t>(mant.size());
  point += exp;
  if (point < 0) {
    mant = std::string(static_cast<size_t>(-point), '0') + mant;
    point = 0;
  }
  if (point > static_cast<int64_t>(mant.size())) mant += std::string(static_cast<size_t>(point) - mant.size(), '0');
  d.int_digits = mant.substr(0, static_cast<size_t>(point));
  d.frac_digits = mant.substr(static_cast<size_t>(point));
  size_t nz = d.int_digits.find_first_not_of('0');
  d.int_digits = nz == std::string::npos ? "0" : d.int_digits.substr(nz);
  while (!d.frac_digits.empty() && d.frac_digits.back() == '0') d.frac_digits.pop_back();
  if (d.is_zero()) d.negative = false;
  *out = std::move(d);
  return true;
}
}  // namespace

Decimal decimal_of(const nlohmann::ordered_json& number) {
  if (!number.is_number_integer() && !std::isfinite(number.get<double>())) {
    throw Error("JSON schema: bound is not a finite number");
  }
  Decimal d;
  DI_CHECK(parse_decimal_text(number.dump(), &d), "a double's shortest form has a small exponent");
  return d;
}

bool number_text_is_exact(const std::string& text, double parsed) {
  if (!std::isfinite(parsed)) return true;  // reported as not finite where it is used
  Decimal written;
  if (!parse_decimal_text(text, &written)) return false;
  return compare_decimal(written, decimal_of(nlohmann::ordered_json(parsed))) == 0;
}

int32_t integer_range_expr(Grammar& g, const NumberBounds& b) {
  RangeBuilder r(g);
  std::optional<SignedInt> lo, hi;
  if (b.lo) lo = b.lo_exclusive ? inc(floor_of(*b.lo)) : ceil_of(*b.lo);
  if (b.hi) hi = b.hi_exclusive ? dec(ceil_of(*b.hi)) : floor_of(*b.hi);
  if (lo && hi && cmp_int(*lo, *hi) > 0) return -1;
  if (!lo && !hi) {
    return g.seq({g.optional(g.literal("-")), g.alt({g.literal("0"), g.seq({r.digits('1', '9'), r.any_digits(0, kMaxDigits - 1)})})});
  }
  if (lo && !lo->negative) return r.uint_range(lo->mag, hi ? std::optional<std::string>(hi->mag) : std::nullopt);
  std::vector<int32_t> alts;
  // Negative part: magnitudes in [max(1, |hi|) if hi < 0, |lo|].
  std::string neg_lo = (hi && hi->negative) ? hi->mag : "1";
  std::optional<std::string> neg_hi;
  if (lo) neg_hi = lo->mag;
  int32_t neg = r.uint_range(neg_lo, neg_hi);
  if (neg >= 0) alts.push_back(g.seq({g.literal("-"), neg}));
  if (!hi || !hi->negative) alts.push_back(r.uint_range("0", hi ? std::optional<std::string>(hi->mag) : std::nullopt));
  return r.alt_or_none(alts);
}

int32_t number_range_expr(Grammar& g, const NumberBounds& b) {
  RangeBuilder r(g);
  if (!b.lo && !b.hi) {
    int32_t integer = g.seq({g.optional(g.literal("-")), g.alt({g.literal("0"), g.seq({r.digits('1', '9'), r.any_digits(0, kMaxDigits - 1)})})});
    int32_t frac = g.optional(g.seq({g.literal("."), r.any_digits(1, kMaxDigits)}));
    int32_t exp = g.optional(g.seq({g.char_class({{'E', 'E'}, {'e', 'e'}}), g.optional(g.char_class({{'+', '+'}, {'-', '-'}})),
                                    r.any_digits(1, 2)}));
    return g.seq({integer, frac, exp});
  }
  if (b.lo && b.hi) {
    int c = cmp_dec(*b.lo, *b.hi);
    if (c > 0 || (c == 0 && (b.lo_exclusive || b.hi_exclusive))) return -1;
  }
  // Fraction digits are capped so that every generated value has at most 15 significant
  // digits next to the bounds: then it converts to a double that compares with the bound as
  // the decimal does (validators compare in double precision).
  size_t int_digits = 1;
  if (b.lo) int_digits = std::max(int_digits, b.lo->int_digits.size());
  if (b.hi) int_digits = std::max(int_digits, b.hi->int_digits.size());
  RangeBuilder rf(g, static_cast<int32_t>(int_digits >= 14 ? 1 : 15 - int_digits));
  const Decimal zero;
  std::vector<int32_t> alts;
  const bool lo_neg = b.lo && b.lo->negative && !b.lo->is_zero();
  const bool hi_neg = b.hi && b.hi->negative && !b.hi->is_zero();
  // Non-negative part.
  if (!hi_neg && !(b.hi && b.hi->is_zero() && b.hi_exclusive)) {
    const bool from_lo = b.lo && !lo_neg;
    alts.push_back(rf.nonneg_decimal(from_lo ? *b.lo : zero, from_lo && b.lo_exclusive, b.hi, b.hi_exclusive));
  }
  // Negative part: magnitudes m > 0 with |hi| <= m (hi < 0) and m <= |lo|.
  if (!b.lo || lo_neg) {
    Decimal m_lo = zero, m_hi;
    bool m_lo_excl = true;
    if (hi_neg) {
      m_lo = *b.hi;
      m_lo.negative = false;
      m_lo_excl = b.hi_exclusive;
    }
    if (b.lo) {
      m_hi = *b.lo;
      m_hi.negative = false;
    }
    int32_t neg = rf.nonneg_decimal(m_lo, m_lo_excl, b.lo ? &m_hi : nullptr, b.lo_exclusive);
    if (neg >= 0) alts.push_back(g.seq({g.literal("-"), neg}));
  }
  return rf.alt_or_none(alts);
}

}  // namespace deepinfer::grammar::detail
