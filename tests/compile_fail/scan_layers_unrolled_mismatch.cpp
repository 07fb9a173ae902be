// A heterogeneous stack whose layer 1 outputs a rank-2 activation while
// layer 2 takes rank 3 is a compile error naming layer 1 (and the two
// layers' types).
// expect: layer_output_is_not_next_input<1, *xshard::tanh_linear_layer<double(, *2)?>, *xshard::linear_layer<double,
// *3>
#include <boost/hana/tuple.hpp>
#include <xshard/nn/linear.hpp>
#include <xshard/scan/scan_layers_unrolled.hpp>
#include <xtensor/xtensor.hpp>

using params = xshard::linear_layer<double>::params;  // also linear_layer<double, 3>'s

void use(const params& p, const xt::xtensor<double, 2>& x) {
#ifdef XSHARD_NEGATIVE
  const auto layers = boost::hana::make_tuple(xshard::linear_layer<double>{}, xshard::tanh_linear_layer<double>{},
                                              xshard::linear_layer<double, 3>{});
#else
  const auto layers = boost::hana::make_tuple(xshard::linear_layer<double>{}, xshard::tanh_linear_layer<double>{},
                                              xshard::linear_layer<double, 2>{});
#endif
  (void)xshard::scan_layers(layers, boost::hana::make_tuple(p, p, p), x);
}
