// Reductions over a row of logits that the sampler (src/sample) and the backends' sampling op
// (kernels::Backend::sample_rows on the CPU) share, so both give the same bits.
//
// Invariants: every sum runs in ascending index order in fp64; NaN logits count as -inf.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace deepinfer::core {

// Over weights w [n] fp64 (>= 0): the first index in ascending order whose running sum exceeds
// u * total; rounding that leaves the target at the total gives the last positive weight, an
// all-zero row 0.
int64_t inverse_cdf(const double* w, int64_t n, double u);

// Log-softmax of a raw row in fp64 (max, then the sum of exp in ascending index order); +inf
// values share the mass equally; an all -inf row gives all -inf. logits [n] fp32, out [n] fp64.
void log_softmax(std::span<const float> logits, std::span<double> out);

// The best n of lp [size] (value descending, ties: lower index first) as (index, value).
std::vector<std::pair<int32_t, double>> top_n(std::span<const double> lp, int64_t n);

// A candidate for ranking: its value (x or weight) and id. Contiguous, so selection and
// sorting do not chase indices.
struct Ranked {
  double v;
  int32_t id;
};
// Rank order: value descending, then id ascending. A total order over distinct ids, so any
// selection algorithm yields the same ranking.
inline bool ranks_before(const Ranked& a, const Ranked& b) { return a.v > b.v || (a.v == b.v && a.id < b.id); }

// Top-p over weights w [n] fp64 (>= 0, unnormalised): keeps the tokens in rank order while the
// mass ranked before each is below top_p times the total, zeroing the rest. cand: scratch of
// n entries. Ranks only as far as needed (selection on growing prefixes, then a sort of each).
void keep_top_p(double* w, int64_t n, double top_p, Ranked* cand);

}  // namespace deepinfer::core
