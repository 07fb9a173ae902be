// xshard/scan/scan_layers.hpp - a homogeneous stack of layers (nn/layer.hpp):
// one layer type, its parameters stacked on a leading dim, run as a run-time
// loop, forward and backward, with rematerialisation policies.
//
// Example (compiled in tests/compile/doc_scan.cpp):
//   xshard::linear_layer<float> L;
//   auto stacked = xshard::stack_params<decltype(L)>(per_layer_params);  // tensors gain a leading layer dim
//   auto y = xshard::scan_layers(L, stacked, x);                          // a run-time loop over layers
//   auto [grads, dx] = xshard::scan_layers_vjp(L, stacked, x, gy, xshard::remat::recompute);
//
//   auto [y, pullback] = xshard::scan_layers_vjp(L, stacked, x, xshard::remat::recompute);
//   auto [grads, dx] = pullback(loss_gradient(y));                        // JAX's vjp: forward once
//
// Parameters may be plain tensors (xt::xtensor) or sharded tensors
// (spmd/sharded.hpp) inside an SPMD body: a stacked sharded parameter has
// the layer's spec with an unsharded leading dim ("None, model, None" for a
// "model, None" weight), so taking layer l's parameters is a local slice on
// every device, with no communication.
//
// Policies: scan/remat.hpp. The heterogeneous (unrolled) form:
// scan/scan_layers_unrolled.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "../core/error.hpp"
#include "../core/text.hpp"         // detail::shape_text
#include "../core/thread_pool.hpp"  // parallel_ranges: stacking copies over the pool
#include "../core/workspace.hpp"
#include "../nn/layer.hpp"
#include "../spmd/einsum.hpp"
#include "../spmd/sharded.hpp"
#include "../trace/trace.hpp"
#include "remat.hpp"

namespace xshard {

namespace detail {

/// How one parameter tensor type stacks: its stacked type, its extents,
/// layer l out of a stack, and a stack out of layers.
template <class E>
struct stacking;

template <class T, std::size_t R>
struct stacking<xt::xtensor<T, R>> {
  using type = xt::xtensor<T, R + 1>;
  static std::vector<std::int64_t> shape(const xt::xtensor<T, R>& e) { return {e.shape().begin(), e.shape().end()}; }
  static std::size_t depth(const type& s) { return s.shape()[0]; }
  static std::vector<std::int64_t> shape_of_stack(const type& s) { return {s.shape().begin(), s.shape().end()}; }
  static xt::xtensor<T, R> slice(const type& s, std::size_t l) { return xt::view(s, l); }
  static auto view(const type& s, std::size_t l) { return xt::view(s, l); }  // no copy
  static type stack(const std::vector<const xt::xtensor<T, R>*>& layers) {
    std::array<std::size_t, R + 1> shape{};
    shape[0] = layers.size();
    for (std::size_t d = 0; d < R; ++d) shape[d + 1] = layers[0]->shape()[d];
    type out = fresh_tensor<T, R + 1>(shape);  // the current workspace's, if any
    // Both sides are contiguous row-major: layer l is the l-th block of out,
    // copied in element ranges over the thread pool.
    const std::size_t block = layers[0]->size();
    for (std::size_t l = 1; l < layers.size(); ++l)
      if (layers[l]->shape() != layers[0]->shape())
        throw error("xshard: stack_params: layer " + std::to_string(l) + " has another shape than layer 0");
    parallel_ranges(layers.size() * block, 16384, [&](std::size_t lo, std::size_t hi) {
      while (lo < hi) {
        const std::size_t l = lo / block, i = lo % block, count = std::min(block - i, hi - lo);
        std::copy_n(layers[l]->data() + i, count, out.data() + lo);
        lo += count;
      }
    });
    return out;
  }
  /// Whether `e` has the shape of one layer of `s`.
  static bool fits(const type& s, const xt::xtensor<T, R>& e) {
    for (std::size_t d = 0; d < R; ++d)
      if (s.shape()[d + 1] != e.shape()[d]) return false;
    return true;
  }
  /// Copies `e` into layer l of `s` (@pre fits(s, e)), in element ranges
  /// over the thread pool.
  static void put(type& s, std::size_t l, const xt::xtensor<T, R>& e) {
    T* const dst = s.data() + l * e.size();
    parallel_ranges(e.size(), 16384,
                    [&](std::size_t lo, std::size_t hi) { std::copy(e.data() + lo, e.data() + hi, dst + lo); });
  }
};

/// The spec of a stack of S-sharded tensors: an unsharded leading dim.
template <Mesh M, Spec S>
consteval resolved_spec stacked_resolved() {
  const resolved_spec r = typed_resolved<M, S>();
  resolved_spec out;
  out.dims.push_back({});
  for (std::size_t d = 0; d < r.rank(); ++d) out.dims.push_back(r.dims[d]);
  return out;
}

template <class T, std::size_t R, Mesh M, Spec S>
struct stacking<sharded<T, R, M, S>> {
  using layer_type = sharded<T, R, M, S>;
  using type = sharded<T, R + 1, M, typename spec_of_resolved<M, stacked_resolved<M, S>()>::type>;
  static std::vector<std::int64_t> shape(const layer_type& e) {
    return {e.global_shape().begin(), e.global_shape().end()};
  }
  static std::size_t depth(const type& s) { return static_cast<std::size_t>(s.global_shape()[0]); }
  static std::vector<std::int64_t> shape_of_stack(const type& s) {
    return {s.global_shape().begin(), s.global_shape().end()};
  }
  /// Layer l's own copy: one contiguous copy of the view's block.
  static layer_type slice(const type& s, std::size_t l) { return layer_type(view(s, l)); }
  /// Layer l's block in place (no copy).
  static sharded_view<T, R, M, S> view(const type& s, std::size_t l) {
    std::array<std::int64_t, R> g{};
    std::array<std::size_t, R> local_shape{};
    std::size_t n = 1;
    for (std::size_t d = 0; d < R; ++d) {
      g[d] = s.global_shape()[d + 1];
      local_shape[d] = s.local().shape()[d + 1];
      n *= local_shape[d];
    }
    return sharded_view<T, R, M, S>(s.device(), g, s.local().data() + l * n, local_shape);
  }
  static type stack(const std::vector<const layer_type*>& layers) {
    std::array<std::int64_t, R + 1> g{};
    g[0] = static_cast<std::int64_t>(layers.size());
    for (std::size_t d = 0; d < R; ++d) g[d + 1] = layers[0]->global_shape()[d];
    std::vector<const xt::xtensor<T, R>*> blocks;
    for (const auto* e : layers) blocks.push_back(&e->local());
    return type(layers[0]->device(), g, stacking<xt::xtensor<T, R>>::stack(blocks));
  }
  static bool fits(const type& s, const layer_type& e) {
    for (std::size_t d = 0; d < R; ++d)
      if (s.global_shape()[d + 1] != e.global_shape()[d]) return false;
    return stacking<xt::xtensor<T, R>>::fits(s.local(), e.local());
  }
  static void put(type& s, std::size_t l, const layer_type& e) {
    stacking<xt::xtensor<T, R>>::put(s.local(), l, e.local());
  }
};

template <class P>
struct stacked_params_of;
template <class... E>
struct stacked_params_of<std::tuple<E...>> {
  using type = std::tuple<typename stacking<E>::type...>;
};

template <class L, class F>
void for_each_param(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) { (f(std::integral_constant<std::size_t, I>{}), ...); }
  (std::make_index_sequence<std::tuple_size_v<typename L::params>>{});
}

}  // namespace detail

/// The parameters of a homogeneous stack: each of the layer's parameter
/// tensors with a leading layer dim.
template <layer L>
using stacked_params = typename detail::stacked_params_of<typename L::params>::type;

/// Stacks per-layer parameters; a layer whose parameter shape differs from
/// layer 0's is an xshard::error naming the layer index and the parameter.
template <layer L>
stacked_params<L> stack_params(const std::vector<typename L::params>& layers) {
  if (layers.empty()) throw error("xshard: stack_params: no layers");
  auto one = [&](auto i) {
    constexpr std::size_t I = decltype(i)::value;
    using E = std::tuple_element_t<I, typename L::params>;
    using S = detail::stacking<E>;
    const auto first = S::shape(std::get<I>(layers[0]));
    std::vector<const E*> ptrs;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      if (l && S::shape(std::get<I>(layers[l])) != first)
        throw error("xshard: stack_params: layer " + std::to_string(l) + "'s parameter \"" +
                    std::string(L::param_names[I]) + "\" has another shape than layer 0's");
      ptrs.push_back(&std::get<I>(layers[l]));
    }
    return S::stack(ptrs);
  };
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return stacked_params<L>{one(std::integral_constant<std::size_t, I>{})...};
  }
  (std::make_index_sequence<std::tuple_size_v<typename L::params>>{});
}

/// Layer l's parameters out of a stack.
template <layer L>
typename L::params layer_params(const stacked_params<L>& s, std::size_t l) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return
        typename L::params{detail::stacking<std::tuple_element_t<I, typename L::params>>::slice(std::get<I>(s), l)...};
  }
  (std::make_index_sequence<std::tuple_size_v<typename L::params>>{});
}

namespace detail {

/// Layer l's parameters as views into the stack where the tensor type
/// allows it (plain tensors), copies otherwise (sharded tensors).
template <layer L>
auto layer_param_views(const stacked_params<L>& s, std::size_t l) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::make_tuple(stacking<std::tuple_element_t<I, typename L::params>>::view(std::get<I>(s), l)...);
  }
  (std::make_index_sequence<std::tuple_size_v<typename L::params>>{});
}

template <layer L>
using layer_param_views_t = decltype(layer_param_views<L>(std::declval<const stacked_params<L>&>(), 0));

/// Whether L's forward and vjp are templates over the params argument, so
/// views reach them as views (a `const params&` signature would accept the
/// views too, by converting: a copy).
template <class L>
concept takes_param_views = requires {
  &L::template forward<layer_param_views_t<L>>;
  &L::template vjp<layer_param_views_t<L>>;
};

/// What scan_layers hands layer l: views when the layer takes them.
template <layer L>
auto layer_args(const stacked_params<L>& s, std::size_t l) {
  if constexpr (takes_param_views<L>)
    return layer_param_views<L>(s, l);
  else
    return layer_params<L>(s, l);
}

}  // namespace detail

/// Number of layers in a stack (checked equal across its tensors).
template <layer L>
std::size_t stack_depth(const stacked_params<L>& s) {
  using S0 = detail::stacking<std::tuple_element_t<0, typename L::params>>;
  const std::size_t n = S0::depth(std::get<0>(s));
  detail::for_each_param<L>([&](auto i) {
    constexpr std::size_t I = decltype(i)::value;
    const std::size_t m = detail::stacking<std::tuple_element_t<I, typename L::params>>::depth(std::get<I>(s));
    if (m != n)
      throw error("xshard: scan_layers: parameter \"" + std::string(L::param_names[I]) + "\" stacks " +
                  std::to_string(m) + " layers, \"" + std::string(L::param_names[0]) + "\" " + std::to_string(n));
  });
  return n;
}

/// Forward through a homogeneous stack: a run-time loop over the layers.
template <stackable_layer L>
typename L::output scan_layers(const L& l, const stacked_params<L>& params, typename L::input x) {
  const std::size_t n = stack_depth<L>(params);
  for (std::size_t i = 0; i < n; ++i) {
    const trace_me t("scan_layers/forward", {{"layer", i}});
    x = detail::in_layer(i, "forward", [&] { return l.forward(detail::layer_args<L>(params, i), x).first; });
  }
  return x;
}

/// The backward half of scan_layers_vjp: holds what the forward kept (by
/// the policy) and a reference to the layer and its stacked parameters,
/// which must outlive it. Call it once.
template <stackable_layer L>
class scan_layers_pullback {
 public:
  scan_layers_pullback(const L& l, const stacked_params<L>& params, std::vector<remat_saved<L>> saved)
      : layer_(&l), params_(&params), saved_(std::move(saved)) {}
  scan_layers_pullback(scan_layers_pullback&&) noexcept = default;
  scan_layers_pullback& operator=(scan_layers_pullback&&) noexcept = default;
  /// Gives what is left (all of it when the pullback never ran) and the
  /// list's capacity to the current workspace, if any.
  ~scan_layers_pullback() {
    workspace* const w = workspace::current();
    if (!w || saved_.capacity() == 0) return;
    for (auto& s : saved_) detail::recycle(std::move(s));
    saved_.clear();
    w->give_object(std::move(saved_));
  }

  /// The stacked parameter gradients and the input gradient for the
  /// output gradient gy.
  std::pair<stacked_params<L>, typename L::input> operator()(typename L::output gy) {
    claim();
    // Per-layer gradients, stacked at the end: the peak is the larger of
    // (saved residuals + the gradients so far) and twice the gradients,
    // never both (a stack allocated up front would add the gradients to
    // the residuals' peak).
    std::vector<typename L::params> grads;
    grads.reserve(saved_.size());
    gy = backward(std::move(gy), [&](std::size_t, auto&& gp) { grads.push_back(std::move(gp)); });
    std::reverse(grads.begin(), grads.end());
    auto stacked = stack_params<L>(grads);
    for (auto& g : grads) detail::recycle(std::move(g));  // copied into the stack
    return {std::move(stacked), std::move(gy)};
  }

  /// The same, writing the parameter gradients into `grads`, a stack the
  /// caller keeps (shaped like the parameters, e.g. from the previous
  /// step): each layer's gradients are copied in as soon as they are made,
  /// while they are still in cache, and no stack is allocated. Returns the
  /// input gradient. A stack of another depth or layer shape is an
  /// xshard::error naming the parameter, thrown before any layer runs.
  typename L::input operator()(typename L::output gy, stacked_params<L>& grads) {
    claim();
    check_stack(grads, saved_.size());
    return backward(std::move(gy), [&](std::size_t i, auto&& gp) {
      detail::for_each_param<L>([&](auto k) {
        constexpr std::size_t K = decltype(k)::value;
        using S = detail::stacking<std::tuple_element_t<K, typename L::params>>;
        if (!S::fits(std::get<K>(grads), std::get<K>(gp)))
          throw error("xshard: scan_layers_vjp: layer " + std::to_string(i) + "'s gradient of \"" +
                      std::string(L::param_names[K]) + "\" has another shape than its parameter");
        S::put(std::get<K>(grads), i, std::get<K>(gp));
      });
    });
  }

  /// The same, handing each layer's parameter gradients to take(i, grads)
  /// as soon as its vjp makes them, last layer first, and keeping none:
  /// e.g. an optimizer's update of that layer while its gradients are in
  /// cache (optimizer::layer_updates), which no later layer's backward
  /// reads (layer i - 1's vjp reads only layer i - 1's parameters). Returns
  /// the input gradient.
  template <class Take>
  requires std::invocable<Take&, std::size_t, const typename L::params&>
  typename L::input operator()(typename L::output gy, Take&& take) {
    claim();
    return backward<true>(std::move(gy), [&](std::size_t i, const typename L::params& gp) { take(i, gp); });
  }

  /// The same without the input gradient, for an input that is data (as
  /// PyTorch makes none for a tensor that does not require one): the first
  /// layer's vjp_params, where the layer has one (graph::layer), skips its
  /// input's gradient and the products that only feed it (a layer x + W2
  /// gelu(W1 x + b1) + b2 saves one of its four backward GEMMs); another
  /// layer's vjp makes it and it is dropped.
  template <class Take>
  requires std::invocable<Take&, std::size_t, const typename L::params&>
  void params_only(typename L::output gy, Take&& take) {
    claim();
    backward<false>(std::move(gy), [&](std::size_t i, const typename L::params& gp) { take(i, gp); });
  }

 private:
  /// A pullback runs once: its saved residuals are consumed.
  void claim() const {
    if (used_) throw error("xshard: scan_layers_vjp: a pullback runs once (its saved residuals are consumed)");
  }

  /// The backward through the layers, last to first, freeing each layer's
  /// saved residuals as it goes: take(i, layer i's parameter gradients),
  /// then the input gradient (without Input: nothing; the first layer runs
  /// its vjp_params where it has one).
  template <bool Input = true, class Take>
  auto backward(typename L::output gy, Take&& take) {
    used_ = true;
    const std::size_t n = saved_.size();
    if (n == 0) throw error("xshard: scan_layers_vjp: an empty stack has no gradients");
    // What each layer is done with goes back to the current workspace, if
    // any (detail::recycle; else it is freed): its residuals once its vjp
    // ran, its gradients once take() had them, the output gradient once
    // the next one is made.
    for (std::size_t i = n; i-- > 0;) {
      const trace_me t("scan_layers/backward", {{"layer", i}});
      const auto p = detail::layer_args<L>(*params_, i);
      // Layer i's vjp on its residuals (remat_residuals restores what the
      // policy did not keep); a graph layer starts its backward from gy itself.
      auto with_residuals = [&](auto vjp) {
        return detail::in_layer(i, "backward", [&] {
          auto res = remat_residuals(*layer_, p, std::move(saved_[i]));
          auto out = vjp(res);
          detail::recycle(std::move(res));
          return out;
        });
      };
      if constexpr (!Input &&
                    requires(const typename L::residuals& res) { layer_->vjp_params(p, res, std::move(gy)); }) {
        if (i == 0) {
          auto gp = with_residuals([&](const auto& res) { return layer_->vjp_params(p, res, std::move(gy)); });
          finish_layer(i, take, gp);
          detail::recycle(std::move(gy));  // empty when the vjp took it
          return;
        }
      }
      auto r = with_residuals([&](const auto& res) { return layer_->vjp(p, res, std::move(gy)); });
      finish_layer(i, take, r.first);
      detail::recycle(std::exchange(gy, std::move(r.second)));  // empty when the vjp took it
    }
    if constexpr (Input)
      return gy;
    else
      detail::recycle(std::move(gy));  // a layer without vjp_params made it
  }

  /// After layer i's vjp: its residuals freed, its gradients to take().
  template <class Take, class GP>
  void finish_layer(std::size_t i, Take& take, GP& gp) {
    detail::recycle(std::move(saved_[i]));  // what remat_residuals left (a recompute's input)
    saved_.pop_back();                      // free as we go
    take(i, std::move(gp));
    detail::recycle(std::move(gp));  // moved-from when take kept them
  }

  /// A gradient stack must stack n layers shaped like the parameters'.
  void check_stack(const stacked_params<L>& grads, std::size_t n) const {
    detail::for_each_param<L>([&](auto k) {
      constexpr std::size_t K = decltype(k)::value;
      using S = detail::stacking<std::tuple_element_t<K, typename L::params>>;
      const auto& g = std::get<K>(grads);
      const auto& p = std::get<K>(*params_);
      if (S::depth(g) != n || S::shape_of_stack(g) != S::shape_of_stack(p))
        throw error("xshard: scan_layers_vjp: the gradient stack's \"" + std::string(L::param_names[K]) +
                    "\" has shape " + detail::shape_text(S::shape_of_stack(g)) + ", the parameters' " +
                    detail::shape_text(S::shape_of_stack(p)));
    });
  }

  const L* layer_;
  const stacked_params<L>* params_;
  std::vector<remat_saved<L>> saved_;
  bool used_ = false;
};

/// The forward through a homogeneous stack, keeping what `policy` says, and
/// its pullback (JAX's vjp): {y, pullback}; pullback(gy) gives the stacked
/// parameter gradients and the input gradient.
template <stackable_layer L>
std::pair<typename L::output, scan_layers_pullback<L>> scan_layers_vjp(const L& l, const stacked_params<L>& params,
                                                                       typename L::input x, remat policy) {
  const std::size_t n = stack_depth<L>(params);
  workspace* const w = workspace::current();
  // The list of the last step's pullback, when a workspace kept it.
  std::vector<remat_saved<L>> saved = w ? w->take_object<std::vector<remat_saved<L>>>() : std::vector<remat_saved<L>>();
  saved.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const trace_me t("scan_layers/forward", {{"layer", i}});
    auto [y, s] =
        detail::in_layer(i, "forward", [&] { return remat_forward(l, detail::layer_args<L>(params, i), x, policy); });
    saved.push_back(std::move(s));
    detail::recycle(std::exchange(x, std::move(y)));  // what a layer kept of its input, it copied
  }
  return {std::move(x), scan_layers_pullback<L>(l, params, std::move(saved))};
}

/// Gradients of sum(gy * scan_layers(l, params, x)): the stacked parameter
/// gradients and the input gradient, under remat policy `policy`.
template <stackable_layer L>
std::pair<stacked_params<L>, typename L::input> scan_layers_vjp(const L& l, const stacked_params<L>& params,
                                                                const typename L::input& x,
                                                                const typename L::output& gy, remat policy) {
  return scan_layers_vjp(l, params, x, policy).second(gy);
}

}  // namespace xshard
