#include "model/forward_batch.h"

#include <algorithm>

namespace deepinfer::model {

void ForwardBatch::clear() {
  tokens.clear();
  states.clear();
  replay_from.clear();
  row0.clear();
  rows.clear();
  pos.clear();
  published.clear();
  hash_ids.clear();
  hash_w = 0;
  n = 0;
  any_replay = false;
}

void ForwardBatch::add_sequence(const int64_t* toks, int64_t count, SequenceState* state, int64_t replay) {
  tokens.push_back(toks);
  states.push_back(state);
  replay_from.push_back(replay);
  row0.push_back(n);
  rows.push_back(count);
  published.emplace_back();
  for (int64_t i = 0; i < count; ++i) pos.push_back(state->length() + i);
  n += count;
  any_replay = any_replay || replay > 0;
}

void ForwardBatch::set_positions(const RopeTable& main, const RopeTable& compress, kernels::Uploads& up) {
  up.add(d_pos, pos);
  std::vector<int64_t> padded(pos);
  padded.resize(static_cast<size_t>(std::max(n, n_pad)), 0);
  const int64_t count = static_cast<int64_t>(padded.size());
  std::vector<float> c, sn;
  main.compute(padded.data(), count, &c, &sn);
  up.add(cos_main, c);
  up.add(sin_main, sn);
  compress.compute(padded.data(), count, &c, &sn);
  up.add(cos_comp, c);
  up.add(sin_comp, sn);
}

}  // namespace deepinfer::model
