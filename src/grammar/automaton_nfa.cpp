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
// Deepest chain of inlined rule references (with their expressions) one NFA build expands.
constexpr int64_t kMaxInlineDepth = 256;
int64_t sat_mul(int64_t a, int64_t b) { return (a == 0 || b == 0) ? 0 : (a > kSat / b ? kSat : std::min(kSat, a * b)); }
int64_t sat_add(int64_t a, int64_t b) { return std::min(kSat, a + b); }

int64_t repeat_copies(const Expr& e) { return e.max == kUnbounded ? e.min + 1 : e.max; }

// Visits every rule reference in `expr` with the number of copies it gets when expanded
// (an explicit stack: the expression's depth comes from the input).
void for_each_ref(const Grammar& g, int32_t expr, int64_t mult, const std::function<void(int32_t, int64_t)>& fn) {
  std::vector<std::pair<int32_t, int64_t>> stack{{expr, mult}};
  while (!stack.empty()) {
    auto [id, m] = stack.back();
    stack.pop_back();
    const Expr& e = g.expr(id);
    switch (e.kind) {
      case ExprKind::kRuleRef: fn(e.rule, m); break;
      case ExprKind::kSeq:
      case ExprKind::kAlt:
        for (size_t i = e.children.size(); i-- > 0;) stack.push_back({e.children[i], m});
        break;
      case ExprKind::kRepeat: stack.push_back({e.children[0], sat_mul(m, repeat_copies(e))}); break;
      default: break;
    }
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
  // A rule is recursive when it lies on a cycle: a strongly connected component of more
  // than one rule, or a rule calling itself (Tarjan's algorithm with an explicit stack:
  // linear in the rules and references).
  {
    std::vector<int32_t> index(n, -1), low(n, 0), scc_stack;
    std::vector<bool> on_stack(n, false);
    std::vector<std::pair<int32_t, size_t>> frames;  // (rule, next callee)
    int32_t counter = 0;
    for (size_t r0 = 0; r0 < n; ++r0) {
      if (!reachable[r0] || index[r0] >= 0) continue;
      frames.push_back({static_cast<int32_t>(r0), 0});
      index[r0] = low[r0] = counter++;
      scc_stack.push_back(static_cast<int32_t>(r0));
      on_stack[r0] = true;
      while (!frames.empty()) {
        auto& [v, i] = frames.back();
        const auto vs = static_cast<size_t>(v);
        if (i < callees[vs].size()) {
          const auto w = static_cast<size_t>(callees[vs][i++]);
          if (w == vs) plan.recursive[vs] = true;
          if (index[w] < 0) {
            index[w] = low[w] = counter++;
            scc_stack.push_back(static_cast<int32_t>(w));
            on_stack[w] = true;
            frames.push_back({static_cast<int32_t>(w), 0});
          } else if (on_stack[w]) {
            low[vs] = std::min(low[vs], index[w]);
          }
          continue;
        }
        if (low[vs] == index[vs]) {
          std::vector<int32_t> comp;
          for (;;) {
            int32_t w = scc_stack.back();
            scc_stack.pop_back();
            on_stack[static_cast<size_t>(w)] = false;
            comp.push_back(w);
            if (w == v) break;
          }
          if (comp.size() > 1) {
            for (int32_t w : comp) plan.recursive[static_cast<size_t>(w)] = true;
          }
        }
        const int32_t done_low = low[vs];
        frames.pop_back();
        if (!frames.empty()) {
          auto& parent = low[static_cast<size_t>(frames.back().first)];
          parent = std::min(parent, done_low);
        }
      }
    }
  }
  // Rules always compiled: the root, recursive rules, and rules whose full inline expansion
  // would nest deeper than kMaxInlineDepth (a long chain of rules each using the next): the
  // NFA builder recurses through inlined references, so a chain is cut into compiled rules
  // (call edges) instead of growing the stack with the input.
  std::vector<bool> forced(n, false);
  auto always_compiled = [&](int32_t r) {
    return r == g.root() || plan.recursive[static_cast<size_t>(r)] || forced[static_cast<size_t>(r)];
  };
  // Callers before callees over the edges to inlinable rules (they form a DAG: a rule on a
  // cycle is recursive).
  std::vector<int64_t> indeg(n, 0), copies(n, 0);
  for (size_t r = 0; r < n; ++r) {
    if (!reachable[r]) continue;
    for (int32_t x : callees[r]) {
      if (!always_compiled(x)) ++indeg[static_cast<size_t>(x)];
    }
  }
  std::vector<int32_t> order;
  {
    std::vector<int64_t> deg = indeg;
    for (size_t r = 0; r < n; ++r) {
      if (reachable[r] && (always_compiled(static_cast<int32_t>(r)) || deg[r] == 0)) order.push_back(static_cast<int32_t>(r));
    }
    for (size_t i = 0; i < order.size(); ++i) {
      for (int32_t x : callees[static_cast<size_t>(order[i])]) {
        if (!always_compiled(x) && --deg[static_cast<size_t>(x)] == 0) order.push_back(x);
      }
    }
  }
  // Full expanded size and nesting depth of each rule (references to inlinable rules
  // expanded), callees first. Expressions are numbered children first, so each rule's
  // expressions are evaluated in increasing id order without recursion.
  std::vector<int64_t> size(n, 2), height(n, 1);
  std::vector<int64_t> esize(g.n_exprs(), -1), edepth(g.n_exprs(), 0);
  std::vector<int32_t> todo, walk;
  for (size_t oi = order.size(); oi-- > 0;) {
    const int32_t r = order[oi];
    todo.clear();
    walk.assign(1, g.rules()[static_cast<size_t>(r)].body);
    while (!walk.empty()) {
      int32_t id = walk.back();
      walk.pop_back();
      if (esize[static_cast<size_t>(id)] != -1) continue;
      esize[static_cast<size_t>(id)] = -2;  // queued
      todo.push_back(id);
      for (int32_t c : g.expr(id).children) walk.push_back(c);
    }
    std::sort(todo.begin(), todo.end());
    for (int32_t id : todo) {
      const Expr& e = g.expr(id);
      int64_t sz = 1, dp = 1;
      switch (e.kind) {
        case ExprKind::kEmpty: break;
        case ExprKind::kLiteral: sz = static_cast<int64_t>(e.literal.size()) + 1; break;
        case ExprKind::kCharClass: sz = static_cast<int64_t>(e.ranges.size()) * 3 + 2; break;
        case ExprKind::kRuleRef:
          if (always_compiled(e.rule)) {
            sz = 2;
          } else {
            sz = size[static_cast<size_t>(e.rule)];
            dp = 1 + height[static_cast<size_t>(e.rule)];
          }
          break;
        case ExprKind::kSeq:
        case ExprKind::kAlt:
          sz = 2;
          for (int32_t c : e.children) {
            sz = sat_add(sz, esize[static_cast<size_t>(c)]);
            dp = std::max(dp, 1 + edepth[static_cast<size_t>(c)]);
          }
          break;
        case ExprKind::kRepeat:
          sz = sat_add(2, sat_mul(esize[static_cast<size_t>(e.children[0])], repeat_copies(e)));
          dp = 1 + edepth[static_cast<size_t>(e.children[0])];
          break;
      }
      esize[static_cast<size_t>(id)] = sz;
      edepth[static_cast<size_t>(id)] = dp;
    }
    const auto body = static_cast<size_t>(g.rules()[static_cast<size_t>(r)].body);
    size[static_cast<size_t>(r)] = esize[body];
    height[static_cast<size_t>(r)] = edepth[body];
    // Expressions are shared between rules: a value computed before a rule was forced
    // would be stale, so forcing happens only for rules no computed expression refers to
    // yet (callers come later in this order, and only callers refer to r).
    if (!always_compiled(r) && height[static_cast<size_t>(r)] > kMaxInlineDepth) forced[static_cast<size_t>(r)] = true;
  }
  auto rule_size = [&](int32_t r) { return size[static_cast<size_t>(r)]; };
  // Copies each non-recursive rule would get, top-down (callers before callees).
  std::vector<bool> inlined(n, false);
  // Forced rules leave the inlinable graph: recount the in-degrees without them.
  std::fill(indeg.begin(), indeg.end(), 0);
  for (size_t r = 0; r < n; ++r) {
    if (!reachable[r]) continue;
    for (int32_t x : callees[r]) {
      if (!always_compiled(x)) ++indeg[static_cast<size_t>(x)];
    }
  }
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
