// to_string(FinishReason): the names vLLM reports ("stop", "length"), plus ours.
#include "deepinfer/outputs.h"

namespace deepinfer {

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

}  // namespace deepinfer
