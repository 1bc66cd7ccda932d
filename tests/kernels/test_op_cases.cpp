// The op case table (op_cases.h) on the CPU reference alone, without a GPU: every parity case
// builds the same inputs every time (so both backends of the CUDA parity test get the same),
// gives the same bits run twice, and passes its own host checks (against dequant_row, the
// summation-order sensitivity, the collapse's norm, the blind query's zero output...) on the
// CPU. Cases of more than a GFLOP are left to the CUDA parity test (its CPU side runs them).
#include <gtest/gtest.h>

#include <string>

#include "kernels/backend.h"
#include "kernels/op_cases.h"

using namespace deepinfer;
using namespace deepinfer::kernels;
using namespace deepinfer::op_cases;

namespace {

TEST(OpsCaseTable, CpuBuildsTheSameInputsAndPassesItsChecks) {
  auto cpu = make_cpu_backend(0);
  int ran = 0;
  for (const OpCase& c : all_cases()) {
    if (!(c.use & kParity) || c.flops > 1e9) continue;
    SCOPED_TRACE(c.family + "/" + c.name);
    op_cases::Run a(*cpu), b(*cpu);
    c.build(a);
    c.build(b);
    ASSERT_TRUE(a.op);
    ASSERT_FALSE(a.outputs.empty());
    ASSERT_EQ(a.outputs.size(), b.outputs.size());
    a.op();
    if (a.after) a.after();
    b.op();
    if (b.after) b.after();
    const Host ha = a.download(), hb = b.download();
    for (size_t i = 0; i < ha.size(); ++i) {
      Output bits = a.outputs[i];
      bits.rule = Rule::kBits;
      const std::string e = compare(bits, ha[i], hb[i]);
      EXPECT_TRUE(e.empty()) << "output \"" << bits.name << "\" of two builds: " << e;
    }
    for (const auto& check : a.checks) {
      const std::string e = check(ha);
      EXPECT_TRUE(e.empty()) << e;
    }
    ++ran;
  }
  EXPECT_GT(ran, 100);
}

}  // namespace
