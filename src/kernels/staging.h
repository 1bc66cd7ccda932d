// Staging: host arrays sent to a backend's memory in one op (Backend::upload_batch).
//
// Purpose: a forward has many small host arrays (positions, RoPE tables, attention descriptors,
// cache-read descriptors) and copies within backend memory; each launch or transfer costs more
// than its bytes on a device, so they travel together.
// - Uploads: arrays for several Bufs. add() sizes the Buf and keeps a copy of the array until
//   send(), which sends every array in one op.
// - Staged: arrays for several ops in one byte buffer. add() places each at a 16-byte aligned
//   offset, alloc() makes the backend buffer (so at() gives backend addresses that other arrays
//   may hold), set() fills a reserved array, upload() sends the whole buffer once, in one op with
//   the copies given.
// - copy_batch: copies within backend memory as one op.
// Invariants: Staged arrays are added before alloc(), and set() stays within an array's room.
// Threading: as the backend (one thread).
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "core/error.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"

namespace deepinfer::kernels {

// Copies within backend memory as upload items (from_device).
std::vector<UploadItem> copy_items(const std::vector<CopyDesc>& copies);
// The copies as one op.
void copy_batch(Backend& be, const std::vector<CopyDesc>& copies);

struct Uploads {
  explicit Uploads(Backend& b) : be(b) {}
  template <class T>
  void add(Buf<T>& dst, const std::vector<T>& src) {
    const int64_t bytes = static_cast<int64_t>(src.size() * sizeof(T));
    dst.resize(static_cast<int64_t>(src.size()));
    held.emplace_back(reinterpret_cast<const uint8_t*>(src.data()), reinterpret_cast<const uint8_t*>(src.data()) + bytes);
    items.push_back({.dst = dst.data(), .src = held.back().data(), .bytes = bytes});
  }
  void send();
  Backend& be;
  std::vector<std::vector<uint8_t>> held;
  std::vector<UploadItem> items;
};

struct Staged {
  explicit Staged(Backend& be) : dev(be) {}
  std::vector<uint8_t> host;
  std::map<int64_t, int64_t> room;  // bytes of the array at each offset
  Buf<uint8_t> dev;
  template <class T>
  int64_t add(const T* p, int64_t n) {
    const int64_t off = (static_cast<int64_t>(host.size()) + 15) / 16 * 16;
    host.resize(static_cast<size_t>(off + n * static_cast<int64_t>(sizeof(T))), 0);
    if (p && n > 0) std::memcpy(host.data() + off, p, static_cast<size_t>(n) * sizeof(T));
    room[off] = n * static_cast<int64_t>(sizeof(T));
    return off;
  }
  template <class T>
  int64_t add(const std::vector<T>& v) {
    return add(v.data(), static_cast<int64_t>(v.size()));
  }
  template <class T>
  void set(int64_t off, const std::vector<T>& v) {
    const auto it = room.find(off);
    DI_CHECK(it != room.end() && static_cast<int64_t>(v.size() * sizeof(T)) <= it->second, "staged array past its room");
    if (!v.empty()) std::memcpy(host.data() + off, v.data(), v.size() * sizeof(T));
  }
  void alloc() { dev.resize(static_cast<int64_t>(host.size())); }
  template <class T>
  const T* at(int64_t off) const {
    return reinterpret_cast<const T*>(dev.data() + off);
  }
  void upload(const std::vector<CopyDesc>& then_copy = {});
};

}  // namespace deepinfer::kernels
