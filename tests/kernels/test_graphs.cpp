// The Backend graph contract, on the emulation every build has (`cpu-graphs`): a capture
// records without running, a replay reruns the recorded ops on the same memory, temporaries
// allocated while capturing stay the graph's, and what a capture must not do aborts with a
// message naming it (the CUDA backend enforces the same rules on the device).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/backend.h"
#include "kernels/buffer.h"

using namespace deepinfer;

TEST(Graphs, CaptureRecordsAndReplayReruns) {
  auto be = kernels::make_backend("cpu-graphs", 1);
  ASSERT_TRUE(be->graphs());
  EXPECT_FALSE(kernels::make_backend("cpu", 1)->graphs());
  kernels::Buf<float> x(*be);
  x.upload(std::vector<float>{1.0f, 2.0f, 3.0f});
  const int64_t pool = be->new_graph_pool();
  be->begin_capture(pool);
  kernels::Buf<float> tmp(*be, 3);  // a temporary of the graph: kept by the pool after release
  be->copy(tmp.data(), x.data(), 12);
  be->scale({.x = tmp.data(), .n = 3, .s = 2.0f});
  be->copy(x.data(), tmp.data(), 12);
  float* kept = tmp.data();
  tmp = kernels::Buf<float>();  // released inside the capture: a no-op for pool memory
  const int64_t g = be->end_capture();
  EXPECT_EQ(x.download(), (std::vector<float>{1.0f, 2.0f, 3.0f}));  // recorded, not run
  be->replay(g);
  be->replay(g);
  EXPECT_EQ(x.download(), (std::vector<float>{4.0f, 8.0f, 12.0f}));
  EXPECT_EQ(kept[0], 4.0f);  // the temporary is still the graph's
  be->free_graph_pool(pool);
  EXPECT_DEATH(be->replay(g), "replaying a graph that does not exist");
}

TEST(Graphs, WhatACaptureMustNotDoAborts) {
  auto be = kernels::make_backend("cpu-graphs", 1);
  kernels::Buf<float> outside(*be, 4);
  std::vector<float> h(4, 1.0f);
  const int64_t pool = be->new_graph_pool();
  EXPECT_DEATH(
      {
        be->begin_capture(pool);
        be->upload(outside.data(), h.data(), 16);
      },
      "upload is not allowed");
  EXPECT_DEATH(
      {
        be->begin_capture(pool);
        be->upload_ahead(outside.data(), 16, [](uint8_t* out) { std::memset(out, 0, 16); });
      },
      "upload is not allowed");
  EXPECT_DEATH(
      {
        be->begin_capture(pool);
        be->await_uploads();
      },
      "await_uploads is not allowed");
  EXPECT_DEATH(
      {
        be->begin_capture(pool);
        be->synchronize();
      },
      "synchronising is not allowed");
  EXPECT_DEATH(
      {
        be->begin_capture(pool);
        outside = kernels::Buf<float>();
      },
      "releasing memory allocated outside it");
}
