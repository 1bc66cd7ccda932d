// kernels::Buf<T>: an array in a backend's memory (host for the CPU backend, device for CUDA).
//
// Purpose: the model's activations, scratch and per-sequence caches live in the memory of
// the backend that computes on them; Buf owns such an array and frees it through the same
// backend. resize() keeps a capacity (grow only) and, unless asked, not the contents.
// Invariants: data() is null only while capacity() is 0; the backend outlives the buffer.
// Threading: as the backend (one thread).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/backend.h"

namespace deepinfer::kernels {

template <class T>
class Buf {
 public:
  Buf() = default;
  explicit Buf(Backend& be, int64_t n = 0) : be_(&be) { resize(n); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  Buf(Buf&& o) noexcept { swap(o); }
  Buf& operator=(Buf&& o) noexcept {
    Buf tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~Buf() {
    if (p_) be_->release(p_);
  }
  void swap(Buf& o) noexcept {
    std::swap(be_, o.be_);
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    std::swap(cap_, o.cap_);
  }

  void bind(Backend& be) {
    if (be_ != &be) *this = Buf(be);
  }
  Backend& backend() const { return *be_; }
  T* data() { return p_; }
  const T* data() const { return p_; }
  int64_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t bytes() const { return n_ * static_cast<int64_t>(sizeof(T)); }
  int64_t capacity() const { return cap_; }

  // Size n; the first min(old size, n) elements survive only with keep = true.
  void resize(int64_t n, bool keep = false) {
    if (n > cap_) {
      const int64_t cap = std::max<int64_t>(n, cap_ + cap_ / 2);
      T* q = static_cast<T*>(be_->alloc(cap * static_cast<int64_t>(sizeof(T))));
      if (keep && n_ > 0) be_->copy(q, p_, n_ * static_cast<int64_t>(sizeof(T)));
      if (p_) be_->release(p_);
      p_ = q;
      cap_ = cap;
    }
    n_ = n;
  }
  void clear() { n_ = 0; }
  // Host <-> backend transfers of the whole buffer.
  void upload(const T* src, int64_t n) {
    resize(n);
    if (n) be_->upload(p_, src, n * static_cast<int64_t>(sizeof(T)));
  }
  void upload(const std::vector<T>& v) { upload(v.data(), static_cast<int64_t>(v.size())); }
  std::vector<T> download() const {
    std::vector<T> v(static_cast<size_t>(n_));
    if (n_) be_->download(v.data(), p_, bytes());
    return v;
  }
  void zero() {
    if (n_) be_->zero(p_, bytes());
  }

 private:
  Backend* be_ = nullptr;
  T* p_ = nullptr;
  int64_t n_ = 0, cap_ = 0;
};

}  // namespace deepinfer::kernels
