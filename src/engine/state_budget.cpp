// The engine's state budget (state_budget.h).
#include "engine/state_budget.h"

#include <sstream>
#include <vector>

#include "model/info.h"
#include "model/memory_plan.h"
#include "model/state.h"

namespace deepinfer::engine {

StateBudget plan_state_budget(runner::BatchRunner& runner, const StateBudgetOptions& o) {
  StateBudget b;
  model::DeepseekV41& m = runner.model();
  kernels::Backend& be = m.backend();
  if (o.bytes > 0) {
    b.bytes = o.bytes;
    b.how = "state budget " + model::human_bytes(static_cast<double>(o.bytes));
    return b;
  }
  const double fraction = model::effective_memory_fraction(be.host_memory(), 0, o.fraction);
  if (fraction <= 0) {
    b.how = "no state budget";
    return b;
  }
  std::ostringstream how;
  if (!be.host_memory() && o.warmup_tokens > 0) {
    // The largest step: one sequence's chunk of warmup_tokens rows through every layer. Its
    // state goes out of scope (back to the backend's pool) before the free memory is read.
    const int64_t n = std::min(o.warmup_tokens, m.config().max_position_embeddings);
    {
      model::SequenceState state(m.config(), be);
      const std::vector<int64_t> tokens(static_cast<size_t>(n), 0);
      std::vector<float> logits(static_cast<size_t>(m.config().vocab_size));
      runner.forward(tokens.data(), n, state, logits.data(), /*last_only=*/true);
    }
    be.synchronize();
    const int64_t free = be.memory_available();
    b.bytes = static_cast<int64_t>(fraction * static_cast<double>(free));
    how << "state budget " << model::human_bytes(static_cast<double>(b.bytes)) << " (" << fraction << " of "
        << model::human_bytes(static_cast<double>(free)) << " free after a warm-up forward of " << n << " tokens)";
  } else {
    const int64_t avail = be.memory_available();
    b.bytes = static_cast<int64_t>(fraction * static_cast<double>(avail));
    how << "state budget " << model::human_bytes(static_cast<double>(b.bytes)) << " (" << fraction << " of "
        << model::human_bytes(static_cast<double>(avail)) << (be.host_memory() ? " of physical memory)" : " free)");
  }
  b.how = how.str();
  return b;
}

}  // namespace deepinfer::engine
