// A small fixed thread pool for data-parallel loops over independent rows.
//
// Purpose: parallel_for(n, fn) splits [0, n) into contiguous chunks, one per worker; the
// caller participates. Results never depend on the number of threads, because every index
// is computed by exactly one call with its own fixed reduction order.
// Threading: one pool object per backend (no global); parallel_for is not reentrant and
// must be called from one thread at a time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deepinfer::core {

class ThreadPool {
 public:
  // n_threads <= 0: DEEPINFER_THREADS from the environment, else the hardware's count.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(begin, end) on disjoint chunks covering [0, n); min_chunk bounds the split.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk = 1);

 private:
  void worker_loop(int id);
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_parts_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace deepinfer::core
