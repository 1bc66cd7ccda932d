// Cases of the hyper-connections and the Engram gate (kernels/cpu/mhc.cpp, kernels/cuda/mhc.cu).
// Each op's inputs are what the ops before it give on the CPU reference (the mixes' pre, post
// and comb, the collapse's y, the expansion's streams), as in a layer.
#include "kernels/cases/case_util.h"

namespace deepinfer::op_cases {

namespace {

// A site's inputs and the CPU reference's chain of results on them.
struct Site {
  int64_t R = 0, hc = 0, D = 0;
  std::vector<float> x, fn, base, scale{0.9f, 1.1f, 2.0f}, pre, post, comb, y, expanded;
};

Site site(int64_t R, int64_t hc, int64_t D, uint32_t seed_x, uint32_t seed_fn, uint32_t seed_base) {
  Site s;
  s.R = R;
  s.hc = hc;
  s.D = D;
  s.x = randn(sz(R * hc * D), seed_x);
  s.fn = randn(sz((2 + hc) * hc * hc * D), seed_fn, 0.02f);
  s.base = randn(sz((2 + hc) * hc), seed_base, 0.3f);
  s.pre.resize(sz(R * hc));
  s.post.resize(sz(R * hc));
  s.comb.resize(sz(R * hc * hc));
  s.y.resize(sz(R * D));
  auto cpu = make_cpu_backend(1);
  cpu->hc_mixes({.x = s.x.data(), .fn = s.fn.data(), .scale = s.scale.data(), .base = s.base.data(), .pre = s.pre.data(),
                 .post = s.post.data(), .comb = s.comb.data(), .rows = R, .hc = hc, .dim = D});
  cpu->hc_collapse({.x = s.x.data(), .pre = s.pre.data(), .y = s.y.data(), .rows = R, .hc = hc, .dim = D});
  s.expanded = s.x;
  cpu->hc_expand({.x = s.expanded.data(), .y = s.y.data(), .post = s.post.data(), .comb = s.comb.data(), .rows = R, .hc = hc, .dim = D});
  return s;
}

void add_site(std::vector<OpCase>& t, const std::string& tag, int64_t R, int64_t hc, int64_t D, uint32_t seed_x, uint32_t seed_fn,
              uint32_t seed_base, uint32_t seed_norm, bool collapse_plain) {
  const std::string shape = str(R) + " rows x " + str(hc) + " streams x " + str(D);
  const int64_t mix = (2 + hc) * hc;
  // The mixes (pre, post, comb); within 1e-5.
  t.push_back({.family = "mhc",
               .name = "hc_mixes_" + tag,
               .shape = shape,
               .build =
                   [=](Run& r) {
                     const auto s = site(R, hc, D, seed_x, seed_fn, seed_base);
                     const float *x = r.in(s.x), *fn = r.in(s.fn), *scale = r.in(s.scale), *base = r.in(s.base);
                     float* pre = r.out<float>("pre", sz(R * hc), Rule::kRelErr, 1e-5);
                     float* post = r.out<float>("post", sz(R * hc), Rule::kRelErr, 1e-5);
                     float* comb = r.out<float>("comb", sz(R * hc * hc), Rule::kRelErr, 1e-5);
                     r.op = [=, &be = r.be] {
                       be.hc_mixes({.x = x, .fn = fn, .scale = scale, .base = base, .pre = pre, .post = post, .comb = comb, .rows = R,
                                    .hc = hc, .dim = D});
                     };
                   },
               .bytes = static_cast<double>((R * hc * D + mix * hc * D) * 4),
               .flops = 2.0 * static_cast<double>(R * mix * hc * D)});
  // The collapse (y within 1e-5) and, collapse_plain, the collapse with its norm: on each
  // backend, the bits of the collapse alone and of rms_norm on it. Without collapse_plain:
  // only the collapse with its norm, y and its norm within 1e-5.
  t.push_back({.family = "mhc",
               .name = (collapse_plain ? "hc_collapse_" : "hc_collapse_norm_") + tag,
               .shape = shape,
               .build =
                   [=](Run& r) {
                     const auto s = site(R, hc, D, seed_x, seed_fn, seed_base);
                     const float *x = r.in(s.x), *pre = r.in(s.pre), *nw = r.in(randn(sz(D), seed_norm, 0.5f));
                     if (!collapse_plain) {
                       float* y = r.out<float>("y", sz(R * D), Rule::kRelErr, 1e-5);
                       float* yn = r.out<float>("norm of y", sz(R * D), Rule::kRelErr, 1e-5);
                       r.op = [=, &be = r.be] {
                         be.hc_collapse({.x = x, .pre = pre, .y = y, .rows = R, .hc = hc, .dim = D, .norm_w = nw, .norm_y = yn,
                                         .norm_eps = 1e-6f});
                       };
                       return;
                     }
                     float* y = r.out<float>("y", sz(R * D), Rule::kRelErr, 1e-5);
                     float* y2 = r.out<float>("y of the collapse with the norm", sz(R * D), Rule::kRelErr, 1e-5);
                     float* n2 = r.out<float>("the collapse's norm", sz(R * D), Rule::kRelErr, 1e-5);
                     float* n1 = r.out<float>("rms_norm of y", sz(R * D), Rule::kRelErr, 1e-5);
                     r.op = [=, &be = r.be] { be.hc_collapse({.x = x, .pre = pre, .y = y, .rows = R, .hc = hc, .dim = D}); };
                     r.after = [=, &be = r.be] {
                       be.hc_collapse({.x = x, .pre = pre, .y = y2, .rows = R, .hc = hc, .dim = D, .norm_w = nw, .norm_y = n2,
                                       .norm_eps = 1e-6f});
                       be.rms_norm({.x = y, .w = nw, .y = n1, .rows = R, .dim = D, .eps = 1e-6f});
                     };
                     const size_t n = sz(R * D);
                     r.checks.push_back([n](const Host& h) {
                       const auto hy = as<float>(h[0]), hy2 = as<float>(h[1]), hn2 = as<float>(h[2]), hn1 = as<float>(h[3]);
                       if (auto e = bits_differ(hy2.data(), hy.data(), n); !e.empty()) return "the collapse with the norm: " + e;
                       if (auto e = bits_differ(hn2.data(), hn1.data(), n); !e.empty()) return "the norm of the collapse: " + e;
                       return std::string();
                     });
                   },
               .bytes = static_cast<double>((R * hc * D + R * D) * 4)});
  // The expansion of the collapse's y with post and comb, in place on the streams; within 1e-5.
  t.push_back({.family = "mhc",
               .name = "hc_expand_" + tag,
               .shape = shape,
               .build =
                   [=](Run& r) {
                     const auto s = site(R, hc, D, seed_x, seed_fn, seed_base);
                     float* x = r.in(s.x);
                     const float *y = r.in(s.y), *post = r.in(s.post), *comb = r.in(s.comb);
                     r.output("x", x, s.x.size(), Rule::kRelErr, 1e-5);
                     r.op = [=, &be = r.be] {
                       be.hc_expand({.x = x, .y = y, .post = post, .comb = comb, .rows = R, .hc = hc, .dim = D});
                     };
                   },
               .bytes = static_cast<double>((2 * R * hc * D + R * D) * 4)});
}

}  // namespace

void add_mhc(std::vector<OpCase>& t) {
  // (was Parity.HyperConnectionsAndEngramGate) 4 streams: the mixes, the collapse (and with its
  // norm, bitwise the two ops), the expansion, then the Engram gate on the expanded streams.
  for (const Dims& d : kBothDims) {
    add_site(t, d.name, d.rows, 4, d.D, 14, 15, 16, 19, true);
    const int64_t R = d.rows, hc = 4, D = d.D;
    t.push_back({.family = "mhc",
                 .name = std::string("engram_gate_") + d.name,
                 .shape = str(R) + " rows x 4 streams x " + str(D),
                 .build =
                     [=](Run& r) {
                       const auto s = site(R, hc, D, 14, 15, 16);
                       float* x = r.in(s.expanded);
                       const float* kv = r.in(randn(sz(R * (hc + 1) * D), 17));
                       const float* w = r.in(randn(sz(hc * D), 18));
                       r.output("x", x, s.expanded.size(), Rule::kRelErr, 1e-5);
                       r.op = [=, &be = r.be] { be.engram_gate({.x = x, .kv = kv, .w = w, .rows = R, .hc = hc, .dim = D}); };
                     },
                 .bytes = static_cast<double>((2 * R * hc * D + R * (hc + 1) * D + hc * D) * 4)});
  }
  // (was CudaHyperConnections.OtherStreamCounts) 2 and 3 streams (the kernels' runtime-count
  // variants), 5 rows x 256: the mixes, the collapse with its norm, the expansion.
  for (const int64_t hc : {int64_t{2}, int64_t{3}})
    add_site(t, "hc" + str(hc), 5, hc, 256, 30 + static_cast<uint32_t>(hc), 31, 32, 33, false);
  // One stream with unit weights: x + y exactly (the DSpark heads' adds: the Markov bias into
  // the logits, the confidence head's halves), checked against the float sum on every backend.
  for (const int64_t dim : {int64_t{1}, int64_t{1031}}) {
    const int64_t R = 6;
    t.push_back({.family = "mhc",
                 .name = "hc_expand_one_stream_add_" + str(dim),
                 .shape = str(R) + " rows x " + str(dim),
                 .build =
                     [=](Run& r) {
                       const auto x0 = randn(sz(R * dim), 40), y0 = randn(sz(R * dim), 41);
                       float* x = r.in(x0);
                       const float* y = r.in(y0);
                       const float* ones = r.in(std::vector<float>(sz(R), 1.0f));
                       r.output("x", x, x0.size(), Rule::kBits);
                       r.checks.push_back([=](const Host& h) {
                         std::vector<float> sum(x0.size());
                         for (size_t i = 0; i < sum.size(); ++i) sum[i] = x0[i] + y0[i];
                         const auto got = as<float>(h[0]);
                         const std::string d = bits_differ(sum.data(), got.data(), sum.size());
                         return d.empty() ? d : "not x + y: " + d;
                       });
                       r.op = [=, &be = r.be] {
                         be.hc_expand({.x = x, .y = y, .post = ones, .comb = ones, .rows = R, .hc = 1, .dim = dim});
                       };
                     }});
  }
}

}  // namespace deepinfer::op_cases
