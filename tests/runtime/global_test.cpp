// The single-controller face (spmd/global.hpp, scan/global.hpp): global
// arrays over a thread mesh, operated on outside any SPMD body. Results
// equal the single-device computation, on uneven shapes, on 2x2 and 4x1
// meshes; the collectives each device ran equal the plan.
#include <gtest/gtest.h>

#include <string_view>
#include <tuple>
#include <xshard/nn/mlp.hpp>
#include <xshard/scan/global.hpp>
#include <xshard/spmd/global.hpp>
#include <xtensor/xrandom.hpp>

namespace {

template <xshard::fixed_string S>
using spec = xshard::spec<S>;

template <class A, class B>
double max_diff(const A& a, const B& b) {
  return xt::amax(xt::abs(a - b))();
}

template <class M>
void expect_einsum_equals_one_device() {
  xt::random::seed(11);
  // Uneven: 5 rows over data, 9 rows of W over model.
  const xt::xtensor<double, 3> x = xt::random::randn<double>({5, 3, 7});
  const xt::xtensor<double, 2> w = xt::random::randn<double>({9, 7});
  xshard::thread_mesh<M> mesh;
  const auto X = xshard::distribute<spec<"data, None, None">>(mesh, x);
  const auto W = xshard::distribute<spec<"model, None">>(mesh, w);
  // The program of the issue: a complete program on global arrays.
  const xt::xtensor<double, 3> y = xshard::gather(xshard::einsum<"...n,mn->...m">(X, W));
  EXPECT_LT(max_diff(y, xshard::einsum<"...n,mn->...m">(x, w)), 1e-12);
  // Each device ran the plan's collectives.
  constexpr auto plan =
      xshard::einsum_plan_of<"...n,mn->...m", typename decltype(X)::sharded_type, typename decltype(W)::sharded_type>();
  for (std::int64_t p = 0; p < M::size(); ++p) mesh.at(p).reset_counters();
  (void)xshard::einsum<"...n,mn->...m">(X, W);
  for (std::int64_t p = 0; p < M::size(); ++p)
    EXPECT_EQ(mesh.at(p).counters().total_calls(), static_cast<std::int64_t>(plan.collective_count()));
  // A contraction over a sharded dim (partial sums reduced by the plan).
  const auto Xt = xshard::distribute<spec<"None, None, model">>(mesh, x);
  const auto Wt = xshard::distribute<spec<"None, model">>(mesh, w);
  EXPECT_LT(max_diff(xshard::gather(xshard::einsum<"...n,mn->...m">(Xt, Wt)), xshard::einsum<"...n,mn->...m">(x, w)),
            1e-12);
  // Redistribution and gather keep every element.
  EXPECT_EQ(xshard::gather(xshard::redistribute<spec<"None, model, data">>(X)), x);
}

TEST(Global, EinsumOn2x2EqualsOneDevice) { expect_einsum_equals_one_device<xshard::mesh<"data=2, model=2">>(); }
TEST(Global, EinsumOn4x1EqualsOneDevice) { expect_einsum_equals_one_device<xshard::mesh<"data=4, model=1">>(); }

TEST(Global, BlocksAreTheDevicesSlices) {
  using M = xshard::mesh<"data=2, model=2">;
  xshard::thread_mesh<M> mesh;
  const xt::xtensor<int, 2> x = xt::reshape_view(xt::arange<int>(15), {5, 3});
  const auto X = xshard::distribute<spec<"data, None">>(mesh, x);
  // Rows 0-2 on the data=0 devices (positions 0, 1), rows 3-4 on the others.
  EXPECT_EQ(X.block(0), xt::view(x, xt::range(0, 3), xt::all()));
  EXPECT_EQ(X.block(1), xt::view(x, xt::range(0, 3), xt::all()));
  EXPECT_EQ(X.block(3), xt::view(x, xt::range(3, 5), xt::all()));
  EXPECT_EQ(X.global_shape()[0], 5);
}

// A graph-defined layer, its forward and vjp on global arrays.
TEST(Global, GraphLayerForwardAndVjpEqualOneDevice) {
  using M = xshard::mesh<"data=2, model=2">;
  using Layout = xshard::data_model_mlp<M>;
  using Block = xshard::mlp_block<double, Layout>;
  using Dense = xshard::mlp_block<double>;
  xt::random::seed(12);
  const Dense::params p{xt::random::randn<double>({8, 4}), xt::random::randn<double>({8}),
                        xt::random::randn<double>({8, 4}), xt::random::randn<double>({4})};
  const xt::xtensor<double, 2> x = xt::random::randn<double>({6, 4}), gy = xt::random::randn<double>({6, 4});
  const auto one = Dense{}.forward(p, x);
  const auto one_grads = Dense{}.vjp(p, one.second, gy);

  xshard::thread_mesh<M> mesh;
  const auto P = std::make_tuple(
      xshard::distribute<Layout::w_in>(mesh, std::get<0>(p)), xshard::distribute<Layout::b_in>(mesh, std::get<1>(p)),
      xshard::distribute<Layout::w_out>(mesh, std::get<2>(p)), xshard::distribute<Layout::b_out>(mesh, std::get<3>(p)));
  const auto X = xshard::distribute<Layout::batch>(mesh, x);
  const auto GY = xshard::distribute<Layout::batch>(mesh, gy);
  EXPECT_LT(max_diff(xshard::gather(xshard::layer_forward(Block{}, P, X)), one.first), 1e-12);
  const auto [Y, GP, GX] = xshard::layer_vjp(Block{}, P, X, GY);
  EXPECT_LT(max_diff(xshard::gather(Y), one.first), 1e-12);
  EXPECT_LT(max_diff(xshard::gather(GX), one_grads.second), 1e-12);
  EXPECT_LT(max_diff(xshard::gather(std::get<0>(GP)), std::get<0>(one_grads.first)), 1e-12);
  EXPECT_LT(max_diff(xshard::gather(std::get<1>(GP)), std::get<1>(one_grads.first)), 1e-12);
  EXPECT_LT(max_diff(xshard::gather(std::get<2>(GP)), std::get<2>(one_grads.first)), 1e-12);
  EXPECT_LT(max_diff(xshard::gather(std::get<3>(GP)), std::get<3>(one_grads.first)), 1e-12);
}

// scan_layers over stacked global parameters.
TEST(Global, ScanLayersOverGlobalsEqualsOneDevice) {
  using M = xshard::mesh<"data=2, model=2">;
  using Layout = xshard::data_model_mlp<M>;
  using Block = xshard::mlp_block<double, Layout>;
  using Dense = xshard::mlp_block<double>;
  using Stacked = xshard::stacked_params<Block>;
  xt::random::seed(13);
  std::vector<Dense::params> layers;
  for (int l = 0; l < 3; ++l)
    layers.push_back({xt::random::randn<double>({8, 4}), xt::random::randn<double>({8}),
                      xt::random::randn<double>({8, 4}), xt::random::randn<double>({4})});
  const auto stacked = xshard::stack_params<Dense>(layers);
  const xt::xtensor<double, 2> x = xt::random::randn<double>({6, 4}), gy = xt::random::randn<double>({6, 4});
  const auto y1 = xshard::scan_layers(Dense{}, stacked, x);
  const auto g1 = xshard::scan_layers_vjp(Dense{}, stacked, x, gy, xshard::remat::dots_saveable);

  xshard::thread_mesh<M> mesh;
  const auto P = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::make_tuple(
        xshard::distribute<typename std::tuple_element_t<I, Stacked>::spec_type>(mesh, std::get<I>(stacked))...);
  }
  (std::make_index_sequence<4>{});
  const auto X = xshard::distribute<Layout::batch>(mesh, x);
  EXPECT_LT(max_diff(xshard::gather(xshard::scan_layers(Block{}, P, X)), y1), 1e-12);
  const auto [GP, GX] =
      xshard::scan_layers_vjp(Block{}, P, X, xshard::distribute<Layout::batch>(mesh, gy), xshard::remat::dots_saveable);
  EXPECT_LT(max_diff(xshard::gather(GX), g1.second), 1e-12);
  EXPECT_LT(max_diff(xshard::gather(std::get<0>(GP)), std::get<0>(g1.first)), 1e-12);
  EXPECT_LT(max_diff(xshard::gather(std::get<3>(GP)), std::get<3>(g1.first)), 1e-12);
}

}  // namespace
