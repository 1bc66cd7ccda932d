// Shared-latent attention: window ∪ selected compressed entries, one softmax, sink in the
// denominator only. K = V = the 512-wide latent.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"

namespace deepinfer::kernels::cpu {

void attention(core::ThreadPool& pool, const AttentionArgs& a) {
  const int64_t d = a.head_dim;
  if (a.seqs && a.win_block > 0) {  // packed windows: dequantised, then the float-window call
    DI_CHECK(d % a.win_block == 0, "attention: packed windows need head_dim a multiple of win_block");
    std::vector<AttentionSeq> seqs(a.seqs, a.seqs + a.n_seqs);
    std::vector<std::vector<float>> wins(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      wins[i].resize(static_cast<size_t>(seqs[i].t_win * d));
      dequant_fake_quant(FakeQuant::kFp8Pow2, seqs[i].win_codes, seqs[i].win_scales, seqs[i].t_win, d, a.win_block,
                         wins[i].data());
      seqs[i].win = wins[i].data();
      seqs[i].win_codes = seqs[i].win_scales = nullptr;
    }
    AttentionArgs b = a;
    b.seqs = seqs.data();
    b.win_block = 0;
    return attention(pool, b);
  }
  pool.parallel_for(a.s * a.heads, [&](int64_t i0, int64_t i1) {
    std::vector<float> logit;
    std::vector<const float*> val;
    std::vector<float> q_rot(a.q_cos ? static_cast<size_t>(d) : 0);
    const int64_t half = a.rope_dim / 2;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / a.heads, h = i % a.heads;
      const float* q = a.q + i * d;
      if (a.q_cos) {  // the query rotated (rope()'s arithmetic), the output rotated back below
        std::copy(q, q + d, q_rot.begin());
        rope_pairs(q_rot.data() + d - a.rope_dim, a.q_cos + t * half, a.q_sin + t * half, a.rope_dim, false);
        q = q_rot.data();
      }
      const int64_t p = a.q_pos[t];
      // The query's entries: the call's, or its sequence's in a multi-sequence call.
      AttentionSeq e{a.win, a.win_pos, a.comp, a.comp_sel ? a.comp_sel + t * a.t_comp : nullptr, a.t_win, a.t_comp, 0, nullptr, nullptr};
      if (a.seqs) {
        e = a.seqs[a.q_seq[t]];
        if (e.comp_sel) e.comp_sel += (t - e.q0) * e.t_comp;
      }
      logit.clear();
      val.clear();
      for (int64_t j = 0; j < e.t_win; ++j) {
        const int64_t kp = e.win_pos[j];
        if (kp > p || kp <= p - a.window) continue;
        const float* k = e.win + j * d;
        logit.push_back(dot(q, k, d) * a.scale);
        val.push_back(k);
      }
      if (e.comp && e.comp_sel) {
        const uint8_t* sel = e.comp_sel;
        for (int64_t j = 0; j < e.t_comp; ++j) {
          if (!sel[j]) continue;
          const float* k = e.comp + j * d;
          logit.push_back(dot(q, k, d) * a.scale);
          val.push_back(k);
        }
      }
      const float sink = a.sink[h];
      float mx = sink;
      for (float l : logit) mx = std::max(mx, l);
      float den = std::exp(sink - mx);
      for (float& l : logit) {
        l = std::exp(l - mx);
        den += l;
      }
      float* o = a.out + i * d;
      std::fill(o, o + d, 0.0f);
      for (size_t j = 0; j < logit.size(); ++j) {
        const float w = logit[j] / den;
        const float* v = val[j];
        for (int64_t c = 0; c < d; ++c) o[c] += w * v[c];
      }
      if (a.q_cos) rope_pairs(o + d - a.rope_dim, a.q_cos + t * half, a.q_sin + t * half, a.rope_dim, true);
    }
  }, 1);
}

}  // namespace deepinfer::kernels::cpu
