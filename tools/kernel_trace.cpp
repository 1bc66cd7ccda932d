// A kernel timeline of any CUDA program, graphs included: preloaded (LD_PRELOAD=
// libdi_kernel_trace.so), it records every kernel, memcpy and memset through CUPTI's activity
// API (the GPU's own start and end timestamps, so kernels replayed from graphs and overlapped by
// programmatic dependent launch show as they ran) and writes them, in start order, as CSV to
// $DI_TRACE_OUT (default kernel_trace.csv) when the program exits:
//   start_ns,end_ns,kind,grid,graph_id,name
// scripts/trace_summary.py turns that into a step's busy time, gaps and per-kernel times.
#include <cupti.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Record {
  uint64_t start, end;
  const char* kind;
  int64_t grid;
  uint32_t graph;
  std::string name;
};

std::mutex g_mu;
std::vector<Record>* g_records = nullptr;
constexpr size_t kBufferBytes = size_t{16} << 20;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "kernel_trace: %s: %s\n", what, msg ? msg : "unknown CUPTI error");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = kBufferBytes;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<Record> got;
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        got.push_back({k->start, k->end, "kernel", static_cast<int64_t>(k->gridX) * k->gridY * k->gridZ, k->graphId,
                       k->name ? k->name : "?"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        got.push_back({m->start, m->end, "memcpy", static_cast<int64_t>(m->bytes), m->graphId, "memcpy"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        got.push_back({m->start, m->end, "memset", static_cast<int64_t>(m->bytes), m->graphId, "memset"});
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_records) g_records->insert(g_records->end(), got.begin(), got.end());
}

__attribute__((constructor)) void start() {
  g_records = new std::vector<Record>();
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register callbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset");
}

__attribute__((destructor)) void finish() {
  check(cuptiActivityFlushAll(1), "flush");
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_records) return;
  std::sort(g_records->begin(), g_records->end(), [](const Record& a, const Record& b) { return a.start < b.start; });
  const char* path = std::getenv("DI_TRACE_OUT");
  FILE* f = std::fopen(path ? path : "kernel_trace.csv", "w");
  if (!f) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path ? path : "kernel_trace.csv");
    return;
  }
  std::fprintf(f, "start_ns,end_ns,kind,grid,graph_id,name\n");
  for (const Record& r : *g_records) {
    std::string name = r.name;
    std::replace(name.begin(), name.end(), ',', ';');
    std::fprintf(f, "%llu,%llu,%s,%lld,%u,%s\n", static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.kind, static_cast<long long>(r.grid), r.graph, name.c_str());
  }
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu records\n", g_records->size());
}

}  // namespace
