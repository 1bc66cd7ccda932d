#include "tokenizer/detokenizer.h"

#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

std::string IncrementalDetokenizer::push(int32_t id) {
  if (id < 0 || id >= tok_.vocab_size() || (skip_special_ && tok_.is_special(id))) return {};
  pending_ += tok_.token_bytes(id);
  const size_t n = complete_utf8_prefix(pending_);
  std::string out = utf8_lossy(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  emitted_ += out.size();
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  emitted_ += out.size();
  return out;
}

}  // namespace deepinfer::tokenizer
