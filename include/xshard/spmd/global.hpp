// xshard/spmd/global.hpp - the single-controller face: global sharded
// arrays over a thread mesh, written as torch_xla and JAX users write
// programs, outside any SPMD body.
//
// Example (compiled in tests/compile/doc_spmd.cpp):
//   xshard::thread_mesh<M> mesh;
//   auto X = xshard::distribute<xshard::spec<"data, None, None">>(mesh, x);  // every device's block
//   auto W = xshard::distribute<xshard::spec<"model, None">>(mesh, w);
//   xt::xtensor<float, 3> y = xshard::gather(xshard::einsum<"...n,mn->...m">(X, W));
//
// A global<T, R, M, S> holds every device's block of a tensor laid out by
// spec S on the mesh. An operation on globals runs the per-device code on
// every device of the mesh (thread_mesh::run) with the planned collectives,
// and returns globals: xshard::on_mesh(f, args...) does this for any f over
// sharded values (einsum, a layer's forward or vjp, scan_layers); einsum,
// gather, redistribute, layer_forward and layer_vjp below are written with
// it. The per-device SPMD body (mesh.run) stays for manual regions; a
// global's on(dev) is its sharded value on a device inside one.
//
// Under mpi_mesh each process holds its own device's block (multi-
// controller): the per-device body is the program there; this face is for
// the thread mesh.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xtensor.hpp>

#include "../core/error.hpp"
#include "einsum.hpp"
#include "sharded.hpp"
#include "thread_mesh.hpp"

namespace xshard {

/// Every device's block of a tensor of global shape `global_shape()` laid
/// out by spec S (partial over Partial) on a thread mesh.
template <class T, std::size_t R, Mesh M, Spec S, axis_set Partial = 0>
class global {
 public:
  using value_type = T;
  using mesh_type = M;
  using spec_type = S;
  using sharded_type = sharded<T, R, M, S, Partial>;
  static constexpr std::size_t rank = R;
  static constexpr axis_set partial_axes = Partial;

  global(thread_mesh<M>& mesh, std::array<std::int64_t, R> global_shape, std::vector<xt::xtensor<T, R>> blocks)
      : mesh_(&mesh), global_(global_shape), blocks_(std::move(blocks)) {
    if (static_cast<std::int64_t>(blocks_.size()) != M::size())
      throw error("xshard: a global array needs one block per device: " + std::to_string(blocks_.size()) + " for " +
                  std::to_string(M::size()) + " devices");
  }

  thread_mesh<M>& mesh() const { return *mesh_; }
  const std::array<std::int64_t, R>& global_shape() const { return global_; }
  /// The block of the device at `position`.
  const xt::xtensor<T, R>& block(std::int64_t position) const { return blocks_.at(static_cast<std::size_t>(position)); }
  /// This array on device `dev` inside a mesh.run body (its block copied).
  template <class Device>
  sharded_type on(Device& dev) const {
    return sharded_type(make_device_ref<T>(dev), global_, block(dev.position()));
  }

 private:
  thread_mesh<M>* mesh_;
  std::array<std::int64_t, R> global_;
  std::vector<xt::xtensor<T, R>> blocks_;
};

template <class X>
inline constexpr bool is_global_v = false;
template <class T, std::size_t R, Mesh M, Spec S, axis_set P>
inline constexpr bool is_global_v<global<T, R, M, S, P>> = true;
/// A global sharded array.
template <class X>
concept Global = is_global_v<std::remove_cvref_t<X>>;

namespace detail {

/// A global argument on a device; anything else as it is. Tuples of
/// globals (a layer's parameters) become tuples of sharded values.
template <class Device, class A>
decltype(auto) on_device(Device& dev, const A& a) {
  if constexpr (Global<A>)
    return a.on(dev);
  else if constexpr (requires { std::tuple_size<A>::value; } && !Sharded<A>)
    return std::apply([&](const auto&... e) { return std::make_tuple(on_device(dev, e)...); }, a);
  else
    return (a);
}

/// The global type of a per-device result type V (sharded -> global,
/// tuples and pairs element by element; anything else: device 0's).
template <class V>
struct global_of {
  using type = V;
};
template <class T, std::size_t R, Mesh M, Spec S, axis_set P>
struct global_of<sharded<T, R, M, S, P>> {
  using type = global<T, R, M, S, P>;
};
template <class... V>
struct global_of<std::tuple<V...>> {
  using type = std::tuple<typename global_of<V>::type...>;
};
template <class A, class B>
struct global_of<std::pair<A, B>> {
  using type = std::pair<typename global_of<A>::type, typename global_of<B>::type>;
};

template <class V>
inline constexpr bool tuple_like_v = false;
template <class... V>
inline constexpr bool tuple_like_v<std::tuple<V...>> = true;
template <class A, class B>
inline constexpr bool tuple_like_v<std::pair<A, B>> = true;

/// The per-device results gathered into globals; `at(p)` is the result of
/// the device at position p (moved from).
template <class V, Mesh M, class At>
typename global_of<V>::type collect(thread_mesh<M>& mesh, At&& at) {
  if constexpr (Sharded<V>) {
    std::vector<xt::xtensor<typename V::value_type, V::rank>> blocks;
    for (std::int64_t p = 0; p < M::size(); ++p) blocks.push_back(std::move(at(p).local()));
    return {mesh, at(0).global_shape(), std::move(blocks)};
  } else if constexpr (tuple_like_v<V>) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return typename global_of<V>::type{collect<std::tuple_element_t<I, V>>(
          mesh, [&](std::int64_t p) -> auto& { return std::get<I>(at(p)); })...};
    }
    (std::make_index_sequence<std::tuple_size_v<V>>{});
  } else {
    return std::move(at(0));
  }
}

template <class A0, class... A>
auto& first_mesh(const A0& a0, const A&... as) {
  if constexpr (Global<A0>) {
    return a0.mesh();
  } else if constexpr (requires { std::tuple_size<A0>::value; } && !Sharded<A0>) {
    if constexpr (std::tuple_size_v < A0 >> 0 && Global<std::tuple_element_t<0, A0>>)
      return std::get<0>(a0).mesh();
    else
      return first_mesh(as...);
  } else {
    return first_mesh(as...);
  }
}

}  // namespace detail

/// f(args on each device...) on every device of the mesh the global
/// arguments live on, the results as globals: a sharded result becomes a
/// global, a tuple or pair element by element, anything else is device 0's.
template <class F, class... A>
auto on_mesh(F&& f, const A&... args) {
  auto& mesh = detail::first_mesh(args...);
  using Device = typename std::remove_reference_t<decltype(mesh)>::device;
  using V = std::remove_cvref_t<decltype(f(detail::on_device(std::declval<Device&>(), args)...))>;
  std::vector<std::optional<V>> results(static_cast<std::size_t>(mesh.size()));
  mesh.run([&](Device& dev) {
    results[static_cast<std::size_t>(dev.position())].emplace(f(detail::on_device(dev, args)...));
  });
  return detail::collect<V>(mesh, [&](std::int64_t p) -> V& { return *results[static_cast<std::size_t>(p)]; });
}

/// Every device's block of `x` under spec S (no communication: a slice per
/// device).
template <Spec S, Mesh M, class E>
auto distribute(thread_mesh<M>& mesh, const E& x) {
  using T = typename std::remove_cvref_t<E>::value_type;
  constexpr std::size_t R = S::rank();
  const xt::xtensor<T, R> g = x;
  std::vector<std::optional<sharded<T, R, M, S>>> parts(static_cast<std::size_t>(M::size()));
  mesh.run([&](auto& dev) { parts[static_cast<std::size_t>(dev.position())].emplace(distribute<S>(dev, g)); });
  return detail::collect<sharded<T, R, M, S>>(
      mesh, [&](std::int64_t p) -> auto& { return *parts[static_cast<std::size_t>(p)]; });
}

/// The whole tensor (partial sums reduced), as a plain xtensor.
template <Global X>
auto gather(const X& x) {
  using D = std::remove_cvref_t<X>;
  std::optional<xt::xtensor<typename D::value_type, D::rank>> whole;
  x.mesh().run([&](auto& dev) {
    auto g = gather(x.on(dev));
    if (dev.position() == 0) whole.emplace(std::move(g));
  });
  return std::move(*whole);
}

/// einsum on global arrays: the sharded einsum's plan on every device.
template <fixed_string Eq, Global X0, Global... X>
auto einsum(const X0& x0, const X&... xs) {
  return on_mesh([](const auto&... s) { return einsum<Eq>(s...); }, x0, xs...);
}

/// x under spec S2 (the rule table's plan on every device).
template <Spec S2, Global X>
auto redistribute(const X& x) {
  return on_mesh([](const auto& s) { return redistribute<S2>(s); }, x);
}

/// A layer's forward on global arrays: its output (a global).
template <class L, class P, Global X>
auto layer_forward(const L& l, const P& params, const X& x) {
  return on_mesh([&](const auto& p, const auto& xs) { return l.forward(p, xs).first; }, params, x);
}

/// A layer's forward and vjp on global arrays in one pass over the mesh:
/// the output, the parameters' gradients (a tuple of globals laid out like
/// the parameters) and the input's gradient.
template <class L, class P, Global X, Global G>
auto layer_vjp(const L& l, const P& params, const X& x, const G& gy) {
  return on_mesh(
      [&](const auto& p, const auto& xs, const auto& g) {
        auto [y, r] = l.forward(p, xs);
        auto [gp, gx] = l.vjp(p, r, g);
        return std::make_tuple(std::move(y), std::move(gp), std::move(gx));
      },
      params, x, gy);
}

}  // namespace xshard
