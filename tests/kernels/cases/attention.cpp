// Cases of the attention (kernels/cpu/attention.cpp, kernels/cuda/attention*.cu): the fixture
// and released dims, prefill shapes on the float32 backend, and the lab's shapes.
#include <cmath>

#include "kernels/cases/case_util.h"

namespace deepinfer::op_cases {

namespace {

// (was test_cuda_prefill.cpp's check_attention, float32) One attention call: queries at positions
// p0 .. p0+S-1 (query 0 moved before every entry when `blind_first`: it sees nothing, its
// output is zero); window entries: `cached` before the chunk plus the chunk's own, in shuffled
// (ring) order, plus `stale` old ones nobody sees; `n_sel` random compressed entries of t_comp
// selected per query (none for the last query). Within 1e-5.
void add_prefill(std::vector<OpCase>& t, const std::string& name, int64_t S, int64_t H, int64_t hd, int64_t window, int64_t cached,
                 int64_t stale, int64_t t_comp, int64_t n_sel, bool blind_first, uint32_t seed, int64_t max_selected = 0) {
  t.push_back({.family = "attention",
               .name = name,
               .shape = "S " + str(S) + ", " + str(H) + " x " + str(hd) + ", window " + str(window) + " (" + str(cached) + " cached, " +
                        str(stale) + " stale), " + str(n_sel) + " of " + str(t_comp) + " selected" +
                        (max_selected ? ", max_selected " + str(max_selected) : ""),
               .build =
                   [=](Run& r) {
                     std::mt19937 g(seed);
                     const int64_t p0 = 5000, tw = cached + S + stale;
                     std::vector<int64_t> qpos(sz(S)), wpos(sz(tw));
                     for (int64_t i = 0; i < S; ++i) qpos[sz(i)] = p0 + i;
                     if (blind_first) qpos[0] = p0 - cached - window - stale - 1000;
                     for (int64_t i = 0; i < cached + S; ++i) wpos[sz(i)] = p0 - cached + i;
                     for (int64_t i = 0; i < stale; ++i) wpos[sz(cached + S + i)] = p0 - cached - window - 1 - i;
                     std::shuffle(wpos.begin(), wpos.end(), g);
                     auto q = randn(sz(S * H * hd), seed + 1, 1.5f), win = randn(sz(tw * hd), seed + 2),
                          comp = randn(sz(std::max<int64_t>(t_comp, 1) * hd), seed + 3), sink = randn(sz(H), seed + 4);
                     std::vector<uint8_t> sel(sz(S * std::max<int64_t>(t_comp, 1)), 0);
                     std::vector<int64_t> perm(sz(t_comp));
                     std::iota(perm.begin(), perm.end(), 0);
                     for (int64_t s = 0; s < S; ++s) {
                       if ((blind_first && s == 0) || (S > 1 && s == S - 1)) continue;
                       std::shuffle(perm.begin(), perm.end(), g);
                       for (int64_t j = 0; j < std::min(n_sel, t_comp); ++j) sel[sz(s * t_comp + perm[sz(j)])] = 1;
                     }
                     const bool with_comp = t_comp > 0;
                     const float sc = 1.0f / std::sqrt(static_cast<float>(hd));
                     const float *dq = r.in(q), *dwin = r.in(win), *dcomp = with_comp ? r.in(comp) : nullptr, *dsink = r.in(sink);
                     const int64_t *dqpos = r.in(qpos), *dwpos = r.in(wpos);
                     const uint8_t* dsel = with_comp ? r.in(sel) : nullptr;
                     float* out = r.out<float>("out", q.size(), Rule::kRelErr, 1e-5, NAN);
                     r.op = [=, &be = r.be] {
                       be.attention({.q = dq, .q_pos = dqpos, .win = dwin, .win_pos = dwpos, .comp = dcomp, .comp_sel = dsel, .sink = dsink,
                                     .out = out, .s = S, .heads = H, .head_dim = hd, .t_win = tw, .t_comp = t_comp, .window = window,
                                     .scale = sc, .max_selected = max_selected});
                     };
                     if (blind_first)  // the query that sees nothing: only the sink, a zero output
                       r.checks.push_back([n = sz(H * hd)](const Host& h) {
                         const auto o = as<float>(h[0]);
                         for (size_t i = 0; i < n; ++i)
                           if (o[i] != 0.0f) return "query 0 sees nothing but its output " + std::to_string(i) + " is " + std::to_string(o[i]);
                         return std::string();
                       });
                   },
               .flops = 4.0 * static_cast<double>(S * H * (std::min(window, cached + S) + std::min(n_sel, t_comp)) * hd)});
}

}  // namespace

void add_attention(std::vector<OpCase>& t) {
  // (was Parity.AttentionIndexerTopkRouter) S = rows queries at the window's end, 20 window
  // entries (window 16), 24 compressed entries of which a fixed third are selected; within 1e-5.
  for (const Dims& d : kBothDims) {
    const int64_t S = d.rows, tw = 20, tc = 24, W = 16, H = d.H, hd = d.hd;
    t.push_back({.family = "attention",
                 .name = std::string("attention_") + d.name,
                 .shape = "S " + str(S) + ", " + str(H) + " x " + str(hd) + ", 20 window + 24 compressed",
                 .build =
                     [=](Run& r) {
                       std::vector<int64_t> qpos(sz(S)), wpos(sz(tw));
                       for (int64_t i = 0; i < S; ++i) qpos[sz(i)] = tw - S + i;
                       for (int64_t i = 0; i < tw; ++i) wpos[sz(i)] = i;
                       std::vector<uint8_t> sel(sz(S * tc));
                       for (size_t i = 0; i < sel.size(); ++i) sel[i] = (i * 7) % 3 == 0;
                       const float *q = r.in(randn(sz(S * H * hd), 19, 0.2f)), *win = r.in(randn(sz(tw * hd), 20, 0.2f)),
                                   *comp = r.in(randn(sz(tc * hd), 21, 0.2f)), *sink = r.in(randn(sz(H), 22));
                       const int64_t *dq = r.in(qpos), *dw = r.in(wpos);
                       const uint8_t* ds = r.in(sel);
                       float* out = r.out<float>("out", sz(S * H * hd), Rule::kRelErr, 1e-5);
                       const float sc = 1.0f / std::sqrt(static_cast<float>(hd));
                       r.op = [=, &be = r.be] {
                         be.attention({.q = q, .q_pos = dq, .win = win, .win_pos = dw, .comp = comp, .comp_sel = ds, .sink = sink,
                                       .out = out, .s = S, .heads = H, .head_dim = hd, .t_win = tw, .t_comp = tc, .window = W, .scale = sc});
                       };
                     }});
  }
  // (was CudaPrefill.AttentionReleasedShapes) 64 heads x 512, window 128, 512 of 2048 compressed
  // entries selected per query; and longer windows, fewer heads.
  add_prefill(t, "prefill_S96_64x512", 96, 64, 512, 128, 127, 50, 2048, 512, false, 100);
  add_prefill(t, "prefill_S300_64x512", 300, 64, 512, 128, 127, 50, 2048, 512, false, 108);
  add_prefill(t, "prefill_S8_64x512_blind_first", 8, 64, 512, 128, 127, 50, 2048, 512, true, 101);
  add_prefill(t, "prefill_S1_64x512", 1, 64, 512, 128, 127, 0, 2048, 512, false, 102);
  add_prefill(t, "prefill_S200_64x512_window_only", 200, 64, 512, 128, 127, 9, 0, 0, false, 103);
  add_prefill(t, "prefill_S8_64x512_short_cache_all_selected", 8, 64, 512, 128, 40, 3, 700, 700, true, 104);
  add_prefill(t, "prefill_S3_64x512_window_4096", 3, 64, 512, 4096, 4000, 0, 300, 120, false, 105);
  add_prefill(t, "prefill_S280_8x512_window_4096", 280, 8, 512, 4096, 4000, 0, 300, 120, false, 106);
  add_prefill(t, "prefill_S300_4x32_window_4096", 300, 4, 32, 4096, 4000, 0, 300, 120, false, 107);
  // The selection bound sizes the launch (5 segments instead of 17 here); a bound below the
  // truth (8 of 512) makes the last segment take every entry left, never drops any.
  add_prefill(t, "prefill_S96_64x512_max_selected_512", 96, 64, 512, 128, 127, 50, 2048, 512, false, 100, 512);
  add_prefill(t, "prefill_S96_64x512_max_selected_8_wrong", 96, 64, 512, 128, 127, 50, 2048, 512, false, 100, 8);
  // (was CudaPrefill.AttentionOtherShapes) other head counts and sizes, 3 queries (the first blind)
  // and 140.
  for (auto [H, hd] : {std::pair<int64_t, int64_t>{4, 32}, {40, 128}, {8, 64}, {33, 256}, {3, 96}})
    for (const int64_t S : {int64_t{3}, int64_t{140}})
      add_prefill(t, "other_S" + str(S) + "_" + str(H) + "x" + str(hd), S, H, hd, 16, 20, 5, 200, 30, S == 3,
                  200 + static_cast<uint32_t>(hd + S));

  // The lab: 64 heads x 512, a 128-entry window + 512 of 2048 compressed entries selected per
  // query (prefill: the window holds the chunk's entries after 128 cached ones), with the
  // model's bound on the selected entries; the float32 tiled kernel and the bf16 backend's
  // tensor-core kernel. Bytes: the entries each query reads and q and out.
  for (const Precision p : {Precision::kFloat32, Precision::kBF16})
    for (const int64_t S : {int64_t{1}, int64_t{8}, int64_t{256}, int64_t{4096}}) {
      const int64_t H = 64, hd = 512, tw = 128 + S, tc = 2048;
      t.push_back({.family = "attention",
                   .name = std::string("lab_S") + str(S) + (p == Precision::kBF16 ? "_bf16" : "_f32"),
                   .shape = "S " + str(S) + ", 64 x 512, 128 window + 512 of 2048 selected",
                   .build =
                       [=](Run& r) {
                         const float *q = r.random_f32(S * H * hd, 1, 0.05f), *win = r.random_f32(tw * hd, 2, 0.05f),
                                     *comp = r.random_f32(tc * hd, 3, 0.05f), *sink = r.random_f32(H, 4);
                         std::vector<int64_t> hp(sz(tw)), hq(sz(S));
                         for (int64_t i = 0; i < tw; ++i) hp[sz(i)] = i;
                         for (int64_t i = 0; i < S; ++i) hq[sz(i)] = tw - S + i;
                         std::vector<uint8_t> hs(sz(S * tc), 0);
                         for (int64_t s = 0; s < S; ++s)
                           for (int64_t j = 0; j < 512; ++j) hs[sz(s * tc + j * 4)] = 1;
                         const int64_t *wp = r.in(hp), *qp = r.in(hq);
                         const uint8_t* sel = r.in(hs);
                         float* out = r.out<float>("out", sz(S * H * hd), Rule::kRelErr, 1e-5);
                         r.op = [=, &be = r.be] {
                           be.attention({.q = q, .q_pos = qp, .win = win, .win_pos = wp, .comp = comp, .comp_sel = sel, .sink = sink,
                                         .out = out, .s = S, .heads = H, .head_dim = hd, .t_win = tw, .t_comp = tc, .window = 128,
                                         .scale = 0.044f, .max_selected = 512});
                         };
                       },
                   .use = kLab,
                   .lab_precision = p,
                   .bytes = static_cast<double>(S * (128 + 512) * hd * 4 + 2 * S * H * hd * 4),
                   .flops = 4.0 * static_cast<double>(S * H * (128 + 512) * hd)});
    }
}

}  // namespace deepinfer::op_cases
