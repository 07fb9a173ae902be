// optimizer::layer_updates on a stack whose layer dim (dim 0) is sharded is
// a compile error saying so: a device's block would not hold every layer,
// and layer l would land on another layer's slice.
// expect: layer dim .dim 0. is sharded
#include <tuple>
#include <xshard/optim/optimizer.hpp>
#include <xshard/spmd/sharded.hpp>

using M = xshard::mesh<"data=2, model=2">;
#ifdef XSHARD_NEGATIVE
using Stack = std::tuple<xshard::sharded<float, 3, M, xshard::spec<"model, None, None">>>;
#else
using Stack = std::tuple<xshard::sharded<float, 3, M, xshard::spec<"None, model, None">>>;
#endif
using Layer = std::tuple<xshard::sharded<float, 2, M, xshard::spec<"model, None">>>;

void update(xshard::optimizer<xshard::sgd, Stack>& opt, Stack& params, const Layer& g) {
  opt.layer_updates(params)(0, g);
}

int main() { return 0; }
