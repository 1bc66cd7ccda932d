// Strings of a regular expression (or format) restricted to a length range: JSON Schema's
// `pattern` or `format` together with minLength / maxLength (grammar/json_schema.h).
//
// The source expression is raw (literals and code-point classes, no rule references); the
// result is emitted into the target grammar, JSON-escaped when asked. Lengths count code
// points. Exact where a part has a fixed length (a counted repetition of a fixed-length
// item gets exact counts; a sequence with one variable part passes the range to it);
// elsewhere the range is split among the parts (each part gets a share of the room), so
// the result may omit some strings of the right length but never admits a wrong one.
#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "core/error.h"
#include "grammar/json_schema_layout.h"
#include "grammar/json_string.h"
#include "grammar/utf8_ranges.h"

namespace deepinfer::grammar::detail {
namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;

int64_t add(int64_t a, int64_t b) { return (a >= kInf || b >= kInf) ? kInf : std::min(kInf, a + b); }
int64_t mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (a >= kInf || b >= kInf || a > kInf / b) return kInf;
  return a * b;
}

class Restrictor {
 public:
  Restrictor(const Grammar& src, Grammar& dst, bool json) : src_(src), dst_(dst), json_(json) {}

  // [min, max] code points of the strings of `e` (max kInf when unbounded).
  std::pair<int64_t, int64_t> range(int32_t e) {
    auto it = ranges_.find(e);
    if (it != ranges_.end()) return it->second;
    const Expr x = src_.expr(e);
    std::pair<int64_t, int64_t> r{0, 0};
    switch (x.kind) {
      case ExprKind::kEmpty: break;
      case ExprKind::kLiteral: r = {code_points(x.literal), code_points(x.literal)}; break;
      case ExprKind::kCharClass: r = {1, 1}; break;
      case ExprKind::kRuleRef: throw Error("a rule reference in a length-restricted expression");
      case ExprKind::kSeq:
        for (int32_t c : x.children) {
          auto cr = range(c);
          r = {add(r.first, cr.first), add(r.second, cr.second)};
        }
        break;
      case ExprKind::kAlt:
        r = {kInf, 0};
        for (int32_t c : x.children) {
          auto cr = range(c);
          r = {std::min(r.first, cr.first), std::max(r.second, cr.second)};
        }
        break;
      case ExprKind::kRepeat: {
        auto cr = range(x.children[0]);
        r = {mul(cr.first, x.min), x.max == kUnbounded ? (cr.second == 0 ? 0 : kInf) : mul(cr.second, x.max)};
        break;
      }
    }
    ranges_[e] = r;
    return r;
  }

  // The strings of `e` with lo <= length <= hi (hi kInf: unbounded), or a subset of them;
  // -1 when none is produced.
  int32_t restrict(int32_t e, int64_t lo, int64_t hi) {
    lo = std::max<int64_t>(lo, 0);
    const auto [mn, mx] = range(e);
    if (mx < lo || mn > hi || lo > hi) return -1;
    if (lo <= mn && mx <= hi) return copy(e);
    auto key = std::make_tuple(e, lo, hi);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    const Expr x = src_.expr(e);
    int32_t out = -1;
    switch (x.kind) {
      case ExprKind::kAlt: {
        std::vector<int32_t> alts;
        for (int32_t c : x.children) {
          int32_t r = restrict(c, lo, hi);
          if (r >= 0) alts.push_back(r);
        }
        if (!alts.empty()) out = dst_.alt(alts);
        break;
      }
      case ExprKind::kSeq: out = restrict_seq(x.children, lo, hi); break;
      case ExprKind::kRepeat: out = restrict_repeat(x, lo, hi); break;
      default: break;  // fixed lengths: handled by the range test above
    }
    memo_[key] = out;
    return out;
  }

 private:
  static int64_t code_points(const std::string& s) {
    int64_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }

  // Parts with fixed lengths keep them; the room above the minimum (hi - sum of minima) is
  // shared among the variable parts, and the length still needed to reach lo is asked of
  // them in order.
  int32_t restrict_seq(const std::vector<int32_t>& parts, int64_t lo, int64_t hi) {
    int64_t min_sum = 0;
    std::vector<int32_t> variable;
    for (size_t i = 0; i < parts.size(); ++i) {
      auto r = range(parts[i]);
      min_sum = add(min_sum, r.first);
      if (r.first != r.second) variable.push_back(static_cast<int32_t>(i));
    }
    if (variable.empty()) return -1;  // fixed total outside [lo, hi]
    const int64_t room = hi >= kInf ? kInf : hi - min_sum;
    int64_t need = std::max<int64_t>(0, lo - min_sum);
    std::vector<int64_t> cap(parts.size(), 0), want(parts.size(), 0);
    int64_t left = room;
    for (size_t k = 0; k < variable.size(); ++k) {
      const size_t i = static_cast<size_t>(variable[k]);
      auto r = range(parts[i]);
      const int64_t capacity = r.second >= kInf ? kInf : r.second - r.first;
      const int64_t share = left >= kInf ? kInf : left / static_cast<int64_t>(variable.size() - k);
      cap[i] = std::min({capacity, std::max(share, need), left});
      want[i] = std::min(need, cap[i]);
      need -= want[i];
      if (left < kInf) left -= cap[i];
    }
    if (need > 0) return -1;
    std::vector<int32_t> out;
    for (size_t i = 0; i < parts.size(); ++i) {
      auto r = range(parts[i]);
      int32_t p = r.first == r.second ? copy(parts[i]) : restrict(parts[i], r.first + want[i], add(r.first, cap[i]));
      if (p < 0) return -1;
      out.push_back(p);
    }
    return dst_.seq(out);
  }

  // n copies of the item, each of length in [a, b]: n*a >= lo and n*b <= hi.
  int32_t restrict_repeat(const Expr& x, int64_t lo, int64_t hi) {
    const int32_t item = x.children[0];
    auto [a, b] = range(item);
    const int64_t max_n = x.max == kUnbounded ? kInf : x.max;
    if (a == b) {  // fixed item length: exact counts
      if (a == 0) return -1;
      const int64_t n1 = std::max<int64_t>(x.min, (lo + a - 1) / a);
      const int64_t n2 = std::min(max_n, hi >= kInf ? kInf : hi / a);
      if (n1 > n2) return -1;
      return dst_.repeat(copy(item), static_cast<int32_t>(n1), n2 >= kInf ? kUnbounded : static_cast<int32_t>(n2));
    }
    const int64_t a1 = std::max<int64_t>(a, 1);
    for (int64_t b1 = std::min(b, hi); b1 >= a1; b1 = b1 > a1 ? std::max(a1, b1 / 2) : a1 - 1) {
      const int64_t n1 = std::max<int64_t>(x.min, (lo + a1 - 1) / a1);
      const int64_t n2 = std::min(max_n, hi >= kInf ? kInf : hi / b1);
      if (n1 <= n2 && n1 < (1 << 20)) {
        int32_t r = restrict(item, a1, b1);
        if (r < 0) return -1;
        return dst_.repeat(r, static_cast<int32_t>(n1), n2 >= kInf ? kUnbounded : static_cast<int32_t>(std::min<int64_t>(n2, 1 << 20)));
      }
    }
    return lo == 0 && x.min == 0 ? dst_.empty() : -1;  // no copy at all
  }

  // `e` unrestricted, emitted into the target (JSON-escaped when asked).
  int32_t copy(int32_t e) {
    if (&src_ == &dst_ && !json_) return e;
    auto it = copies_.find(e);
    if (it != copies_.end()) return it->second;
    const Expr x = src_.expr(e);
    int32_t out = -1;
    switch (x.kind) {
      case ExprKind::kEmpty: out = dst_.empty(); break;
      case ExprKind::kLiteral: out = json_ ? dst_.literal(json_escape(x.literal)) : dst_.literal(x.literal); break;
      case ExprKind::kCharClass: out = json_ ? json_char_class(dst_, x.ranges) : dst_.char_class(x.ranges); break;
      case ExprKind::kRuleRef: throw Error("a rule reference in a length-restricted expression");
      case ExprKind::kSeq:
      case ExprKind::kAlt: {
        std::vector<int32_t> kids;
        for (int32_t c : x.children) kids.push_back(copy(c));
        out = x.kind == ExprKind::kSeq ? dst_.seq(kids) : dst_.alt(kids);
        break;
      }
      case ExprKind::kRepeat: out = dst_.repeat(copy(x.children[0]), x.min, x.max); break;
    }
    copies_[e] = out;
    return out;
  }

  const Grammar& src_;
  Grammar& dst_;
  bool json_;
  std::map<int32_t, std::pair<int64_t, int64_t>> ranges_;
  std::map<std::tuple<int32_t, int64_t, int64_t>, int32_t> memo_;
  std::map<int32_t, int32_t> copies_;
};

}  // namespace

int32_t restrict_length(const Grammar& src, int32_t e, Grammar& dst, int64_t lo, int64_t hi, bool json) {
  Restrictor r(src, dst, json);
  return r.restrict(e, lo, hi < 0 ? kInf : hi);
}

}  // namespace deepinfer::grammar::detail
