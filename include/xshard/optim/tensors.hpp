// xshard/optim/tensors.hpp - what the optimizers need to know about a tuple
// of parameter (or gradient) tensors: plain `xt::xtensor<T, R>` on one device,
// or `sharded<T, R, M, S, Partial>` inside an SPMD body (spmd/sharded.hpp).
//
// Example (compiled in tests/compile/doc_optim.cpp):
//   using P = std::tuple<xshard::sharded<float, 2, M, xshard::spec<"model, None">>,
//                        xshard::sharded<float, 1, M, xshard::spec<"None">>>;
//   static_assert(xshard::optim_tuple<P>);
//
// A tuple is all plain or all sharded on one mesh, with one element type
// (checked at compile time, the message naming what differs). Stacked
// scan_layers parameters (scan/scan_layers.hpp) are such tuples too.
//
// Who owns a replicated block: a block held by several devices (the tensor
// is replicated over some mesh axes) belongs to the holder whose coordinate
// on every replicating axis is 0. The rule uses mesh coordinates only, so it
// does not depend on device ids or replica numbering; the gradient norm and
// the checkpoint writer count (write) each element exactly once with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <xtensor/xtensor.hpp>

#include "../spmd/collectives.hpp"
#include "../spmd/layout.hpp"
#include "../spmd/sharded.hpp"

namespace xshard {

namespace detail {

/// One tensor type of a tuple: plain or sharded.
template <class X>
struct optim_tensor {
  static constexpr bool valid = false;
};

template <class T, std::size_t R>
struct optim_tensor<xt::xtensor<T, R>> {
  static constexpr bool valid = true;
  static constexpr bool is_sharded = false;
  using value_type = T;
  using mesh_type = void;
  using reduced = xt::xtensor<T, R>;
  static constexpr axis_set partial = 0;
  static T* data(xt::xtensor<T, R>& x) { return x.data(); }
  static const T* data(const xt::xtensor<T, R>& x) { return x.data(); }
  static std::size_t size(const xt::xtensor<T, R>& x) { return x.size(); }
  static xt::xtensor<T, R>& block(xt::xtensor<T, R>& x) { return x; }
  static const xt::xtensor<T, R>& block(const xt::xtensor<T, R>& x) { return x; }
};

template <class T, std::size_t R, Mesh M, Spec S, axis_set P>
struct optim_tensor<sharded<T, R, M, S, P>> {
  static constexpr bool valid = true;
  static constexpr bool is_sharded = true;
  using value_type = T;
  using mesh_type = M;
  using reduced = sharded<T, R, M, S, 0>;
  static constexpr axis_set partial = P;
  static T* data(sharded<T, R, M, S, P>& x) { return x.local().data(); }
  static const T* data(const sharded<T, R, M, S, P>& x) { return x.local().data(); }
  static std::size_t size(const sharded<T, R, M, S, P>& x) { return x.local().size(); }
  static xt::xtensor<T, R>& block(sharded<T, R, M, S, P>& x) { return x.local(); }
  static const xt::xtensor<T, R>& block(const sharded<T, R, M, S, P>& x) { return x.local(); }
};

template <class Tuple>
struct optim_tuple_info {
  static constexpr bool valid = false;
};

template <class X0, class... X>
struct optim_tuple_info<std::tuple<X0, X...>> {
  static constexpr bool tensors = optim_tensor<X0>::valid && (optim_tensor<X>::valid && ...);
  static constexpr bool valid = tensors;
  static constexpr std::size_t size = 1 + sizeof...(X);
};

template <class Tuple>
inline constexpr bool tuple_of_tensors_v = optim_tuple_info<Tuple>::valid;

/// Calls f(integral_constant<I>) for I = 0 .. N - 1.
template <std::size_t N, class F>
constexpr void for_each_index(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) { (f(std::integral_constant<std::size_t, I>{}), ...); }
  (std::make_index_sequence<N>{});
}

/// Axes of the mesh (of size > 1) over which every holder of X's block holds
/// the same block: neither sharding a dim nor partial.
template <class X>
constexpr axis_set replica_axes() {
  if constexpr (!optim_tensor<X>::is_sharded) {
    return 0;
  } else {
    axis_set r = 0;
    for (std::size_t a = 0; a < X::mesh_shape.size(); ++a)
      if (X::mesh_shape[a] > 1) r |= axis_bit(a);
    return r & ~sharding_axes(X::resolved) & ~X::partial_axes;
  }
}

/// Whether the device at mesh `position` owns its block of X among the
/// block's replicas over the axes of replica_axes<X>() outside `ignored`:
/// the holder whose coordinate on each of those axes is 0.
template <class X>
bool owns_block(std::int64_t position, axis_set ignored = 0) {
  if constexpr (!optim_tensor<X>::is_sharded) {
    return true;
  } else {
    constexpr axis_set rep = replica_axes<X>();
    const auto c = mesh_coords(X::mesh_shape, position);
    for (std::size_t a = 0; a < X::mesh_shape.size(); ++a)
      if (((rep & ~ignored) & axis_bit(a)) && c[a] != 0) return false;
    return true;
  }
}

/// All mesh axes of size > 1.
template <Mesh M>
constexpr axis_set all_axes() {
  axis_set r = 0;
  const auto shape = M::mesh_shape();
  for (std::size_t a = 0; a < shape.size(); ++a)
    if (shape[a] > 1) r |= axis_bit(a);
  return r;
}

/// The axes of `set` whose size is > 1 on M (what collectives count).
template <Mesh M>
constexpr axis_set nontrivial(axis_set set) {
  return set & all_axes<M>();
}

}  // namespace detail

/// A tuple the optimizers accept: all plain tensors, or all sharded tensors
/// of one mesh; one element type throughout.
template <class Tuple>
concept optim_tuple = detail::tuple_of_tensors_v<Tuple>;

/// The element type of a tuple of tensors.
template <optim_tuple P>
using optim_value_t = typename detail::optim_tensor<std::tuple_element_t<0, P>>::value_type;

namespace detail {
template <class P>
struct reduced_tuple;
template <class... X>
struct reduced_tuple<std::tuple<X...>> {
  using type = std::tuple<typename optim_tensor<X>::reduced...>;
};
}  // namespace detail

/// The tuple with every tensor's partial sums reduced (what a gradient tuple
/// is after its all-reduce).
template <optim_tuple P>
using reduced_tuple_t = typename detail::reduced_tuple<P>::type;

namespace detail {

/// Compile-time checks of a parameter tuple, each with its own message.
template <class P>
constexpr bool check_param_tuple() {
  static_assert(tuple_of_tensors_v<P>,
                "xshard: an optimizer needs a std::tuple of xt::xtensor<T, R> or xshard::sharded<T, R, M, S> tensors");
  if constexpr (tuple_of_tensors_v<P>) {
    using X0 = std::tuple_element_t<0, P>;
    using T = typename optim_tensor<X0>::value_type;
    constexpr bool same_type = []<std::size_t... I>(std::index_sequence<I...>) {
      return (std::is_same_v<typename optim_tensor<std::tuple_element_t<I, P>>::value_type, T> && ...);
    }
    (std::make_index_sequence<std::tuple_size_v<P>>{});
    static_assert(same_type, "xshard: every tensor of an optimizer's tuple must have the same element type");
    static_assert(std::is_floating_point_v<T>, "xshard: an optimizer updates floating-point tensors");
    constexpr bool same_kind = []<std::size_t... I>(std::index_sequence<I...>) {
      return ((optim_tensor<std::tuple_element_t<I, P>>::is_sharded == optim_tensor<X0>::is_sharded) && ...);
    }
    (std::make_index_sequence<std::tuple_size_v<P>>{});
    static_assert(same_kind, "xshard: an optimizer's tuple mixes plain and sharded tensors; use one kind");
    constexpr bool same_mesh = []<std::size_t... I>(std::index_sequence<I...>) {
      return (std::is_same_v<typename optim_tensor<std::tuple_element_t<I, P>>::mesh_type,
                             typename optim_tensor<X0>::mesh_type> &&
              ...);
    }
    (std::make_index_sequence<std::tuple_size_v<P>>{});
    static_assert(same_mesh, "xshard: the sharded tensors of an optimizer's tuple live on different meshes");
    return same_type && same_kind && same_mesh;
  }
  return false;
}

/// The mesh of a tuple of sharded tensors (void for plain tensors).
template <class P>
using tuple_mesh_t = typename optim_tensor<std::tuple_element_t<0, P>>::mesh_type;

/// The partial axes shared by a gradient tuple's partial tensors (each
/// tensor is reduced or partial over this set); ~0 if they differ.
template <class G>
constexpr axis_set common_partial() {
  axis_set p = 0;
  bool ok = true;
  for_each_index<std::tuple_size_v<G>>([&](auto i) {
    constexpr axis_set q = optim_tensor<std::tuple_element_t<decltype(i)::value, G>>::partial;
    if (q == 0) return;
    if (p != 0 && p != q) ok = false;
    p = q;
  });
  return ok ? p : ~axis_set{0};
}

/// A device_ref of the tuple's first tensor (sharded tuples only).
template <class P>
const auto& tuple_device(const P& p) {
  return std::get<0>(p).device();
}

/// One fused all-reduce (sum over the gradients' partial axes) of every
/// partial tensor of g; returns the reduced tuple. No collective when
/// nothing is partial.
template <optim_tuple G>
reduced_tuple_t<G> reduce_partial(const G& g) {
  using R = reduced_tuple_t<G>;
  using T = optim_value_t<G>;
  constexpr axis_set p = common_partial<G>();
  static_assert(p != ~axis_set{0},
                "xshard: the gradients are partial sums over different mesh axes; reduce them to one set first");
  if constexpr (p == 0) {
    return g;  // nothing partial: R is G
  } else {
    std::size_t n = 0;
    for_each_index<std::tuple_size_v<G>>([&](auto i) {
      using X = std::tuple_element_t<decltype(i)::value, G>;
      if constexpr (optim_tensor<X>::partial != 0) n += optim_tensor<X>::size(std::get<decltype(i)::value>(g));
    });
    std::vector<T> buf(n);
    std::size_t off = 0;
    for_each_index<std::tuple_size_v<G>>([&](auto i) {
      using X = std::tuple_element_t<decltype(i)::value, G>;
      if constexpr (optim_tensor<X>::partial != 0) {
        const auto& x = std::get<decltype(i)::value>(g);
        std::copy_n(optim_tensor<X>::data(x), optim_tensor<X>::size(x), buf.data() + off);
        off += optim_tensor<X>::size(x);
      }
    });
    const auto& dev = tuple_device(g);
    dev.all_reduce(dev.device, std::span<T>(buf), reduce_op::sum, p);
    off = 0;
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      auto one = [&](auto i) {
        constexpr std::size_t k = decltype(i)::value;
        using X = std::tuple_element_t<k, G>;
        using Y = std::tuple_element_t<k, R>;
        const auto& x = std::get<k>(g);
        auto block = optim_tensor<X>::block(x);
        if constexpr (optim_tensor<X>::partial != 0) {
          std::copy_n(buf.data() + off, block.size(), block.data());
          off += block.size();
        }
        return Y(x.device(), x.global_shape(), std::move(block));
      };
      return R{one(std::integral_constant<std::size_t, I>{})...};
    }
    (std::make_index_sequence<std::tuple_size_v<G>>{});
  }
}

}  // namespace detail

}  // namespace xshard
