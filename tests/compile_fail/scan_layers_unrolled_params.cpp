// A heterogeneous stack whose params entry 1 is not of layer 1's params
// type (float tensors for a double layer) is a compile error naming entry 1
// and its layer.
// expect: params_entry_is_not_layer_params<1, *xshard::tanh_linear_layer<double(, *2)?>
#include <boost/hana/tuple.hpp>
#include <tuple>
#include <xshard/nn/linear.hpp>
#include <xshard/scan/scan_layers_unrolled.hpp>
#include <xtensor/xtensor.hpp>

using params = xshard::linear_layer<double>::params;

void use(const params& p, const xt::xtensor<double, 2>& x) {
  const auto layers = boost::hana::make_tuple(xshard::linear_layer<double>{}, xshard::tanh_linear_layer<double>{});
#ifdef XSHARD_NEGATIVE
  const auto p1 = std::tuple<xt::xtensor<float, 2>, xt::xtensor<float, 1>>{};
#else
  const auto p1 = p;
#endif
  (void)xshard::scan_layers_vjp(layers, boost::hana::make_tuple(p, p1), x, x, xshard::remat::save_all);
}
