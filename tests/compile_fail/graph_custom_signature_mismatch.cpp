// A custom op whose signature disagrees with its operands (a rank-2 gain
// for "bsd,d->bsd") is a compile error naming the node by its op's name and
// the name the user gave it, then the signature's diagnostic.
// expect: graph_op<'s', *'c', *'a', *'l', *'e'>, *xshard::graph::node_name<'g', *'a', *'t', *'e', *'d'>
#include <xshard/graph/graph.hpp>

namespace g = xshard::graph;

struct scale_kernel {
  template <class X, class W>
  static auto forward(const X& x, const W& w) {
    return x * w;
  }
  template <std::size_t K, class G, class Y, class X, class W>
  static auto vjp(const G& gy, const Y&, const X&, const W& w) {
    return gy * w;
  }
};

struct def {
  using input = xt::xtensor<float, 3>;
#ifdef XSHARD_NEGATIVE
  using params = std::tuple<xt::xtensor<float, 2>>;
#else
  using params = std::tuple<xt::xtensor<float, 1>>;
#endif
  static constexpr std::array<std::string_view, 1> param_names{"gain"};
  template <class X, class W>
  static auto forward(X x, W w) {
    return g::save<"gated">(g::custom<"scale", "bsd,d->bsd", scale_kernel>(x, w));
  }
};

static_assert(g::layer<def>::program_type::size == 3);
