// xshard/optim/optimizer.hpp - SGD (with momentum) and AdamW over a tuple
// of plain or sharded parameter tensors (optim/tensors.hpp), with
// global-norm gradient clipping and an optional ZeRO-1 sharding of the
// optimizer states over a data axis. Every collective a step runs is known
// from the types alone: optimizer<...>::plan<Grads>(clipping) is constexpr.
//
// Example (compiled in tests/compile/doc_optim.cpp):
//   using P = xshard::stacked_params<Block>;                      // or any tuple of tensors
//   xshard::optimizer<xshard::adamw, P> opt({.lr = 1e-3}, params, {.max_grad_norm = 1.0});
//   opt.step(params, grads);                                      // grads: P, or P partial over "data"
//
//   xshard::optimizer<xshard::adamw, P, xshard::zero1<"data">> z({.lr = 1e-3}, params);
//   static_assert(decltype(z)::plan<P>(false).collective_count() == 1);   // the all-gather
//
// Gradients: the same tuple type as the parameters (already reduced, as a
// layer's vjp returns them), or the same tensors partial over one set of
// mesh axes (each device's gradient of its own batch rows: from_local<S,
// Partial>). Partial gradients are reduced in one fused collective: an
// all-reduce over their axes, or with ZeRO-1 a reduce-scatter over the data
// axis, so that each device gets the summed gradient of its slice only.
//
// States (SGD: "momentum" when momentum != 0; AdamW: "m" and "v") have the
// parameters' sharding by default: each device keeps the state of its own
// blocks. ZeRO-1 over axes Z (which no parameter may shard) keeps instead
// 1/|Z| of the flattened local blocks per device: the rank-r member of a Z
// group owns elements [r c, (r + 1) c) of the concatenated blocks, c =
// ceil(n / |Z|); it updates those, then one all-gather over Z hands every
// member the whole updated parameters. state(k) / set_state(k, s) exchange a
// state as a tuple shaped and sharded like the parameters in either mode
// (checkpoints: one all-gather per state with ZeRO-1, none otherwise).
//
// Clipping: with max_grad_norm > 0 the gradients are scaled by
// min(1, max_grad_norm / ||g||) before the update, ||g|| the norm over every
// element of every tensor counted once (a replicated block counts on its
// owner only, optim/tensors.hpp): one all-reduce of one number over the
// whole mesh.
//
// Update rules, element by element (T arithmetic; t = steps taken, from 1):
//   sgd:    g += wd p; b = mu b + g (when mu != 0); g = nesterov ? g + mu b : b; p -= lr g
//   adamw:  p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//           p -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)      (PyTorch's AdamW)
//
// Threads: a step updates all its tensors in one parallel region over the
// thread pool (their elements taken as one range), and layer_updates all of
// a layer's tensors in one: one synchronisation each, not one per tensor.
// The bits do not depend on the thread count.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/fixed_string.hpp"
#include "../core/isa.hpp"
#include "../core/text.hpp"  // detail::shape_text
#include "../core/thread_pool.hpp"
#include "../spmd/collectives.hpp"
#include "../spmd/sharded.hpp"
#include "arch/x86.hpp"
#include "tensors.hpp"

namespace xshard {

namespace detail {

/// The most state tensors an update rule may keep (AdamW's two).
inline constexpr std::size_t max_rule_states = 2;

/// One tensor's part of an update: n elements of p and g and of up to
/// max_rule_states states.
template <class T>
struct update_segment {
  T* p;
  const T* g;
  std::array<T*, max_rule_states> s;
  std::size_t n;
};

/// The segments over the thread pool in one parallel region: one task per
/// thread (as many as parallel_ranges would use for all the elements), and
/// task i runs rule.update_range on share i of every segment (the pool's
/// balanced shares, on 16-element boundaries, as a GEMM's). Several tensors
/// cost one synchronisation, and the same bits as one call per tensor (each
/// element's update is its own).
/// Each tensor is cut by itself, so a task's share of a weight is the block
/// of its rows that a GEMM splitting the gradient's rows over as many
/// threads wrote on the same thread (the pool's task i runs on the same
/// thread call after call): the gradient is read in the core that wrote it.
/// (Cut as one range of all the segments' elements, in four pieces per
/// thread taken as threads came free, train_mlp's weight-gradient GEMMs at
/// two threads on an AVX2 Zen 1 read back lines the update had pulled to
/// the other core: 130 us for M 512 x N 128 x K 64 against 112.)
template <class Rule, class T>
void update_segments(const Rule& rule, std::span<const update_segment<T>> segs, T scale, std::int64_t t) {
  std::size_t total = 0;
  for (const update_segment<T>& sg : segs) total += sg.n;
  std::size_t tasks = total / parallel_grain;
  if (tasks > 1) tasks = std::min(tasks, usable_threads());
  const auto share = [&](std::size_t i, const balanced_shares& parts) {
    for (const update_segment<T>& sg : segs) {
      const auto [a, b] = parts.range(sg.n, i, parallel_unit);
      if (a >= b) continue;
      std::array<T*, max_rule_states> s{};
      for (std::size_t j = 0; j < s.size(); ++j) s[j] = sg.s[j] ? sg.s[j] + a : nullptr;
      rule.update_range(sg.p + a, sg.g + a, scale, s.data(), b - a, t);
    }
  };
  if (tasks <= 1) return share(0, balanced_shares::equal(1));
  thread_pool& pool = default_thread_pool();
  const balanced_shares parts = pool.shares(tasks);
  pool.parallel_for_balanced(parts, [&](std::size_t i) { share(i, parts); });
}

/// One tensor's n elements over the thread pool (Rule::update).
template <class Rule, class T>
void update_over_pool(const Rule& rule, T* p, const T* g, T scale, T* const* s, std::size_t n, std::int64_t t) {
  update_segment<T> one{p, g, {}, n};
  for (std::size_t j = 0; j < rule.states() && j < one.s.size(); ++j) one.s[j] = s[j];
  update_segments(rule, std::span<const update_segment<T>>(&one, 1), scale, t);
}

}  // namespace detail

/// SGD with optional momentum (PyTorch's, dampening 0), L2 weight decay and
/// Nesterov momentum. momentum == 0 keeps no state: p -= lr g exactly.
struct sgd {
  double lr = 0.01;
  double momentum = 0;
  double weight_decay = 0;
  bool nesterov = false;

  static constexpr std::array<std::string_view, 1> state_names{"momentum"};
  std::size_t states() const { return momentum != 0 ? 1 : 0; }

  /// n elements (p, g and the state slices s) updated over the thread pool.
  template <class T>
  void update(T* p, const T* g, T scale, T* const* s, std::size_t n, std::int64_t t) const {
    detail::update_over_pool(*this, p, g, scale, s, n, t);
  }

  /// n elements updated on the calling thread (each element's update is its
  /// own, so any cut of a tensor into calls gives the same bits).
  template <class T>
  void update_range(T* p, const T* g, T scale, T* const* s, std::size_t n, std::int64_t) const {
    const T lr_ = static_cast<T>(lr), mu = static_cast<T>(momentum), wd = static_cast<T>(weight_decay);
    T* const b = momentum != 0 ? s[0] : nullptr;
#if XSHARD_X86_KERNELS
    if constexpr (std::is_same_v<T, float>) {
      const detail::x86::sgd_constants k{scale, lr_, mu, wd, momentum != 0, weight_decay != 0, nesterov};
      switch (active_isa()) {
        case simd_isa::avx512:
          return detail::x86::avx512::sgd_update(p, g, b, n, k);
        case simd_isa::avx2:
          return detail::x86::avx2::sgd_update(p, g, b, n, k);
        case simd_isa::generic:
          break;
      }
    }
#endif
    // The arithmetic of optim/arch/x86.hpp's kernels.
    if (momentum == 0) {
      if (weight_decay == 0) {
        for (std::size_t i = 0; i < n; ++i) p[i] -= lr_ * (g[i] * scale);
      } else {
        for (std::size_t i = 0; i < n; ++i) p[i] -= lr_ * (g[i] * scale + wd * p[i]);
      }
      return;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const T gi = g[i] * scale + wd * p[i];
      b[i] = mu * b[i] + gi;
      p[i] -= lr_ * (nesterov ? gi + mu * b[i] : b[i]);
    }
  }
};

/// AdamW (Loshchilov and Hutter): Adam with bias correction and decoupled
/// weight decay, as torch.optim.AdamW computes it.
struct adamw {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;

  static constexpr std::array<std::string_view, 2> state_names{"m", "v"};
  std::size_t states() const { return 2; }

  /// n elements (p, g and the state slices s) updated over the thread pool.
  /// @pre t >= 1
  template <class T>
  void update(T* p, const T* g, T scale, T* const* s, std::size_t n, std::int64_t t) const {
    detail::update_over_pool(*this, p, g, scale, s, n, t);
  }

  /// n elements updated on the calling thread in one fused pass: p, g and
  /// both states read once, p, m, v written once (each element's update is
  /// its own). @pre t >= 1
  template <class T>
  void update_range(T* p, const T* g, T scale, T* const* s, std::size_t n, std::int64_t t) const {
    T* m = s[0];
    T* v = s[1];
    const double td = static_cast<double>(t);
    const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
    const T c1 = static_cast<T>(1 - beta1), c2 = static_cast<T>(1 - beta2);
    const T step = static_cast<T>(lr / (1 - std::pow(beta1, td)));
    const T root_bc2 = static_cast<T>(std::sqrt(1 - std::pow(beta2, td)));
    const T decay = static_cast<T>(1 - lr * weight_decay);
    const T e = static_cast<T>(eps);
#if XSHARD_X86_KERNELS
    if constexpr (std::is_same_v<T, float>) {
      const detail::x86::adamw_constants k{scale, b1, c1, b2, c2, step, root_bc2, decay, e};
      switch (active_isa()) {
        case simd_isa::avx512:
          return detail::x86::avx512::adamw_update(p, g, m, v, n, k);
        case simd_isa::avx2:
          return detail::x86::avx2::adamw_update(p, g, m, v, n, k);
        case simd_isa::generic:
          break;
      }
    }
#endif
    for (std::size_t i = 0; i < n; ++i) {  // the arithmetic of optim/arch/x86.hpp's kernels
      const T gi = g[i] * scale;
      const T mi = b1 * m[i] + c1 * gi;
      const T vi = b2 * v[i] + c2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * decay - step * mi / (std::sqrt(vi) / root_bc2 + e);
    }
  }
};

/// Optimizer states sharded like the parameters (the default).
struct param_sharded_states {};

/// ZeRO stage 1: the states sharded further over the mesh axes named by
/// Axes ("data"), which no parameter may shard.
template <fixed_string Axes>
struct zero1 {
  static constexpr fixed_string axes = Axes;
};

template <class X>
inline constexpr bool is_zero1_v = false;
template <fixed_string A>
inline constexpr bool is_zero1_v<zero1<A>> = true;

/// Options of an optimizer that are not its update rule.
struct optimizer_options {
  /// Clip the gradients to this global L2 norm (0: no clipping).
  double max_grad_norm = 0;
};

/// The collectives of one optimizer step, from the types alone (per device;
/// axes of size 1 move nothing and count nothing, as in the counters).
struct optimizer_plan {
  std::int64_t gradient_all_reduces = 0;  ///< partial gradients, fused into one buffer
  axis_set gradient_axes = 0;
  std::int64_t reduce_scatters = 0;  ///< ZeRO-1: partial gradients to this device's slice
  std::int64_t all_gathers = 0;      ///< ZeRO-1: the updated slices to every member
  axis_set zero_axes = 0;
  std::int64_t norm_all_reduces = 0;  ///< clipping: the squared norm, one number
  axis_set norm_axes = 0;

  constexpr std::int64_t count(collective_kind k) const {
    switch (k) {
      case collective_kind::all_reduce:
        return gradient_all_reduces + norm_all_reduces;
      case collective_kind::reduce_scatter:
        return reduce_scatters;
      case collective_kind::all_gather:
        return all_gathers;
      default:
        return 0;
    }
  }
  constexpr std::int64_t collective_count() const {
    return gradient_all_reduces + reduce_scatters + all_gathers + norm_all_reduces;
  }
};

namespace detail {

template <Mesh M, fixed_string Axes>
constexpr axis_set zero_axes_of() {
  return parse_axis_set(M::axes, Axes.view());  // an unknown name is a compile error naming it
}

/// Calls f(integral_constant<I>, data, offset in the range, length) for the
/// part of each tensor's local block inside [lo, hi) of the concatenation
/// of the blocks (offsets[i] = where tensor i starts).
template <class P, class F>
void for_each_segment(P& p, const std::vector<std::size_t>& offsets, std::size_t lo, std::size_t hi, F&& f) {
  for_each_index<std::tuple_size_v<std::remove_const_t<P>>>([&](auto i) {
    constexpr std::size_t k = decltype(i)::value;
    using X = std::remove_const_t<std::tuple_element_t<k, std::remove_const_t<P>>>;
    auto& x = std::get<k>(p);
    const std::size_t a = std::max(lo, offsets[k]), b = std::min(hi, offsets[k] + optim_tensor<X>::size(x));
    if (a < b) f(i, optim_tensor<X>::data(x) + (a - offsets[k]), a - lo, b - a);
  });
}

template <class T>
double sum_squares(const T* x, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

}  // namespace detail

/// The global L2 norm of a gradient tuple (reduced tensors: every element
/// counted once; one all-reduce over the whole mesh for sharded tensors).
template <optim_tuple G>
double global_norm(const G& g) {
  static_assert(detail::check_param_tuple<G>());
  static_assert(detail::common_partial<G>() == 0, "xshard: global_norm needs reduced gradients (no partial sums)");
  double ss = 0;
  std::int64_t pos = 0;
  if constexpr (detail::optim_tensor<std::tuple_element_t<0, G>>::is_sharded) pos = std::get<0>(g).device().position;
  detail::for_each_index<std::tuple_size_v<G>>([&](auto i) {
    using X = std::tuple_element_t<decltype(i)::value, G>;
    const auto& x = std::get<decltype(i)::value>(g);
    if (detail::owns_block<X>(pos))
      ss += detail::sum_squares(detail::optim_tensor<X>::data(x), detail::optim_tensor<X>::size(x));
  });
  if constexpr (detail::optim_tensor<std::tuple_element_t<0, G>>::is_sharded) {
    using M = detail::tuple_mesh_t<G>;
    using T = optim_value_t<G>;
    constexpr axis_set all = detail::all_axes<M>();
    if constexpr (all != 0) {
      T v = static_cast<T>(ss);
      const auto& dev = detail::tuple_device(g);
      dev.all_reduce(dev.device, std::span<T>(&v, 1), reduce_op::sum, all);
      ss = static_cast<double>(v);
    }
  }
  return std::sqrt(ss);
}

/// Scales g in place to global norm max_norm if it is larger; returns the
/// norm before clipping. One all-reduce for sharded tensors.
template <optim_tuple G>
double clip_by_global_norm(G& g, double max_norm) {
  if (!(max_norm > 0))
    throw error("xshard: clip_by_global_norm: max_norm must be > 0, not " + std::to_string(max_norm));
  const double norm = global_norm(g);
  if (norm > max_norm) {
    using T = optim_value_t<G>;
    const T s = static_cast<T>(max_norm / norm);
    detail::for_each_index<std::tuple_size_v<G>>([&](auto i) {
      using X = std::tuple_element_t<decltype(i)::value, G>;
      auto& x = std::get<decltype(i)::value>(g);
      T* d = detail::optim_tensor<X>::data(x);
      for (std::size_t k = 0; k < detail::optim_tensor<X>::size(x); ++k) d[k] *= s;
    });
  }
  return norm;
}

/// What an update rule provides, as sgd and adamw do: states() (how many
/// state tensors it keeps, at most detail::max_rule_states: two),
/// state_names (their names, for checkpoints) and update_range(p, g, scale,
/// s, n, t) const, the update of n elements on the calling thread (p, g and
/// the states' slices s; t the step, from 1), each element's update its
/// own. The optimizer cuts the elements of all tensors over the thread pool
/// and calls update_range on the pieces.
template <class Rule, class T>
concept update_rule = requires(const Rule& r, T* p, const T* g, T scale, T* const* s, std::size_t n, std::int64_t t) {
  { r.states() } -> std::convertible_to<std::size_t>;
  Rule::state_names;
  r.update_range(p, g, scale, s, n, t);
};

/// An optimizer: update Rule (sgd, adamw, or a type that models
/// update_rule) over the parameter tuple P, the states sharded like P
/// (param_sharded_states) or by ZeRO-1 (zero1<"axes">).
template <class Rule, optim_tuple P, class States = param_sharded_states>
class optimizer {
  static_assert(detail::check_param_tuple<P>());
  static_assert(update_rule<Rule, optim_value_t<P>>,
                "xshard: optimizer: the update rule needs states(), state_names and update_range(p, g, scale, "
                "states, n, t) const (n elements on the calling thread), as xshard::sgd and xshard::adamw have");
  static_assert(detail::common_partial<P>() == 0, "xshard: parameters cannot be partial sums");

 public:
  using params_type = P;
  using value_type = optim_value_t<P>;
  using rule_type = Rule;
  static constexpr bool sharded_tuple = detail::optim_tensor<std::tuple_element_t<0, P>>::is_sharded;
  static constexpr bool zero = is_zero1_v<States>;
  static_assert(!zero || sharded_tuple, "xshard: zero1 shards states over a mesh axis: the parameters must be sharded");

 private:
  using T = value_type;
  static constexpr std::size_t N = std::tuple_size_v<P>;
  static constexpr axis_set zaxes = [] {
    if constexpr (zero)
      return detail::zero_axes_of<detail::tuple_mesh_t<P>, States::axes>();
    else
      return axis_set{0};
  }();
  static constexpr bool zero_params_replicated = [] {
    bool ok = true;
    if constexpr (zero)
      detail::for_each_index<N>([&](auto i) {
        ok = ok && (sharding_axes(std::tuple_element_t<decltype(i)::value, P>::resolved) & zaxes) == 0;
      });
    return ok;
  }();
  static_assert(
      zero_params_replicated,
      "xshard: zero1<axes>: a parameter is sharded over the ZeRO axes; its blocks would differ inside a group");

 public:
  /// The collectives of step(params, grads) for gradients of type G.
  template <class G>
  static constexpr optimizer_plan plan(bool clipping) {
    optimizer_plan p;
    if constexpr (sharded_tuple) {
      using M = detail::tuple_mesh_t<P>;
      constexpr axis_set gp = detail::common_partial<G>();
      if constexpr (zero) {
        constexpr axis_set z = detail::nontrivial<M>(zaxes);
        p.zero_axes = z;
        if (z != 0) {
          p.all_gathers = 1;
          if (gp == zaxes) p.reduce_scatters = 1;
        }
      } else if (detail::nontrivial<M>(gp) != 0) {
        p.gradient_all_reduces = 1;
        p.gradient_axes = detail::nontrivial<M>(gp);
      }
      if (clipping && detail::all_axes<M>() != 0) {
        p.norm_all_reduces = 1;
        p.norm_axes = detail::all_axes<M>();
      }
    }
    return p;
  }

  optimizer(Rule rule, const P& params, optimizer_options options = {}) : rule_(rule), options_(options) {
    if (options_.max_grad_norm < 0)
      throw error("xshard: optimizer: max_grad_norm must be >= 0, not " + std::to_string(options_.max_grad_norm));
    if (rule_.states() > detail::max_rule_states)
      throw error("xshard: optimizer: an update rule keeps at most " + std::to_string(detail::max_rule_states) +
                  " states, this one says " + std::to_string(rule_.states()));
    if constexpr (zero) {
      const auto& dev = detail::tuple_device(params);
      const auto shape = std::get<0>(params).mesh_shape;
      group_ = group_size(shape, zaxes);
      rank_ = group_rank(shape, zaxes, dev.position);
      std::size_t n = 0;
      detail::for_each_index<N>([&](auto i) {
        offsets_.push_back(n);
        n += detail::optim_tensor<std::tuple_element_t<decltype(i)::value, P>>::size(
            std::get<decltype(i)::value>(params));
      });
      total_ = n;
      chunk_ = (n + static_cast<std::size_t>(group_) - 1) / static_cast<std::size_t>(group_);
      lo_ = std::min(n, static_cast<std::size_t>(rank_) * chunk_);
      hi_ = std::min(n, lo_ + chunk_);
      for (std::size_t k = 0; k < rule_.states(); ++k) flat_states_.emplace_back(hi_ - lo_, T(0));
      detail::for_each_index<N>([&](auto i) {
        const auto& x = std::get<decltype(i)::value>(params);
        shapes_.emplace_back(x.global_shape().begin(), x.global_shape().end());
      });
      dev_ = dev;
    } else {
      for (std::size_t k = 0; k < rule_.states(); ++k) {
        P s = params;
        detail::for_each_index<N>([&](auto i) {
          using X = std::tuple_element_t<decltype(i)::value, P>;
          auto& x = std::get<decltype(i)::value>(s);
          std::fill_n(detail::optim_tensor<X>::data(x), detail::optim_tensor<X>::size(x), T(0));
        });
        states_.push_back(std::move(s));
      }
    }
  }

  /// One update of `params` by `grads` (P, or P partial over one axis set;
  /// with ZeRO-1 that set must be the ZeRO axes). Returns the gradients'
  /// global norm when clipping (0 otherwise).
  template <class G>
  double step(P& params, const G& grads) {
    static_assert(std::is_same_v<reduced_tuple_t<G>, P>,
                  "xshard: optimizer::step: the gradients must have the parameters' tensors (same types, shapes and "
                  "specs; partial sums allowed)");
    constexpr axis_set gp = detail::common_partial<G>();
    static_assert(gp != ~axis_set{0}, "xshard: the gradients are partial sums over different mesh axes");
    static_assert(!zero || gp == 0 || gp == zaxes,
                  "xshard: with zero1<axes> the gradients must be reduced or partial over exactly the ZeRO axes");
    check_shapes(params, grads);
    ++t_;
    if constexpr (zero) {
      return zero_step(params, grads);
    } else if constexpr (gp != 0) {
      const P reduced = detail::reduce_partial(grads);
      return local_step(params, reduced);
    } else {
      return local_step(params, grads);
    }
  }

  /// The update of stacked parameters one layer at a time, for a backward
  /// that hands over each layer's parameter gradients as soon as it makes
  /// them (PyTorch's optimizer in backward):
  ///
  ///   (void)pullback(gy, opt.layer_updates(params));   // scan_layers_vjp's pullback
  ///
  /// Every tensor of P is a stack (a leading layer dim, unsharded); the
  /// returned callable takes (l, g), g a tuple of layer l's gradients, and
  /// updates layer l of every tensor and state. Each element gets the
  /// arithmetic of step(params, grads) on the stacked gradients, bit for
  /// bit, while the layer's gradients and parameters are still in cache,
  /// and no gradient stack is written. One call of layer_updates is one
  /// step (hand every layer over once before the next). Not with gradient
  /// clipping, whose norm needs every gradient first (an xshard::error), nor
  /// with ZeRO-1 (a compile error); the gradients must be reduced.
  class layer_update {
   public:
    template <class G>
    void operator()(std::size_t layer, const G& grads) const {
      opt_->update_layer(*params_, layer, grads);
    }

   private:
    friend class optimizer;
    layer_update(optimizer& o, P& p) : opt_(&o), params_(&p) {}
    optimizer* opt_;
    P* params_;
  };
  layer_update layer_updates(P& params) {
    static_assert(!zero,
                  "xshard: optimizer::layer_updates: ZeRO-1 updates the flattened blocks of every tensor at once");
    if (options_.max_grad_norm > 0)
      throw error("xshard: optimizer::layer_updates: gradient clipping needs every gradient before the first update");
    ++t_;
    return layer_update(*this, params);
  }

  /// Steps taken (AdamW's bias correction uses it).
  std::int64_t steps() const { return t_; }
  void set_steps(std::int64_t t) {
    if (t < 0) throw error("xshard: optimizer::set_steps: a step count cannot be negative (" + std::to_string(t) + ")");
    t_ = t;
  }
  const Rule& rule() const { return rule_; }
  Rule& rule() { return rule_; }  ///< e.g. a learning-rate schedule
  const optimizer_options& options() const { return options_; }

  std::size_t state_count() const { return rule_.states(); }
  std::string_view state_name(std::size_t k) const { return Rule::state_names.at(k); }

  /// State k shaped and sharded like the parameters (ZeRO-1: one
  /// all-gather over the ZeRO axes, collectively on every device).
  P state(std::size_t k) const {
    check_state_index(k, "state");
    if constexpr (zero) {
      std::vector<T> full(chunk_ * static_cast<std::size_t>(group_), T(0));
      std::copy(flat_states_[k].begin(), flat_states_[k].end(), full.begin() + static_cast<std::ptrdiff_t>(lo_));
      dev_.all_gather(dev_.device, std::span<const T>(full.data() + static_cast<std::size_t>(rank_) * chunk_, chunk_),
                      std::span<T>(full), zaxes);
      return [&]<std::size_t... I>(std::index_sequence<I...>) { return P{make_block<I>(full.data() + offsets_[I])...}; }
      (std::make_index_sequence<N>{});
    } else {
      return states_[k];
    }
  }
  /// Replaces state k (e.g. from a checkpoint): a tuple shaped like the
  /// parameters (ZeRO-1: each device keeps its slice, no communication).
  void set_state(std::size_t k, const P& s) {
    check_state_index(k, "set_state");
    if constexpr (zero) {
      detail::for_each_segment(s, offsets_, lo_, hi_, [&](auto, const T* src, std::size_t at, std::size_t len) {
        std::copy_n(src, len, flat_states_[k].data() + at);
      });
    } else {
      check_shapes(states_[k], s);
      states_[k] = s;
    }
  }

 private:
  void check_state_index(std::size_t k, std::string_view what) const {
    if (k >= rule_.states())
      throw error("xshard: optimizer::" + std::string(what) + "(" + std::to_string(k) + "): the rule keeps " +
                  std::to_string(rule_.states()) + " states");
  }

  template <class A, class B>
  static void check_shapes(const A& a, const B& b) {
    detail::for_each_index<N>([&](auto i) {
      constexpr std::size_t k = decltype(i)::value;
      const auto& x = std::get<k>(a);
      const auto& y = std::get<k>(b);
      bool same;
      if constexpr (sharded_tuple)
        same = x.global_shape() == y.global_shape();
      else
        same = x.shape() == y.shape();
      if (!same)
        throw error("xshard: optimizer: tensor " + std::to_string(k) +
                    " of the gradients (or state) has another shape than the parameter");
    });
  }

  template <std::size_t I>
  std::tuple_element_t<I, P> make_block(const T* src) const {
    using X = std::tuple_element_t<I, P>;
    constexpr std::size_t R = X::rank;
    std::array<std::int64_t, R> g{};
    for (std::size_t d = 0; d < R; ++d) g[d] = shapes_[I][d];
    const auto sl = local_slices(X::mesh_shape, X::resolved, g, dev_.position);
    std::array<std::size_t, R> ext{};
    for (std::size_t d = 0; d < R; ++d) ext[d] = static_cast<std::size_t>(sl[d].size());
    xt::xtensor<T, R> block(ext);
    std::copy_n(src, block.size(), block.data());
    return X(dev_, g, std::move(block));
  }

  /// min(1, max / norm) from the squared norm summed over the mesh.
  T clip_scale(double local_squares, double& norm) const {
    double ss = local_squares;
    if constexpr (sharded_tuple) {
      constexpr axis_set all = detail::all_axes<detail::tuple_mesh_t<P>>();
      if constexpr (all != 0) {
        T v = static_cast<T>(ss);
        dev_or_first_.all_reduce(dev_or_first_.device, std::span<T>(&v, 1), reduce_op::sum, all);
        ss = static_cast<double>(v);
      }
    }
    norm = std::sqrt(ss);
    return norm > options_.max_grad_norm ? static_cast<T>(options_.max_grad_norm / norm) : T(1);
  }

  template <class G>
  double local_step(P& params, const G& grads) {
    T scale = 1;
    double norm = 0;
    if (options_.max_grad_norm > 0) {
      std::int64_t pos = 0;
      if constexpr (sharded_tuple) {
        dev_or_first_ = detail::tuple_device(params);
        pos = dev_or_first_.position;
      }
      double ss = 0;
      detail::for_each_index<N>([&](auto i) {
        using X = std::tuple_element_t<decltype(i)::value, P>;
        const auto& g = std::get<decltype(i)::value>(grads);
        if (detail::owns_block<X>(pos))
          ss += detail::sum_squares(detail::optim_tensor<X>::data(g), detail::optim_tensor<X>::size(g));
      });
      scale = clip_scale(ss, norm);
    }
    std::array<detail::update_segment<T>, N> segs{};  // every tensor in one parallel region
    detail::for_each_index<N>([&](auto i) {
      constexpr std::size_t k = decltype(i)::value;
      using X = std::tuple_element_t<k, P>;
      auto& p = std::get<k>(params);
      segs[k] = {detail::optim_tensor<X>::data(p),
                 detail::optim_tensor<X>::data(std::get<k>(grads)),
                 {},
                 detail::optim_tensor<X>::size(p)};
      for (std::size_t j = 0; j < states_.size(); ++j)
        segs[k].s[j] = detail::optim_tensor<X>::data(std::get<k>(states_[j]));
    });
    detail::update_segments(rule_, std::span<const detail::update_segment<T>>(segs), scale, t_);
    return norm;
  }

  /// Layer l of every stacked tensor (and state) updated by layer l's
  /// gradients (layer_updates).
  template <class G>
  void update_layer(P& params, std::size_t l, const G& grads) {
    static_assert(std::tuple_size_v<G> == N,
                  "xshard: optimizer::layer_updates: a layer's gradients are one tensor per parameter stack");
    std::array<detail::update_segment<T>, N> segs{};  // the layer's tensors in one parallel region
    detail::for_each_index<N>([&](auto i) {
      constexpr std::size_t k = decltype(i)::value;
      using X = std::tuple_element_t<k, P>;
      using Y = std::remove_cvref_t<std::tuple_element_t<k, G>>;
      using PX = detail::optim_tensor<X>;
      using PY = detail::optim_tensor<Y>;
      static_assert(PY::valid && std::is_same_v<typename PY::value_type, T> && PY::partial == 0,
                    "xshard: optimizer::layer_updates: a layer's gradient must be a reduced tensor of the parameters' "
                    "value type");
      if constexpr (PX::is_sharded)
        static_assert(
            dim_tiles(X::mesh_shape, X::resolved.dims[0]) == 1,
            "xshard: optimizer::layer_updates: a stacked parameter's layer dim (dim 0) is sharded: a device's block "
            "would not hold every layer");
      auto& p = std::get<k>(params);
      const auto& g = std::get<k>(grads);
      const auto& stack = PX::block(p).shape();
      const auto& layer = PY::block(g).shape();
      bool fits = layer.size() + 1 == stack.size() && l < stack[0];
      for (std::size_t d = 0; fits && d < layer.size(); ++d) fits = layer[d] == stack[d + 1];
      if (!fits)
        throw error("xshard: optimizer::layer_updates: layer " + std::to_string(l) + "'s gradient of tensor " +
                    std::to_string(k) + " has shape " + detail::shape_text(layer) + ", the stack " +
                    detail::shape_text(stack));
      const std::size_t n = PY::size(g), at = l * n;
      segs[k] = {PX::data(p) + at, PY::data(g), {}, n};
      for (std::size_t j = 0; j < states_.size(); ++j) segs[k].s[j] = PX::data(std::get<k>(states_[j])) + at;
    });
    detail::update_segments(rule_, std::span<const detail::update_segment<T>>(segs), T(1), t_);
  }

  template <class G>
  double zero_step(P& params, const G& grads) {
    constexpr axis_set gp = detail::common_partial<G>();
    const std::size_t mine = hi_ - lo_;
    const std::size_t total = chunk_ * static_cast<std::size_t>(group_);
    std::vector<T> g(chunk_, T(0));
    if constexpr (gp != 0) {
      std::vector<T> send(total, T(0));
      detail::for_each_segment(grads, offsets_, 0, total_, [&](auto, const T* src, std::size_t at, std::size_t len) {
        std::copy_n(src, len, send.data() + at);
      });
      dev_.reduce_scatter(dev_.device, std::span<const T>(send), std::span<T>(g), reduce_op::sum, zaxes);
    } else {
      detail::for_each_segment(grads, offsets_, lo_, hi_, [&](auto, const T* src, std::size_t at, std::size_t len) {
        std::copy_n(src, len, g.data() + at);
      });
    }
    T scale = 1;
    double norm = 0;
    if (options_.max_grad_norm > 0) {
      // Each element of a Z group's blocks lies in exactly one member's
      // slice; over the other replicating axes the block's owner counts it.
      double ss = 0;
      detail::for_each_segment(grads, offsets_, lo_, hi_, [&](auto i, const T*, std::size_t at, std::size_t len) {
        using X = std::tuple_element_t<decltype(i)::value, P>;
        if (detail::owns_block<X>(dev_.position, zaxes)) ss += detail::sum_squares(g.data() + at, len);
      });
      dev_or_first_ = dev_;
      scale = clip_scale(ss, norm);
    }
    std::vector<T> full(total, T(0));
    T* p = full.data() + static_cast<std::size_t>(rank_) * chunk_;
    detail::for_each_segment(params, offsets_, lo_, hi_, [&](auto, const T* src, std::size_t at, std::size_t len) {
      std::copy_n(src, len, p + at);
    });
    std::array<T*, detail::max_rule_states> s{};
    for (std::size_t j = 0; j < flat_states_.size(); ++j) s[j] = flat_states_[j].data();
    rule_.update(p, g.data(), scale, s.data(), mine, t_);
    dev_.all_gather(dev_.device, std::span<const T>(p, chunk_), std::span<T>(full), zaxes);
    detail::for_each_segment(params, offsets_, 0, total_, [&](auto i, T* dst, std::size_t at, std::size_t len) {
      (void)i;
      std::copy_n(full.data() + at, len, dst);
    });
    return norm;
  }

  Rule rule_;
  optimizer_options options_;
  std::int64_t t_ = 0;
  std::vector<P> states_;  // param-sharded states
  // ZeRO-1
  std::vector<std::vector<T>> flat_states_;
  std::vector<std::size_t> offsets_;
  std::vector<std::vector<std::int64_t>> shapes_;
  std::size_t total_ = 0, chunk_ = 0, lo_ = 0, hi_ = 0;
  std::int64_t group_ = 1, rank_ = 0;
  device_ref<T> dev_{};
  device_ref<T> dev_or_first_{};
};

}  // namespace xshard
