// optimizer::layer_updates with ZeRO-1 states is a compile error saying
// why: ZeRO-1 updates the flattened blocks of every tensor at once.
// expect: ZeRO-1 updates the flattened blocks
#include <tuple>
#include <xshard/optim/optimizer.hpp>
#include <xshard/spmd/sharded.hpp>

using M = xshard::mesh<"data=2, model=2">;
using Stack = std::tuple<xshard::sharded<float, 3, M, xshard::spec<"None, model, None">>>;
#ifdef XSHARD_NEGATIVE
using Opt = xshard::optimizer<xshard::sgd, Stack, xshard::zero1<"data">>;
#else
using Opt = xshard::optimizer<xshard::sgd, Stack>;
#endif

void update(Opt& opt, Stack& params) { (void)opt.layer_updates(params); }

int main() { return 0; }
