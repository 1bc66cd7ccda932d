#include "runner/batch_runner.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/staging.h"
#include "sample/device_draw.h"

namespace deepinfer::runner {

struct BatchRunner::Bucket {
  explicit Bucket(kernels::Backend& b) : be(b), batch(b), pool(b.new_graph_pool()) {}
  ~Bucket() {
    if (pool >= 0) be.free_graph_pool(pool);
  }
  Bucket(const Bucket&) = delete;
  Bucket& operator=(const Bucket&) = delete;
  kernels::Backend& be;
  model::ForwardBatch batch;
  int64_t pool;
  std::vector<int64_t> graph;
};

BatchRunner::BatchRunner(model::DeepseekV41& model) : model_(model) {}
BatchRunner::~BatchRunner() = default;

void BatchRunner::set_graphs(bool on) {
  graphs_ = on;
  if (!on) buckets_.clear();
}

// Rows a graph bucket holds: powers of two up to 8, then multiples of 16.
int64_t BatchRunner::graph_bucket(int64_t n) {
  if (n <= 8) {
    int64_t b = 1;
    while (b < n) b *= 2;
    return b;
  }
  return (n + 15) / 16 * 16;
}

void BatchRunner::validate(std::span<const Chunk> batch) const {
  const auto& c = model_.config();
  const int64_t late = model_.late_layer_start();
  for (const Chunk& ch : batch) {
    for (int64_t i = 0; i < ch.n; ++i)
      if (ch.tokens[i] < 0 || ch.tokens[i] >= c.vocab_size)
        throw Error("token id " + std::to_string(ch.tokens[i]) + " at index " + std::to_string(i) +
                    " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
    DI_CHECK(ch.replay_from >= 0 && ch.replay_from <= ch.n, "replay_from outside the chunk");
    DI_CHECK(!(ch.all_logits && ch.replay_from > 0), "all-row logits need every layer on every row");
    DI_CHECK(ch.replay_from == 0 || late < c.num_hidden_layers, "bounded replay needs a layer after the last KV source");
    DI_CHECK(!(ch.token && ch.all_logits && !ch.draws), "drawn tokens of every row need a draw per row");
    DI_CHECK(!ch.draws || (ch.all_logits && ch.token), "a draw per row is for every row's token");
  }
}

void BatchRunner::forward(const int64_t* tokens, int64_t n, model::SequenceState& state, float* logits, bool last_only) {
  Chunk chunk{.tokens = tokens, .n = n, .state = &state, .replay_from = 0, .all_logits = !last_only, .logits = logits};
  forward(std::span<Chunk>(&chunk, 1));
}

void BatchRunner::forward(std::span<Chunk> batch) {
  validate(batch);
  int64_t total = 0;
  bool any_replay = false;
  for (const Chunk& ch : batch) {
    total += ch.n;
    any_replay = any_replay || ch.replay_from > 0;
  }
  if (total == 0) return;
  kernels::Backend& be = model_.backend();
  // Small batches without replay (decode steps) run on the batch kept for their row bucket, the
  // rest on a batch of their own.
  std::unique_ptr<model::ForwardBatch> own;
  model::ForwardBatch* b = nullptr;
  Bucket* bucket = nullptr;
  if (graphs() && !any_replay && total <= kGraphRows) {
    const int64_t rows = graph_bucket(total);
    std::unique_ptr<Bucket>& kept = buckets_[rows];
    if (!kept) kept = std::make_unique<Bucket>(be);
    bucket = kept.get();
    b = &bucket->batch;
    b->clear();
    b->n_pad = rows;
  } else {
    own = std::make_unique<model::ForwardBatch>(be);
    b = own.get();
    b->n_pad = total;
  }
  std::vector<int64_t> tok;
  tok.reserve(static_cast<size_t>(total));
  for (const Chunk& ch : batch) {
    b->add_sequence(ch.tokens, ch.n, ch.state, ch.replay_from);
    tok.insert(tok.end(), ch.tokens, ch.tokens + ch.n);
  }
  // The step's host inputs in one op with the model's: positions and their RoPE tables, tokens.
  kernels::Uploads up(be);
  b->set_positions(model_.rope_main(), model_.rope_compress(), up);
  up.add(b->d_tok, tok);
  model_.embed(*b, up);
  std::vector<model::Stage> program = model_.layer_program(*b);
  run_program(program, bucket);
  for (const Chunk& ch : batch) ch.state->advance(ch.n);
  head(batch, *b);
}

void BatchRunner::run_program(std::vector<model::Stage>& program, Bucket* bucket) {
  if (!bucket) {
    for (model::Stage& st : program) {
      if (st.prepare) st.prepare();
      st.run();
    }
    return;
  }
  // Each run of consecutive graphable stages is one graph of the bucket (one graph launch per
  // run: consecutive graphs do not overlap, kernels inside one do).
  kernels::Backend& be = model_.backend();
  size_t group = 0;
  for (size_t i = 0; i < program.size();) {
    if (!program[i].graphable) {
      if (program[i].prepare) program[i].prepare();
      program[i++].run();
      continue;
    }
    size_t j = i;
    while (j < program.size() && program[j].graphable) ++j;
    for (size_t k = i; k < j; ++k)
      if (program[k].prepare) program[k].prepare();
    if (bucket->graph.size() <= group) bucket->graph.resize(group + 1, -1);
    int64_t& g = bucket->graph[group++];
    if (g == -2) {
      be.begin_capture(bucket->pool);
      for (size_t k = i; k < j; ++k) program[k].run();
      g = be.end_capture();
    }
    if (g >= 0) {
      be.replay(g);
    } else {  // first time: eagerly, which sizes every buffer and uploads every table
      for (size_t k = i; k < j; ++k) program[k].run();
      g = -2;
    }
    i = j;
  }
}

void BatchRunner::head(std::span<Chunk> batch, model::ForwardBatch& b) {
  // Every row, or each sequence's last row (its last active row under replay).
  kernels::Backend& be = model_.backend();
  const int64_t V = model_.config().vocab_size;
  std::vector<int32_t> out_rows;
  std::vector<float*> out_ptrs;  // where each row's logits go (null: not wanted)
  struct DrawnBy {
    const Chunk* ch = nullptr;  // the chunk whose token the row draws (null: none)
    int64_t row = 0;            // its row in that chunk's token arrays
  };
  std::vector<DrawnBy> drawn_by;
  for (size_t q = 0; q < batch.size(); ++q) {
    const Chunk& ch = batch[q];
    if ((!ch.logits && !ch.token) || b.rows[q] == 0) continue;
    if (ch.all_logits) {
      for (int64_t i = 0; i < b.rows[q]; ++i) {
        out_rows.push_back(static_cast<int32_t>(b.row0[q] + i));
        out_ptrs.push_back(ch.logits ? ch.logits + i * V : nullptr);
        drawn_by.push_back({ch.token ? &ch : nullptr, i});
      }
    } else {
      out_rows.push_back(static_cast<int32_t>(b.row0[q] + b.rows[q] - 1));
      out_ptrs.push_back(ch.logits);
      drawn_by.push_back({ch.token ? &ch : nullptr, 0});
    }
  }
  const int64_t m = static_cast<int64_t>(out_rows.size());
  if (m == 0) {
    be.synchronize();
    return;
  }
  const kernels::Buf<float> lg = model_.logits(b, out_rows);
  if (std::any_of(drawn_by.begin(), drawn_by.end(), [](const DrawnBy& d) { return d.ch != nullptr; })) {
    std::vector<kernels::DrawParams> params(static_cast<size_t>(m));  // greedy for the rows not drawn
    for (int64_t i = 0; i < m; ++i) {
      const auto& [ch, row] = drawn_by[static_cast<size_t>(i)];
      if (ch) params[static_cast<size_t>(i)] = ch->draws ? ch->draws[row] : ch->draw;
    }
    const sample::DeviceDraws d = sample::draw_on_backend(be, lg.data(), m, V, params);
    for (int64_t i = 0; i < m; ++i) {
      const auto& [ch, row] = drawn_by[static_cast<size_t>(i)];
      if (!ch) continue;
      ch->token[row] = d.ids[static_cast<size_t>(i)];
      const int64_t n_lp = params[static_cast<size_t>(i)].logprobs;
      if (n_lp < 0 || d.logprob.empty()) continue;
      if (ch->logprob) ch->logprob[row] = d.logprob[static_cast<size_t>(i)];
      for (int64_t j = 0; j < n_lp; ++j) {
        const auto at = static_cast<size_t>(i * d.max_logprobs + j);
        if (ch->top_ids) ch->top_ids[row * n_lp + j] = d.top_ids[at];
        if (ch->top_logprobs) ch->top_logprobs[row * n_lp + j] = d.top_logprobs[at];
      }
    }
  }
  // Consecutive output rows usually land in one caller buffer: download runs of them at once.
  for (int64_t i = 0; i < m;) {
    int64_t j = i + 1;
    if (!out_ptrs[static_cast<size_t>(i)]) {
      i = j;
      continue;
    }
    while (j < m && out_ptrs[static_cast<size_t>(j)] == out_ptrs[static_cast<size_t>(j - 1)] + V) ++j;
    be.download(out_ptrs[static_cast<size_t>(i)], lg.data() + i * V, (j - i) * V * static_cast<int64_t>(sizeof(float)));
    i = j;
  }
}

}  // namespace deepinfer::runner
