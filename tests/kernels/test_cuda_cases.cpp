// CUDA backend parity over the op case table (op_cases.h, cases/<family>.cpp): every case with
// use kParity runs on the CPU reference and on the CUDA backend, at each of its precisions (a
// CPU and a CUDA backend of that precision), from the same host inputs; each output is compared
// by its rule (bit for bit, or a relative error bound), and the case's host checks are applied
// to both backends' results. Test names: <family>_<case>_<f32|bf16>. Built with
// DEEPINFER_CUDA=ON only (run on the device machine by scripts/device_run.sh).
#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <ostream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/backend.h"
#include "kernels/op_cases.h"

using namespace deepinfer;
using namespace deepinfer::kernels;
using namespace deepinfer::op_cases;

namespace {

struct Param {
  size_t index;  // into all_cases()
  Precision precision;
};

void PrintTo(const Param& p, std::ostream* os) {
  const OpCase& c = all_cases()[p.index];
  *os << c.family << "/" << c.name << (p.precision == Precision::kBF16 ? " bf16" : " f32") << ": " << c.shape;
}

std::vector<Param> parity_params() {
  std::vector<Param> ps;
  const auto& cases = all_cases();
  for (size_t i = 0; i < cases.size(); ++i)
    if (cases[i].use & kParity)
      for (const Precision p : cases[i].precisions) ps.push_back({i, p});
  return ps;
}

// One backend pair per precision for the suite (made on first use, destroyed with the suite,
// before the CUDA runtime goes at exit).
std::map<std::pair<bool, Precision>, std::unique_ptr<Backend>>& backends() {
  static std::map<std::pair<bool, Precision>, std::unique_ptr<Backend>> made;
  return made;
}
Backend& backend(bool cuda, Precision p) {
  auto& b = backends()[{cuda, p}];
  if (!b) b = cuda ? make_cuda_backend(0, p) : make_cpu_backend(0, p);
  return *b;
}

class OpCases : public ::testing::TestWithParam<Param> {
 public:
  static void TearDownTestSuite() { backends().clear(); }
};

TEST_P(OpCases, CudaMatchesTheCpu) {
  const OpCase& c = all_cases()[GetParam().index];
  const Precision p = GetParam().precision;
  SCOPED_TRACE(c.family + "/" + c.name + " (" + c.shape + ")");
  Backend &cpu = backend(false, p), &gpu = backend(true, p);
  op_cases::Run rc(cpu), rg(gpu);
  c.build(rc);
  c.build(rg);
  ASSERT_TRUE(rc.op && rg.op) << "the case set no op";
  ASSERT_EQ(rc.outputs.size(), rg.outputs.size());
  ASSERT_FALSE(rc.outputs.empty()) << "a case must compare something";
  rc.op();
  if (rc.after) rc.after();
  rg.op();
  if (rg.after) rg.after();
  const Host hc = rc.download(), hg = rg.download();
  for (size_t i = 0; i < rc.outputs.size(); ++i) {
    const std::string e = compare(rc.outputs[i], hc[i], hg[i]);
    EXPECT_TRUE(e.empty()) << "output \"" << rc.outputs[i].name << "\": " << e;
  }
  for (auto [run, host, name] : {std::tuple{&rc, &hc, "CPU"}, std::tuple{&rg, &hg, "CUDA"}})
    for (const auto& check : run->checks) {
      const std::string e = check(*host);
      EXPECT_TRUE(e.empty()) << name << " backend: " << e;
    }
}

std::string test_name(const ::testing::TestParamInfo<Param>& info) {
  const OpCase& c = all_cases()[info.param.index];
  std::string s = c.family + "_" + c.name + (info.param.precision == Precision::kBF16 ? "_bf16" : "_f32");
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Table, OpCases, ::testing::ValuesIn(parity_params()), test_name);

// Every case's name is unique (the test names and the lab's filter rely on it).
TEST(OpCaseTable, NamesAreUnique) {
  std::map<std::string, int> seen;
  for (const OpCase& c : all_cases()) EXPECT_EQ(++seen[c.family + "/" + c.name], 1) << c.family << "/" << c.name;
}

}  // namespace
