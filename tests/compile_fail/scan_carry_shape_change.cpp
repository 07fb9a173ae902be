// A scan body that returns a carry of another static shape than its initial
// carry (xt::xtensor_fixed) is a compile error saying so.
// expect: same type as init
#include <utility>
#include <xshard/scan/scan.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xtensor.hpp>

using F2 = xt::xtensor_fixed<float, xt::xshape<2>>;
using F3 = xt::xtensor_fixed<float, xt::xshape<3>>;

int main() {
  const xt::xtensor<float, 2> xs = xt::zeros<float>({4, 2});
#ifdef XSHARD_NEGATIVE
  auto r = xshard::scan(
      [](const F2&, const xt::xtensor<float, 1>&) {
        return std::pair{F3{}, xshard::none};
      },
      F2{}, xs);
#else
  auto r = xshard::scan([](const F2& c, const xt::xtensor<float, 1>&) { return std::pair{c, xshard::none}; }, F2{}, xs);
#endif
  return static_cast<int>(r.first.size());
}
