// Inlining plan and Thompson NFA construction (stage 1-2 of build_pda).
#include <algorithm>
#include <deque>
#include <functional>

#include "core/error.h"
#include "grammar/automaton_internal.h"
#include "grammar/utf8_ranges.h"

namespace deepinfer::grammar::detail {
namespace {

constexpr int64_t kSat = int64_t{1} << 40;
int64_t sat_mul(int64_t a, int64_t b) { return (a == 0 || b == 0) ? 0 : (a > kSat / b ? kSat : std::min(kSat, a * b)); }
int64_t sat_add(int64_t a, int64_t b) { return std::min(kSat, a + b); }

int64_t repeat_copies(const Expr& e) { return e.max == kUnbounded ? e.min + 1 : e.max; }

// Visits every rule reference in `expr` with the number of copies it gets when expanded.
void for_each_ref(const Grammar& g, int32_t expr, int64_t mult, const std::function<void(int32_t, int64_t)>& fn) {
  const Expr& e = g.expr(expr);
  switch (e.kind) {
    case ExprKind::kRuleRef: fn(e.rule, mult); break;
    case ExprKind::kSeq:
    case ExprKind::kAlt:
      for (int32_t c : e.children) for_each_ref(g, c, mult, fn);
      break;
    case ExprKind::kRepeat: for_each_ref(g, e.children[0], sat_mul(mult, repeat_copies(e)), fn); break;
    default: break;
  }
}

}  // namespace

InlinePlan plan_inlining(const Grammar& g, int budget) {
  const size_t n = g.rules().size();
  std::vector<std::vector<int32_t>> callees(n);
  for (size_t r = 0; r < n; ++r) {
    for_each_ref(g, g.rules()[r].body, 1, [&](int32_t x, int64_t) { callees[r].push_back(x); });
    std::sort(callees[r].begin(), callees[r].end());
    callees[r].erase(std::unique(callees[r].begin(), callees[r].end()), callees[r].end());
  }
  // Reachable rules, and which of them lie on a cycle.
  std::vector<bool> reachable(n, false);
  std::vector<int32_t> stack{g.root()};
  reachable[static_cast<size_t>(g.root())] = true;
  while (!stack.empty()) {
    int32_t r = stack.back();
    stack.pop_back();
    for (int32_t x : callees[static_cast<size_t>(r)]) {
      if (!reachable[static_cast<size_t>(x)]) {
        reachable[static_cast<size_t>(x)] = true;
        stack.push_back(x);
      }
    }
  }
  InlinePlan plan;
  plan.recursive.assign(n, false);
  for (size_t r = 0; r < n; ++r) {
    if (!reachable[r]) continue;
    std::vector<bool> seen(n, false);
    std::vector<int32_t> st(callees[r].begin(), callees[r].end());
    while (!st.empty() && !plan.recursive[r]) {
      int32_t x = st.back();
      st.pop_back();
      if (static_cast<size_t>(x) == r) plan.recursive[r] = true;
      if (seen[static_cast<size_t>(x)]) continue;
      seen[static_cast<size_t>(x)] = true;
      for (int32_t y : callees[static_cast<size_t>(x)]) st.push_back(y);
    }
  }
  // Full expanded size of each rule (non-recursive references expanded), memoised.
  std::vector<int64_t> size(n, -1);
  std::function<int64_t(int32_t)> expr_size;
  std::function<int64_t(int32_t)> rule_size = [&](int32_t r) -> int64_t {
    auto& s = size[static_cast<size_t>(r)];
    if (s < 0) s = expr_size(g.rules()[static_cast<size_t>(r)].body);
    return s;
  };
  expr_size = [&](int32_t id) -> int64_t {
    const Expr& e = g.expr(id);
    switch (e.kind) {
      case ExprKind::kEmpty: return 1;
      case ExprKind::kLiteral: return static_cast<int64_t>(e.literal.size()) + 1;
      case ExprKind::kCharClass: return static_cast<int64_t>(e.ranges.size()) * 3 + 2;
      case ExprKind::kRuleRef:
        return plan.recursive[static_cast<size_t>(e.rule)] || e.rule == g.root() ? 2 : rule_size(e.rule);
      case ExprKind::kSeq:
      case ExprKind::kAlt: {
        int64_t s = 2;
        for (int32_t c : e.children) s = sat_add(s, expr_size(c));
        return s;
      }
      case ExprKind::kRepeat: return sat_add(2, sat_mul(expr_size(e.children[0]), repeat_copies(e)));
    }
    return 1;
  };
  // Copies each non-recursive rule would get, top-down (callers before callees).
  auto always_compiled = [&](int32_t r) { return r == g.root() || plan.recursive[static_cast<size_t>(r)]; };
  std::vector<int64_t> indeg(n, 0), copies(n, 0);
  for (size_t r = 0; r < n; ++r) {
    if (!reachable[r]) continue;
    for (int32_t x : callees[r]) {
      if (!always_compiled(x)) ++indeg[static_cast<size_t>(x)];
    }
  }
  std::vector<bool> inlined(n, false);
  std::deque<int32_t> queue;
  for (size_t r = 0; r < n; ++r) {
    if (reachable[r] && (always_compiled(static_cast<int32_t>(r)) || indeg[r] == 0)) queue.push_back(static_cast<int32_t>(r));
  }
  while (!queue.empty()) {
    int32_t y = queue.front();
    queue.pop_front();
    auto ys = static_cast<size_t>(y);
    if (!always_compiled(y)) {
      inlined[ys] = copies[ys] <= 1 || sat_mul(rule_size(y), copies[ys]) <= budget;
    }
    int64_t c = inlined[ys] ? copies[ys] : 1;
    for_each_ref(g, g.rules()[ys].body, 1, [&](int32_t x, int64_t m) {
      if (!always_compiled(x)) copies[static_cast<size_t>(x)] = sat_add(copies[static_cast<size_t>(x)], sat_mul(c, m));
    });
    for (int32_t x : callees[ys]) {
      if (!always_compiled(x) && --indeg[static_cast<size_t>(x)] == 0) queue.push_back(x);
    }
  }
  plan.compiled_id.assign(n, -1);
  plan.compiled.push_back(g.root());
  for (size_t r = 0; r < n; ++r) {
    if (reachable[r] && static_cast<int32_t>(r) != g.root() && !inlined[r]) plan.compiled.push_back(static_cast<int32_t>(r));
  }
  for (size_t i = 0; i < plan.compiled.size(); ++i) plan.compiled_id[static_cast<size_t>(plan.compiled[i])] = static_cast<int32_t>(i);
  return plan;
}

namespace {

class NfaBuilder {
 public:
  NfaBuilder(const Grammar& g, const InlinePlan& plan, int64_t* total, int64_t max)
      : g_(g), plan_(plan), total_(total), max_(max) {}

  Nfa build(int32_t rule) {
    nfa_.start = add();
    nfa_.end = add();
    int32_t e = expr(g_.rules()[static_cast<size_t>(rule)].body, nfa_.start);
    nfa_.states[static_cast<size_t>(e)].eps.push_back(nfa_.end);
    return std::move(nfa_);
  }

 private:
  int32_t add() {
    if (++*total_ > max_) {
      throw Error("grammar too large: more than " + std::to_string(max_) +
                  " automaton states (large repetition counts or lengths?)");
    }
    nfa_.states.emplace_back();
    return static_cast<int32_t>(nfa_.states.size() - 1);
  }
  NfaState& st(int32_t s) { return nfa_.states[static_cast<size_t>(s)]; }
  void eps(int32_t a, int32_t b) { st(a).eps.push_back(b); }

  // Builds `id` starting at state `from`; returns the state where it ends.
  int32_t expr(int32_t id, int32_t from) {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case ExprKind::kEmpty: return from;
      case ExprKind::kLiteral: {
        int32_t cur = from;
        for (char c : e.literal) {
          int32_t nx = add();
          auto b = static_cast<uint8_t>(c);
          st(cur).bytes.push_back({b, b, nx});
          cur = nx;
        }
        return cur;
      }
      case ExprKind::kCharClass: {
        int32_t end = add();
        for (const auto& seq : utf8_sequences(e.ranges)) {
          int32_t cur = from;
          for (int i = 0; i < seq.len; ++i) {
            int32_t nx = i + 1 == seq.len ? end : add();
            st(cur).bytes.push_back({seq.r[i].lo, seq.r[i].hi, nx});
            cur = nx;
          }
        }
        return end;
      }
      case ExprKind::kRuleRef: {
        if (plan_.compiled_id[static_cast<size_t>(e.rule)] >= 0) {
          int32_t nx = add();
          st(from).calls.push_back({e.rule, nx});
          return nx;
        }
        int32_t in = add();
        eps(from, in);
        return expr(g_.rules()[static_cast<size_t>(e.rule)].body, in);
      }
      case ExprKind::kSeq: {
        int32_t cur = from;
        for (int32_t c : e.children) cur = expr(c, cur);
        return cur;
      }
      case ExprKind::kAlt: {
        int32_t end = add();
        for (int32_t c : e.children) {
          int32_t in = add();
          eps(from, in);
          eps(expr(c, in), end);
        }
        return end;
      }
      case ExprKind::kRepeat: {
        int32_t child = e.children[0];
        int32_t cur = from;
        for (int32_t i = 0; i < e.min; ++i) {
          int32_t in = add();
          eps(cur, in);
          cur = expr(child, in);
        }
        if (e.max == kUnbounded) {
          int32_t loop = add();
          eps(cur, loop);
          int32_t in = add();
          eps(loop, in);
          eps(expr(child, in), loop);
          return loop;
        }
        int32_t end = add();
        for (int32_t i = e.min; i < e.max; ++i) {
          eps(cur, end);
          int32_t in = add();
          eps(cur, in);
          cur = expr(child, in);
        }
        eps(cur, end);
        return end;
      }
    }
    return from;
  }

  const Grammar& g_;
  const InlinePlan& plan_;
  int64_t* total_;
  int64_t max_;
  Nfa nfa_;
};

}  // namespace

Nfa build_nfa(const Grammar& g, int32_t rule, const InlinePlan& plan, int64_t* total_states, int64_t max_states) {
  NfaBuilder b(g, plan, total_states, max_states);
  return b.build(rule);
}

}  // namespace deepinfer::grammar::detail
