// build_pda: assembles the stages (automaton_nfa.cpp, automaton_dfa.cpp), trims, minimises
// and analyses the tables.
#include "grammar/automaton.h"

#include <algorithm>
#include <span>

#include "core/error.h"
#include "grammar/automaton_internal.h"

namespace deepinfer::grammar {
namespace {

using detail::RawTables;

size_t at(int32_t s, int32_t c, int32_t nc) { return static_cast<size_t>(s) * static_cast<size_t>(nc) + static_cast<size_t>(c); }

// States that can reach the end of their rule (calls only through productive rules), and
// which rules are productive.
std::vector<uint8_t> coreachable(const RawTables& t, std::vector<uint8_t>* productive) {
  const int32_t n = t.size(), nc = t.n_classes;
  const size_t n_rules = t.rule_start.size();
  std::vector<std::vector<int32_t>> byte_pred(static_cast<size_t>(n));
  std::vector<std::vector<std::pair<int32_t, int32_t>>> call_pred(static_cast<size_t>(n));  // ret -> (caller, rule)
  for (int32_t s = 0; s < n; ++s) {
    for (int32_t c = 0; c < nc; ++c) {
      int32_t to = t.next[at(s, c, nc)];
      if (to >= 0) byte_pred[static_cast<size_t>(to)].push_back(s);
    }
    for (const auto& call : t.calls[static_cast<size_t>(s)]) call_pred[static_cast<size_t>(call.ret)].push_back({s, call.rule});
  }
  std::vector<uint8_t> co(static_cast<size_t>(n), 0);
  productive->assign(n_rules, 0);
  std::vector<std::vector<int32_t>> pending(n_rules);
  std::vector<int32_t> work;
  auto mark = [&](int32_t s) {
    if (co[static_cast<size_t>(s)]) return;
    co[static_cast<size_t>(s)] = 1;
    work.push_back(s);
  };
  for (int32_t s = 0; s < n; ++s) {
    if (t.final[static_cast<size_t>(s)]) mark(s);
  }
  while (!work.empty()) {
    int32_t s = work.back();
    work.pop_back();
    for (int32_t p : byte_pred[static_cast<size_t>(s)]) mark(p);
    for (auto [p, r] : call_pred[static_cast<size_t>(s)]) {
      if ((*productive)[static_cast<size_t>(r)]) {
        mark(p);
      } else {
        pending[static_cast<size_t>(r)].push_back(p);
      }
    }
    const int32_t r = t.rule_of[static_cast<size_t>(s)];
    if (s == t.rule_start[static_cast<size_t>(r)] && !(*productive)[static_cast<size_t>(r)]) {
      (*productive)[static_cast<size_t>(r)] = 1;
      for (int32_t p : pending[static_cast<size_t>(r)]) mark(p);
      pending[static_cast<size_t>(r)].clear();
    }
  }
  return co;
}

// Keeps the states in `keep` (renumbered in order), dropping dead edges.
RawTables compact(const RawTables& t, const std::vector<uint8_t>& keep, const std::vector<uint8_t>& productive) {
  const int32_t n = t.size(), nc = t.n_classes;
  std::vector<int32_t> id(static_cast<size_t>(n), -1);
  RawTables o;
  int32_t next_id = 0;
  o.n_classes = nc;
  o.byte_class = t.byte_class;
  for (int32_t s = 0; s < n; ++s) {
    if (keep[static_cast<size_t>(s)]) id[static_cast<size_t>(s)] = next_id++;
  }
  for (int32_t s = 0; s < n; ++s) {
    if (!keep[static_cast<size_t>(s)]) continue;
    o.final.push_back(t.final[static_cast<size_t>(s)]);
    o.rule_of.push_back(t.rule_of[static_cast<size_t>(s)]);
    for (int32_t c = 0; c < nc; ++c) {
      int32_t to = t.next[at(s, c, nc)];
      o.next.push_back(to >= 0 ? id[static_cast<size_t>(to)] : -1);
    }
    std::vector<PdaCall> calls;
    for (const auto& call : t.calls[static_cast<size_t>(s)]) {
      if (productive[static_cast<size_t>(call.rule)] && id[static_cast<size_t>(call.ret)] >= 0) {
        calls.push_back({call.rule, id[static_cast<size_t>(call.ret)]});
      }
    }
    o.calls.push_back(std::move(calls));
  }
  for (int32_t s : t.rule_start) o.rule_start.push_back(id[static_cast<size_t>(s)]);
  return o;
}

std::vector<uint8_t> reachable(const RawTables& t, int32_t root) {
  const int32_t nc = t.n_classes;
  std::vector<uint8_t> seen(static_cast<size_t>(t.size()), 0);
  std::vector<int32_t> work;
  auto push = [&](int32_t s) {
    if (s >= 0 && !seen[static_cast<size_t>(s)]) {
      seen[static_cast<size_t>(s)] = 1;
      work.push_back(s);
    }
  };
  push(t.rule_start[static_cast<size_t>(root)]);
  while (!work.empty()) {
    int32_t s = work.back();
    work.pop_back();
    for (int32_t c = 0; c < nc; ++c) push(t.next[at(s, c, nc)]);
    for (const auto& call : t.calls[static_cast<size_t>(s)]) {
      push(t.rule_start[static_cast<size_t>(call.rule)]);
      push(call.ret);
    }
  }
  return seen;
}

void analyse(PdaTables& p, const std::vector<uint8_t>& final) {
  const int32_t n = p.n_states, nc = p.n_classes;
  const size_t n_rules = p.rules.size();
  p.flags.assign(static_cast<size_t>(n), 0);
  p.first_bytes.assign(static_cast<size_t>(n), {0, 0, 0, 0});
  for (int32_t s = 0; s < n; ++s) {
    uint8_t f = final[static_cast<size_t>(s)] ? PdaTables::kFinal : 0;
    for (int b = 0; b < 256; ++b) {
      if (p.step(s, static_cast<uint8_t>(b)) >= 0) {
        p.first_bytes[static_cast<size_t>(s)][static_cast<size_t>(b >> 6)] |= uint64_t{1} << (b & 63);
        f |= PdaTables::kHasBytes;
      }
    }
    if (p.call_begin[static_cast<size_t>(s) + 1] > p.call_begin[static_cast<size_t>(s)]) f |= PdaTables::kHasCalls;
    p.flags[static_cast<size_t>(s)] |= f;
  }
  // Nullable rules (fixpoint over rules).
  auto calls_of = [&](int32_t s) {
    return std::span<const PdaCall>(p.calls.data() + p.call_begin[static_cast<size_t>(s)],
                                    static_cast<size_t>(p.call_begin[static_cast<size_t>(s) + 1] - p.call_begin[static_cast<size_t>(s)]));
  };
  // States reachable from `s` without consuming a byte (through nullable calls).
  auto zero_closure = [&](int32_t s, std::vector<int32_t>& out) {
    out.assign(1, s);
    for (size_t i = 0; i < out.size(); ++i) {
      for (const auto& c : calls_of(out[i])) {
        if (p.rules[static_cast<size_t>(c.rule)].nullable && std::find(out.begin(), out.end(), c.ret) == out.end()) {
          out.push_back(c.ret);
        }
      }
    }
  };
  std::vector<int32_t> clo;
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& r : p.rules) {
      if (r.nullable || r.start < 0) continue;
      zero_closure(r.start, clo);
      for (int32_t s : clo) {
        if (p.has(s, PdaTables::kFinal)) {
          r.nullable = true;
          changed = true;
          break;
        }
      }
    }
  }
  // Left recursion: rule R calls rule Q before consuming a byte; a cycle is an error.
  std::vector<std::vector<int32_t>> left(n_rules);
  for (size_t r = 0; r < n_rules; ++r) {
    if (p.rules[r].start < 0) continue;
    zero_closure(p.rules[r].start, clo);
    for (int32_t s : clo) {
      for (const auto& c : calls_of(s)) left[r].push_back(c.rule);
    }
  }
  std::vector<uint8_t> color(n_rules, 0);  // 0 new, 1 on stack, 2 done
  for (size_t r0 = 0; r0 < n_rules; ++r0) {
    if (color[r0]) continue;
    std::vector<std::pair<size_t, size_t>> st{{r0, 0}};
    color[r0] = 1;
    while (!st.empty()) {
      auto& [r, i] = st.back();
      if (i == left[r].size()) {
        color[r] = 2;
        st.pop_back();
        continue;
      }
      auto q = static_cast<size_t>(left[r][i++]);
      if (color[q] == 1) {
        throw Error("grammar: rule '" + p.rules[q].name +
                    "' is left-recursive (it can reach itself without consuming input); rewrite it with repetition");
      }
      if (color[q] == 0) {
        color[q] = 1;
        st.push_back({q, 0});
      }
    }
  }
  // Shortest completion of each state's rule, and of each rule.
  constexpr int32_t kInf = 1 << 29;
  p.min_bytes_to_end.assign(static_cast<size_t>(n), kInf);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t s = n - 1; s >= 0; --s) {
      int32_t best = p.has(s, PdaTables::kFinal) ? 0 : kInf;
      for (int32_t c = 0; c < nc; ++c) {
        int32_t to = p.next[at(s, c, nc)];
        if (to >= 0) best = std::min(best, 1 + p.min_bytes_to_end[static_cast<size_t>(to)]);
      }
      for (const auto& call : calls_of(s)) {
        best = std::min(best, p.min_bytes_to_end[static_cast<size_t>(p.rules[static_cast<size_t>(call.rule)].start)] +
                                  p.min_bytes_to_end[static_cast<size_t>(call.ret)]);
      }
      if (best < p.min_bytes_to_end[static_cast<size_t>(s)]) {
        p.min_bytes_to_end[static_cast<size_t>(s)] = best;
        changed = true;
      }
    }
  }
  for (auto& r : p.rules) r.min_bytes = r.start < 0 ? kInf : p.min_bytes_to_end[static_cast<size_t>(r.start)];
  for (int32_t s = 0; s < n; ++s) {
    for (const auto& c : calls_of(s)) {
      auto& sites = p.rules[static_cast<size_t>(c.rule)].return_sites;
      if (std::find(sites.begin(), sites.end(), c.ret) == sites.end()) sites.push_back(c.ret);
    }
  }
}

}  // namespace

PdaTables build_pda(const Grammar& g, const BuildOptions& opts) {
  g.validate();
  detail::InlinePlan plan = detail::plan_inlining(g, opts.inline_budget);
  std::vector<detail::Nfa> nfas;
  int64_t total = 0;
  for (int32_t r : plan.compiled) nfas.push_back(detail::build_nfa(g, r, plan, &total, opts.max_nfa_states));
  RawTables raw;
  detail::compute_byte_classes(nfas, &raw);
  for (size_t i = 0; i < nfas.size(); ++i) {
    detail::append_dfa(nfas[i], static_cast<int32_t>(i), plan, &raw, opts.max_dfa_states);
    nfas[i] = {};
  }
  // Trim: states that cannot finish, then states the root cannot reach.
  std::vector<uint8_t> productive;
  std::vector<uint8_t> co = coreachable(raw, &productive);
  if (!productive[0]) throw Error("grammar: the start rule '" + g.rule(g.root()).name + "' accepts no string");
  RawTables live = compact(raw, co, productive);
  raw = {};
  live = compact(live, reachable(live, 0), productive);
  // Minimise (exact equivalence, rule by rule).
  std::vector<int32_t> cls(static_cast<size_t>(live.size()));
  for (int32_t s = 0; s < live.size(); ++s) cls[static_cast<size_t>(s)] = live.rule_of[static_cast<size_t>(s)] * 2 + live.final[static_cast<size_t>(s)];
  const int32_t n_min = detail::minimize_exact(live, cls);
  PdaTables p;
  p.n_states = n_min;
  p.n_classes = live.n_classes;
  p.byte_class = live.byte_class;
  p.next.assign(static_cast<size_t>(n_min) * static_cast<size_t>(p.n_classes), -1);
  p.rule_of.assign(static_cast<size_t>(n_min), 0);
  std::vector<std::vector<PdaCall>> calls(static_cast<size_t>(n_min));
  std::vector<uint8_t> done(static_cast<size_t>(n_min), 0);
  std::vector<uint8_t> final(static_cast<size_t>(n_min), 0);
  for (int32_t s = 0; s < live.size(); ++s) {
    const int32_t m = cls[static_cast<size_t>(s)];
    if (done[static_cast<size_t>(m)]) continue;
    done[static_cast<size_t>(m)] = 1;
    p.rule_of[static_cast<size_t>(m)] = live.rule_of[static_cast<size_t>(s)];
    final[static_cast<size_t>(m)] = live.final[static_cast<size_t>(s)];
    for (int32_t c = 0; c < p.n_classes; ++c) {
      int32_t to = live.next[at(s, c, p.n_classes)];
      p.next[at(m, c, p.n_classes)] = to >= 0 ? cls[static_cast<size_t>(to)] : -1;
    }
    for (const auto& call : live.calls[static_cast<size_t>(s)]) calls[static_cast<size_t>(m)].push_back({call.rule, cls[static_cast<size_t>(call.ret)]});
  }
  p.call_begin.push_back(0);
  for (auto& cs : calls) {
    std::sort(cs.begin(), cs.end(), [](const PdaCall& a, const PdaCall& b) { return a.rule != b.rule ? a.rule < b.rule : a.ret < b.ret; });
    p.calls.insert(p.calls.end(), cs.begin(), cs.end());
    p.call_begin.push_back(static_cast<int32_t>(p.calls.size()));
  }
  p.rules.resize(plan.compiled.size());
  for (size_t r = 0; r < plan.compiled.size(); ++r) {
    p.rules[r].name = g.rule(plan.compiled[r]).name;
    int32_t st = live.rule_start[r];
    p.rules[r].start = st >= 0 ? cls[static_cast<size_t>(st)] : -1;
  }
  p.root = 0;
  p.n_inlined_rules = static_cast<int32_t>(g.rules().size() - plan.compiled.size());
  analyse(p, final);
  // Mask classes: equivalence on byte strings up to the longest token.
  RawTables view;
  view.n_classes = p.n_classes;
  view.next = p.next;
  view.final = final;
  view.rule_of = p.rule_of;
  view.calls.assign(static_cast<size_t>(n_min), {});
  for (int32_t s = 0; s < n_min; ++s) {
    view.calls[static_cast<size_t>(s)].assign(p.calls.begin() + p.call_begin[static_cast<size_t>(s)],
                                              p.calls.begin() + p.call_begin[static_cast<size_t>(s) + 1]);
  }
  p.mask_class.resize(static_cast<size_t>(n_min));
  for (int32_t s = 0; s < n_min; ++s) {
    p.mask_class[static_cast<size_t>(s)] = (p.rule_of[static_cast<size_t>(s)] * 2 + final[static_cast<size_t>(s)]) * 4 + (p.flags[static_cast<size_t>(s)] & 6) / 2;
  }
  const int32_t n_cls = detail::refine_partition(view, p.mask_class, opts.max_token_bytes + 1);
  p.class_rep.assign(static_cast<size_t>(n_cls), -1);
  for (int32_t s = 0; s < n_min; ++s) {
    auto& rep = p.class_rep[static_cast<size_t>(p.mask_class[static_cast<size_t>(s)])];
    if (rep < 0) rep = s;
  }
  return p;
}

}  // namespace deepinfer::grammar
