// xshard/graph/ops.hpp - what each graph op does on values: its evaluation,
// its vjp (the contribution to one operand's gradient), and, on sharded
// values, the collectives both run (compile-time counts from the existing
// plans). One rule per op, for plain xtensor values and for sharded<...>
// values inside an SPMD body; the graph (graph.hpp) calls them in order.
//
//   rule<Op>::eval(a...)                  the op's value (operands may be
//                                         rvalues: their buffers are reused)
//   rule<Op>::vjp<K>(g, c)                operand K's gradient contribution
//                                         (g is an rvalue for the last
//                                         operand asked, K = 0: reusable);
//                                         c holds the output and operand
//                                         values the op declared it needs
//                                         (graph::needs_*) and every shape
//   rule<Op>::forward_collectives<Y, A...>(), backward_collectives<...>()
//                                         the collectives each device runs,
//                                         in order (node_collectives)
//
// Broadcasting (+, -, *) follows numpy's trailing-dim rule on plain values;
// on sharded values both operands have one layout, or the second is a
// rank-1 tensor added along the first's last dim (a bias) laid out like it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xtensor.hpp>

#include "../core/error.hpp"
#include "../core/isa.hpp"  // active_isa: the bias rows' kernel
#include "../core/static_vector.hpp"
#include "../core/tensor_traits.hpp"
#include "../core/text.hpp"
#include "../core/workspace.hpp"  // fresh_tensor: results from the current workspace
#include "../einsum/einsum.hpp"
#include "../einsum/grad.hpp"
#include "../ops/arch/x86.hpp"           // binary_row: bias rows on AVX-512 / AVX2
#include "../ops/composite_support.hpp"  // rows_per_grain: bias rows split over the pool
#include "../ops/gelu.hpp"
#include "../ops/layer_norm.hpp"
#include "../ops/rms_norm.hpp"
#include "../ops/softmax.hpp"
#include "../spmd/einsum.hpp"
#include "../spmd/sharded.hpp"
#include "../trace/trace.hpp"
#include "node.hpp"

namespace xshard::graph {

/// A value's shape, kept for every node so a vjp that needs only an
/// operand's shape (a broadcast sum) does not keep the operand.
struct shape_rec {
  std::array<std::size_t, 8> extents{};
  std::size_t rank = 0;
  friend bool operator==(const shape_rec&, const shape_rec&) = default;
};

template <class V>
shape_rec shape_of(const V& v) {
  shape_rec s;
  if constexpr (Sharded<V>) {
    const auto& sh = v.local().shape();
    s.rank = sh.size();
    std::copy(sh.begin(), sh.end(), s.extents.begin());
  } else {
    const auto& sh = v.shape();
    s.rank = sh.size();
    std::copy(sh.begin(), sh.end(), s.extents.begin());
  }
  return s;
}

/// What a vjp sees: the output (if kept), the operands (if kept) and all
/// their shapes.
template <class Y, class... A>
struct vjp_context {
  const Y* y = nullptr;
  std::tuple<const A*...> a;
  shape_rec y_shape;
  std::array<shape_rec, sizeof...(A)> a_shapes;
  template <std::size_t K>
  const auto& operand() const {
    return *std::get<K>(a);
  }
  /// f(operand 0, ..., operand N - 1): an einsum's operands, before a fused
  /// bias.
  template <std::size_t N, class F>
  decltype(auto) first_operands(F&& f) const {
    return [&]<std::size_t... I>(std::index_sequence<I...>)->decltype(auto) { return f(operand<I>()...); }
    (std::make_index_sequence<N>{});
  }
};

namespace detail {

template <class V>
using element_t = typename std::remove_cvref_t<V>::value_type;
template <class V>
inline constexpr std::size_t rank_v = [] {
  if constexpr (Sharded<V>)
    return std::remove_cvref_t<V>::rank;
  else
    return static_cast<std::size_t>(tensor_rank_v<std::remove_cvref_t<V>>);
}();

template <class V>
using plain_t = xt::xtensor<element_t<V>, rank_v<V>>;

/// e as a plain tensor of V's value type and rank: itself when it is one
/// (an rvalue), else evaluated into a fresh tensor (the current workspace's,
/// if any: core/workspace.hpp).
template <class V, class E>
plain_t<V> to_plain(E&& e) {
  return ::xshard::detail::owned_or_fresh<element_t<V>, rank_v<V>>(std::forward<E>(e));
}

/// g (numpy-broadcast from shape s) summed back to shape s, as a tensor of
/// rank R.
template <std::size_t R, class G>
xt::xtensor<element_t<G>, R> sum_to(G&& g, const shape_rec& s) {
  using T = element_t<G>;
  const std::size_t gr = g.dimension();
  bool same = gr == R;
  for (std::size_t d = 0; same && d < R; ++d) same = g.shape()[d] == s.extents[d];
  if (same) {
    if constexpr (!std::is_lvalue_reference_v<G> && std::is_same_v<std::remove_cvref_t<G>, xt::xtensor<T, R>>)
      return std::move(g);  // the gradient passes through
    else
      return ::xshard::detail::fresh_copy<T, R>(g);
  }
  // g must be s broadcast: never index past out for any other shape.
  bool broadcast = gr >= R;
  for (std::size_t d = 0; broadcast && d < R; ++d)
    broadcast = s.extents[R - 1 - d] == 1 || s.extents[R - 1 - d] == g.shape()[gr - 1 - d];
  if (!broadcast)
    throw error("xshard::graph: a gradient of shape " + ::xshard::detail::shape_text(g.shape()) +
                " is not the broadcast of " + ::xshard::detail::shape_text(std::span(s.extents.data(), R)));
  // Each element of g adds into the element of s it was broadcast from:
  // leading dims of g and the size-1 dims of s are summed.
  std::array<std::size_t, R> shape{};
  std::copy_n(s.extents.begin(), R, shape.begin());
  xt::xtensor<T, R> out = ::xshard::detail::fresh_tensor<T, R>(shape);
  out.fill(T(0));
  const auto& gc = xt::eval(g);  // g itself when it is a container: no copy
  if (std::find(shape.begin(), shape.end(), std::size_t(1)) == shape.end()) {
    // Only leading dims broadcast (a bias): sum rows of out.size() values,
    // column ranges over the thread pool (each column summed in row order,
    // whatever the split).
    const std::size_t n = out.size(), rows = n ? gc.size() / n : 0;
    T* const o = out.data();
    [[maybe_unused]] const simd_isa isa = active_isa();
    parallel_ranges(n, ::xshard::detail::rows_per_grain(rows), [&](std::size_t j0, std::size_t j1) {
#if XSHARD_X86_KERNELS
      if constexpr (std::is_same_v<T, float>) {  // the same sums in the same order, on wider vectors
        if (isa != simd_isa::generic) {
          for (std::size_t r = 0; r < rows; ++r)
            ::xshard::detail::x86::binary_row(isa, 0, o + j0, gc.data() + r * n + j0, o + j0, j1 - j0);
          return;
        }
      }
#endif
      for (std::size_t r = 0; r < rows; ++r) {
        const T* const row = gc.data() + r * n;
        for (std::size_t j = j0; j < j1; ++j) o[j] += row[j];
      }
    });
    return out;
  }
  std::vector<std::size_t> step(gr, 0);  // out's stride along each dim of g
  for (std::size_t d = 0, st = 1; d < R; ++d) {
    const std::size_t od = R - 1 - d;
    if (s.extents[od] != 1) step[gr - 1 - d] = st;
    st *= s.extents[od];
  }
  std::vector<std::size_t> idx(gr, 0);
  std::size_t at = 0;
  for (const T& v : gc) {
    out.data()[at] += v;
    for (std::size_t d = gr; d-- > 0;) {  // the next index of g, row-major
      at += step[d];
      if (++idx[d] < g.shape()[d]) break;
      at -= step[d] * idx[d];
      idx[d] = 0;
    }
  }
  return out;
}

/// numpy's rule: trailing dims equal or 1; an xshard::error naming both
/// shapes otherwise.
template <class SA, class SB>
void check_broadcast(const SA& a, const SB& b, std::string_view op) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t d = 1; d <= n; ++d) {
    const std::size_t x = a[a.size() - d], y = b[b.size() - d];
    if (x != y && x != 1 && y != 1)
      throw error("xshard::graph: " + std::string(op) + " of shapes " + ::xshard::detail::shape_text(a) + " and " +
                  ::xshard::detail::shape_text(b) + " does not broadcast (dim -" + std::to_string(d) + ": " +
                  std::to_string(x) + " vs " + std::to_string(y) + ")");
  }
}

/// x op y: two elements, or two xtensor expressions (of lvalues: the
/// expression refers to them).
template <binary B, class X, class Y>
constexpr auto apply_binary(X&& x, Y&& y) {
  if constexpr (B == binary::add)
    return std::forward<X>(x) + std::forward<Y>(y);
  else if constexpr (B == binary::sub)
    return std::forward<X>(x) - std::forward<Y>(y);
  else if constexpr (B == binary::mul)
    return std::forward<X>(x) * std::forward<Y>(y);
  else
    return std::forward<X>(x) / std::forward<Y>(y);
}

/// n elements over the thread pool in element ranges [lo, hi): for floats
/// on a CPU with AVX2 or AVX-512, x86(isa, lo, hi) (the widest vectors; a
/// generic lambda, instantiated for floats only); scalar(lo, hi) otherwise.
/// The skeleton of binary_elements and scale_elements.
template <class T, class X86, class Scalar>
void elements_over_pool(std::size_t n, [[maybe_unused]] const X86& x86, const Scalar& scalar) {
  [[maybe_unused]] const simd_isa isa = active_isa();
  parallel_ranges(
      n, ::xshard::detail::parallel_grain,
      [&](std::size_t lo, std::size_t hi) {
#if XSHARD_X86_KERNELS
        if constexpr (std::is_same_v<T, float>) {
          if (isa != simd_isa::generic) return x86(isa, lo, hi);
        }
#endif
        scalar(lo, hi);
      },
      ::xshard::detail::parallel_unit);
}

/// out[i] = a[i] op b[i] for i < n (out may be a or b): element ranges over
/// the thread pool, floats on the CPU's widest vectors (each element's
/// correctly rounded operation, so the same bits as a scalar loop).
template <binary B, class T>
void binary_elements(T* out, const T* a, const T* b, std::size_t n) {
  elements_over_pool<T>(
      n,
      [&]([[maybe_unused]] auto isa, [[maybe_unused]] std::size_t lo, [[maybe_unused]] std::size_t hi) {
#if XSHARD_X86_KERNELS
        constexpr int op = B == binary::add ? 0 : B == binary::sub ? 1 : B == binary::mul ? 2 : 3;
        ::xshard::detail::x86::binary_row(isa, op, a + lo, b + lo, out + lo, hi - lo);
#endif
      },
      [&](std::size_t lo, std::size_t hi) {
        for (std::size_t i = lo; i < hi; ++i) out[i] = apply_binary<B>(a[i], b[i]);
      });
}

/// out[i] += c[i] for i < n (a gradient's second contribution).
template <class T>
void add_in_place(T* out, const T* c, std::size_t n) {
  binary_elements<binary::add>(out, out, c, n);
}

/// out[i] = a[i] * c for i < n (out may be a): as binary_elements, against
/// a row of c.
template <class T>
void scale_elements(T* out, const T* a, T c, std::size_t n) {
  elements_over_pool<T>(
      n,
      [&]([[maybe_unused]] auto isa, [[maybe_unused]] std::size_t lo, [[maybe_unused]] std::size_t hi) {
#if XSHARD_X86_KERNELS
        constexpr std::size_t chunk = 256;
        alignas(64) T row[chunk];
        std::fill_n(row, chunk, c);
        for (std::size_t i = lo; i < hi; i += chunk)
          ::xshard::detail::x86::binary_row(isa, 2, a + i, row, out + i, std::min(chunk, hi - i));
#endif
      },
      [&](std::size_t lo, std::size_t hi) {
        for (std::size_t i = lo; i < hi; ++i) out[i] = a[i] * c;
      });
}

/// out[i, j] = a[i, j] op b[j] for rows x n contiguous values (out may be a);
/// rows split over the thread pool (each element is its own: any split gives
/// the same result).
template <binary B, class T, class V>
void bias_rows(T* out, const T* a, const V& b, std::size_t rows, std::size_t n) {
  const auto run = [&](const T* bp) {
#if XSHARD_X86_KERNELS
    // Floats on the CPU's widest vectors (ops/arch/x86.hpp): the same
    // correctly rounded operation per element, so the same bits.
    if constexpr (std::is_same_v<T, float>) {
      const simd_isa isa = active_isa();
      if (isa != simd_isa::generic) {
        constexpr int op = B == binary::add ? 0 : B == binary::sub ? 1 : B == binary::mul ? 2 : 3;
        parallel_ranges(rows, ::xshard::detail::rows_per_grain(n), [&](std::size_t r0, std::size_t r1) {
          for (std::size_t i = r0; i < r1; ++i)
            ::xshard::detail::x86::binary_row(isa, op, a + i * n, bp, out + i * n, n);
        });
        return;
      }
    }
#endif
    parallel_ranges(rows, ::xshard::detail::rows_per_grain(n), [&](std::size_t r0, std::size_t r1) {
      for (std::size_t i = r0; i < r1; ++i) {
        T* const o = out + i * n;
        const T* const x = a + i * n;
        for (std::size_t j = 0; j < n; ++j) o[j] = apply_binary<B>(x[j], bp[j]);
      }
    });
  };
  if constexpr (std::is_same_v<V, xt::xtensor<T, 1>>) {
    run(b.data());
  } else if constexpr (requires {
                         b.data() + b.data_offset();
                         b.strides()[0];
                       }) {
    if (b.strides()[0] == 1 || n <= 1) {  // a row of a stack (scan_layers' parameter views): read in place
      run(b.data() + b.data_offset());
      return;
    }
    const xt::xtensor<T, 1> contiguous(b);
    run(contiguous.data());
  } else {
    const xt::xtensor<T, 1> contiguous(b);
    run(contiguous.data());
  }
}

/// a op b row by row (bias_rows) for a plain tensor a whose last extent is
/// b's size: into a fresh tensor when a is an lvalue, into a's own buffer
/// when it is a temporary. The one path of plain and sharded bias adds (a
/// sharded one passes its blocks).
template <binary B, class A, class V>
auto bias_applied(A&& a, const V& b) {
  using R = xt::xtensor<typename std::remove_cvref_t<A>::value_type, tensor_rank_v<A>>;  // a view's: a fresh tensor
  const std::size_t n = a.shape()[a.dimension() - 1];
  const std::size_t rows = a.size() / std::max<std::size_t>(n, 1);
  if constexpr (std::is_lvalue_reference_v<A>) {
    R out = ::xshard::detail::fresh_tensor<typename R::value_type, tensor_rank_v<A>>(a.shape());
    bias_rows<B>(out.data(), a.data(), b, rows, n);
    return out;
  } else {
    R r = std::move(a);
    bias_rows<B>(r.data(), r.data(), b, rows, n);
    return r;
  }
}

/// x * w with x a plain tensor of rank >= 2 and w a rank-1 operand along
/// its last dim (a norm's gain), g a plain tensor of x's rank.
template <class G, class A0, class A1>
constexpr bool is_gain_product() {
  using T = element_t<A0>;
  constexpr std::size_t R = rank_v<A0>;
  return rank_v<A1> == 1 && R >= 2 && std::is_same_v<std::remove_cvref_t<A0>, xt::xtensor<T, R>> &&
         std::is_same_v<std::remove_cvref_t<G>, xt::xtensor<element_t<G>, R>>;
}

/// The vjp of x * w (is_gain_product) row by row: g * w for x (K = 0), the
/// column sums of g * x for w (K = 1); nullopt when the shapes are not the
/// plain case (the general broadcast path then reports or handles them).
template <std::size_t K, class G, class X, class W>
auto gain_product_vjp(G&& g, const X& x, const W& w) {
  using T = element_t<X>;
  using Out = std::conditional_t<K == 0, std::remove_cvref_t<G>, xt::xtensor<T, 1>>;
  const std::size_t n = x.shape()[rank_v<X> - 1];
  if (!(g.shape() == x.shape() && w.size() == n && n > 0)) return std::optional<Out>{};
  if constexpr (K == 0) {
    Out r = std::forward<G>(g);  // only once the shapes are known to fit: the caller's fallback still has g
    bias_rows<binary::mul>(r.data(), r.data(), w, r.size() / n, n);
    return std::optional<Out>(std::move(r));
  } else {
    Out r = ::xshard::detail::fresh_tensor<T, 1>(std::array<std::size_t, 1>{n});
    r.fill(T(0));
    const T* const gp = g.data();
    const T* const xp = x.data();
    T* const rp = r.data();
    const std::size_t rows = g.size() / n;
    [[maybe_unused]] const simd_isa isa = active_isa();
    // Column ranges over the thread pool, each column summed in row order
    // (whatever the split): rp[j] += g[i, j] * x[i, j], the product rounded
    // before the sum.
    parallel_ranges(
        n, ::xshard::detail::rows_per_grain(rows),
        [&](std::size_t j0, std::size_t j1) {
#if XSHARD_X86_KERNELS
          if constexpr (std::is_same_v<T, float>) {
            if (isa != simd_isa::generic) {
              constexpr std::size_t chunk = 256;
              alignas(64) T prod[chunk];
              for (std::size_t c0 = j0; c0 < j1; c0 += chunk) {
                const std::size_t len = std::min(chunk, j1 - c0);
                for (std::size_t i = 0; i < rows; ++i) {
                  ::xshard::detail::x86::binary_row(isa, 2, gp + i * n + c0, xp + i * n + c0, prod, len);
                  ::xshard::detail::x86::binary_row(isa, 0, rp + c0, prod, rp + c0, len);
                }
              }
              return;
            }
          }
#endif
          for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = j0; j < j1; ++j) rp[j] += gp[i * n + j] * xp[i * n + j];
        },
        ::xshard::detail::parallel_unit);
    return std::optional<Out>(std::move(r));
  }
}

template <class A, class B>
constexpr bool is_bias_of() {
  if constexpr (Sharded<A> && Sharded<B>)
    return std::remove_cvref_t<B>::rank == 1 && std::remove_cvref_t<A>::rank > 1;
  else
    return false;
}

/// Dim da of A and dim db of B are split into the same blocks: the same
/// mesh axes, size-1 axes aside.
template <class A, class B>
constexpr bool same_blocks(std::size_t da, std::size_t db) {
  using DA = std::remove_cvref_t<A>;
  auto strip = [](const axis_list& l) {
    axis_list r;
    for (const mesh_axis_t ax : l)
      if (DA::mesh_shape[static_cast<std::size_t>(ax)] != 1) r.push_back(ax);
    return r;
  };
  return strip(DA::resolved.dims[da]) == strip(std::remove_cvref_t<B>::resolved.dims[db]);
}

template <class A, class B>
constexpr void check_sharded_binary() {
  if constexpr (Sharded<A> || Sharded<B>) {
    using DA = std::remove_cvref_t<A>;
    using DB = std::remove_cvref_t<B>;
    static_assert(Sharded<A> && Sharded<B>, "xshard::graph: a sharded tensor combined with a plain one");
    if constexpr (Sharded<A> && Sharded<B>) {
      static_assert(std::is_same_v<typename DA::mesh_type, typename DB::mesh_type>,
                    "xshard::graph: operands on different meshes");
      if constexpr (DB::rank == 1 && DA::rank > 1)
        static_assert(same_blocks<DA, DB>(DA::rank - 1, 0),
                      "xshard::graph: a rank-1 operand must be sharded like the last dim it is added to");
      else
        static_assert(
            DA::rank == DB::rank && DA::partial_axes == DB::partial_axes &&
                [] {
                  for (std::size_t d = 0; d < DA::rank; ++d)
                    if (!same_blocks<DA, DB>(d, d)) return false;
                  return true;
                }(),
            "xshard::graph: elementwise operands need the same layout (constrain one first)");
    }
  }
}

/// v seen as the sharded type To, whose blocks are v's (checked by
/// check_sharded_binary: the specs differ only by mesh axes of size 1,
/// which the einsum planner drops): v itself when the types agree.
template <class To, class V>
decltype(auto) with_layout_of(const V& v) {
  if constexpr (!Sharded<V> || std::is_same_v<std::remove_cvref_t<V>, std::remove_cvref_t<To>>) {
    return (v);
  } else {
    using D = owning_sharded_t<To>;
    return D(v.device(), v.global_shape(), xt::xtensor<typename D::value_type, D::rank>(v.local()));
  }
}

}  // namespace detail

template <class Op>
struct rule;

/// The collectives of one node's forward or backward on every device, in
/// order: kind, mesh axes, and the operand it acts on (-1: the result).
inline constexpr std::size_t max_node_collectives = 16;
using node_collectives = static_vector<planned_collective, max_node_collectives>;

namespace detail {

/// to += what; a node with more collectives than node_collectives holds
/// does not compile (consteval).
constexpr void append(node_collectives& to, const auto& what) {
  for (const planned_collective& c : what) {
    if (to.full()) throw "xshard::graph: a node runs more than max_node_collectives collectives";
    to.push_back(c);
  }
}
/// A node's backward collectives from its rule's per-operand ones
/// (Rule::backward_collectives_of<K>), operands in the order vjp is asked.
template <class Rule, class Y, class... A>
consteval node_collectives every_operands_collectives() {
  node_collectives r;
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    (append(r, Rule::template backward_collectives_of<K, Y, A...>()), ...);
  }
  (std::index_sequence_for<A...>{});
  return r;
}
/// The collectives of a redistribution of operand `tensor`.
constexpr node_collectives collectives_of(const redist_plan& p, int tensor) {
  node_collectives r;
  for (const redist_step& s : p.steps)
    if (is_collective(s.kind)) append(r, std::array{planned_collective{collective_of(s.kind), s.axes, tensor}});
  return r;
}
/// Whether a sharded einsum's plan runs one collective, the all-reduce of
/// its result's partial sums, as its last step (the rules'
/// reduces_gradient_last).
constexpr bool reduces_result_last(const sharded_einsum_plan& p) {
  for (const redist_plan& o : p.operands)
    for (const redist_step& s : o.steps)
      if (is_collective(s.kind)) return false;
  return p.output.steps.size() == 1 && p.output.steps[0].kind == step_kind::all_reduce;
}
/// n all-reduces over `axes` (none if axes is empty): the partial sums of a
/// composite over a split dim.
constexpr node_collectives all_reduces(axis_set axes, std::size_t n, int tensor = -1) {
  node_collectives r;
  if (axes != 0)
    for (std::size_t i = 0; i < n; ++i)
      append(r, std::array{planned_collective{collective_kind::all_reduce, axes, tensor}});
  return r;
}

}  // namespace detail

/// The collectives of an op that runs on each device's block alone: none.
struct local_op {
  template <class...>
  static consteval node_collectives forward_collectives() {
    return {};
  }
  template <class...>
  static consteval node_collectives backward_collectives() {
    return {};
  }
};

template <fixed_string Eq>
struct rule<einsum_op<Eq>> {
  template <class... A>
  static auto eval(const A&... a) {
    return ::xshard::einsum<Eq>(a...);
  }
  template <std::size_t K, class G, class Y, class... A>
  static auto vjp(G&& g, const vjp_context<Y, A...>& c) {
    return c.template first_operands<sizeof...(A)>(
        [&](const auto&... a) { return ::xshard::einsum_vjp<Eq, K>(g, a...); });
  }
  template <class Y, class... A>
  static consteval node_collectives forward_collectives() {
    node_collectives r;
    if constexpr ((Sharded<A> && ...)) detail::append(r, einsum_plan_of<Eq, A...>().collectives());
    return r;
  }
  /// Operand K's gradient einsum, K = 0, 1, ... (the order vjp is asked).
  template <class Y, class... A>
  static consteval node_collectives backward_collectives() {
    return detail::every_operands_collectives<rule, Y, A...>();
  }
  /// Operand K's own (a backward that makes no gradient for some operand
  /// runs only the others': graph::program::backward<false>).
  static constexpr bool splits_backward_collectives = true;
  template <std::size_t K, class Y, class... A>
  static consteval node_collectives backward_collectives_of() {
    node_collectives r;
    if constexpr ((Sharded<A> && ...)) detail::append(r, einsum_vjp_plan<Eq, K, Y, A...>().collectives());
    return r;
  }
  /// Whether operand K's one collective is the all-reduce of its
  /// gradient's partial sums, run last, in place, on the block vjp<K>
  /// returns (a weight's gradient over a batch split on `data`): the graph's
  /// backward may then defer it (program::defers_reduce).
  template <std::size_t K, class Y, class... A>
  static consteval bool reduces_gradient_last() {
    if constexpr ((Sharded<A> && ...))
      return detail::reduces_result_last(einsum_vjp_plan<Eq, K, Y, A...>());
    else
      return false;
  }
};

template <fixed_string Eq, class S>
struct rule<einsum_to_op<Eq, S>> : rule<einsum_op<Eq>> {
  template <class... A>
  static auto eval(const A&... a) {
    if constexpr ((Sharded<A> && ...))
      return ::xshard::einsum_to<Eq, S>(a...);
    else
      return ::xshard::einsum<Eq>(a...);
  }
  /// The einsum's own result type (its partial sums reduced, no
  /// redistribution): the layout its operands produce without collectives.
  template <class... A>
  using natural_t = decltype(::xshard::einsum<Eq>(std::declval<const A&>()...));
  /// Whether the backward first brings the result's gradient G back to the
  /// einsum's own layout: when S moved it elsewhere (a reduce-scatter over
  /// the sequence), one redistribution of g (an all-gather) makes every
  /// operand's gradient einsum local, instead of each planning its own
  /// way around a layout that splits a label the operands split otherwise.
  template <class G, class... A>
  static constexpr bool regather = [] {
    if constexpr ((Sharded<A> && ...) && Sharded<G>)
      return !(std::remove_cvref_t<G>::resolved == natural_t<A...>::resolved);
    else
      return false;
  }();
  template <std::size_t K, class G, class Y, class... A>
  static auto vjp(G&& g, const vjp_context<Y, A...>& c) {
    if constexpr (regather<G, A...>) {
      const natural_t<A...> gn = ::xshard::constrain<typename natural_t<A...>::spec_type>(g);
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return ::xshard::einsum_vjp<Eq, K>(gn, c.template operand<I>()...);
      }
      (std::index_sequence_for<A...>{});
    } else {
      return rule<einsum_op<Eq>>::template vjp<K>(std::forward<G>(g), c);
    }
  }
  template <class Y, class... A>
  static consteval node_collectives backward_collectives() {
    return detail::every_operands_collectives<rule, Y, A...>();
  }
  /// Operand K's: with regather, g brought back to the einsum's layout (for
  /// each operand's vjp), then its gradient einsum.
  template <std::size_t K, class Y, class... A>
  static consteval node_collectives backward_collectives_of() {
    if constexpr (regather<Y, A...>) {
      using N = natural_t<A...>;
      node_collectives r;
      detail::append(r, detail::collectives_of(redistribute_plan<Y, typename N::spec_type>(), -1));
      detail::append(r, einsum_vjp_plan<Eq, K, N, A...>().collectives());
      return r;
    } else {
      return rule<einsum_op<Eq>>::template backward_collectives_of<K, Y, A...>();
    }
  }
  /// rule<einsum_op>'s, unless g is first brought back (regather).
  template <std::size_t K, class Y, class... A>
  static consteval bool reduces_gradient_last() {
    if constexpr (regather<Y, A...>)
      return false;
    else
      return rule<einsum_op<Eq>>::template reduces_gradient_last<K, Y, A...>();
  }
  template <class Y, class... A>
  static consteval node_collectives forward_collectives() {
    node_collectives r;
    if constexpr ((Sharded<A> && ...)) {
      using M = typename std::remove_cvref_t<std::tuple_element_t<0, std::tuple<A...>>>::mesh_type;
      detail::append(r, einsum_plan_to<Eq, M, S, typename std::remove_cvref_t<A>::spec_type...>().collectives());
    }
    return r;
  }
};

namespace detail {
/// Whether sharded types A and B have blocks of one layout and neither is
/// partial (local_zip's two rules): their elementwise ops pair block
/// elements one to one.
template <class A, class B>
consteval bool same_layout_blocks() {
  using DA = std::remove_cvref_t<A>;
  using DB = std::remove_cvref_t<B>;
  if constexpr (Sharded<DA> && Sharded<DB>)
    return ::xshard::detail::one_layout<DA, DB>() && DA::partial_axes == 0 && DB::partial_axes == 0;
  else
    return false;
}

/// a op b elementwise on sharded operands of one layout (b already in a's:
/// with_layout_of). Blocks of one shape (a residual connection, a product
/// of two activations, a gradient times an activation) go by element ranges
/// over the pool (binary_elements: the same bits as xtensor's a op b), into
/// a's own block when it is a temporary; anything else is local_zip's (and
/// its errors).
template <binary B, class X, class Y>
auto zip_binary(X&& a, const Y& b) {
  using DA = owning_sharded_t<X>;
  if constexpr (same_layout_blocks<DA, Y>()) {
    using T = typename DA::value_type;
    if (a.global_shape() == b.global_shape() && a.local().shape() == b.local().shape()) {
      const T* const pa = a.local().data();  // a's buffer, r's too once a's block is moved in
      const T* const pb = b.local().data();
      xt::xtensor<T, DA::rank> r = [&] {
        if constexpr (!std::is_lvalue_reference_v<X> && std::is_same_v<DA, std::remove_cvref_t<X>>)
          return std::move(a.local());
        else
          return ::xshard::detail::fresh_tensor<T, DA::rank>(a.local().shape());
      }();
      binary_elements<B>(r.data(), pa, pb, r.size());
      return DA(a.device(), a.global_shape(), std::move(r));
    }
  }
  return local_zip(a, b, [](const auto& u, const auto& v) { return apply_binary<B>(u, v); });
}
}  // namespace detail

template <binary B>
struct rule<binary_op<B>> {
  template <class X, class Y>
  static auto eval(X&& a, Y&& b) {
    using DA = owning_sharded_t<X>;  // a view operand: a fresh block
    detail::check_sharded_binary<X, Y>();
    auto f = [](const auto& u, const auto& v) { return detail::apply_binary<B>(u, v); };
    if constexpr (Sharded<X>) {
      if constexpr (detail::is_bias_of<X, Y>()) {
        // Each device's block row by row against its block of the bias (the
        // layouts split the last dim alike: check_sharded_binary), in one
        // pass into a fresh block or into a's own when a is a temporary.
        if (b.local().size() == a.local().shape()[DA::rank - 1]) {
          const auto device = a.device();
          const auto global = a.global_shape();
          if constexpr (std::is_lvalue_reference_v<X> || !std::is_same_v<DA, std::remove_cvref_t<X>>)
            return DA(device, global, detail::bias_applied<B>(a.local(), b.local()));
          else
            return DA(device, global, detail::bias_applied<B>(std::move(a.local()), b.local()));
        }
        DA r(std::forward<X>(a));  // extents that do not match: xtensor's broadcast error
        if constexpr (B == binary::add)
          r.local() += b.local();
        else if constexpr (B == binary::sub)
          r.local() -= b.local();
        else if constexpr (B == binary::mul)
          r.local() *= b.local();
        else
          r.local() /= b.local();
        return r;
      } else {
        return detail::zip_binary<B>(std::forward<X>(a), detail::with_layout_of<DA>(b));
      }
    } else {
      using T = detail::element_t<X>;
      constexpr std::size_t R = std::max(detail::rank_v<X>, detail::rank_v<Y>);
      detail::check_broadcast(a.shape(), b.shape(), binary_op<B>::text);
      if constexpr (std::is_same_v<DA, xt::xtensor<T, R>> &&
                    std::is_same_v<std::remove_cvref_t<Y>, xt::xtensor<T, R>>) {
        // Equal shapes (a residual connection, a gradient's sum): element
        // ranges over the pool, into an operand that is ours or a fresh tensor.
        if (a.shape() == b.shape()) {
          const T* const pa = a.data();
          const T* const pb = b.data();
          xt::xtensor<T, R> r = [&] {
            if constexpr (!std::is_lvalue_reference_v<X>)
              return xt::xtensor<T, R>(std::move(a));
            else if constexpr (!std::is_lvalue_reference_v<Y>)
              return xt::xtensor<T, R>(std::move(b));
            else
              return ::xshard::detail::fresh_tensor<T, R>(a.shape());
          }();
          detail::binary_elements<B>(r.data(), pa, pb, r.size());
          return r;
        }
      }
      if constexpr (detail::rank_v<Y> == 1 && std::is_same_v<DA, xt::xtensor<T, R>>) {
        // A rank-1 operand along the last dim (a bias): row by row.
        if (b.size() == a.shape()[R - 1]) return detail::bias_applied<B>(std::forward<X>(a), b);
      }
      if constexpr (!std::is_lvalue_reference_v<X> && std::is_same_v<DA, xt::xtensor<T, R>>) {
        // The left operand's buffer, when the result has its shape.
        bool fits = b.dimension() <= R;
        for (std::size_t d = 0; fits && d < b.dimension(); ++d) {
          const std::size_t eb = b.shape()[b.dimension() - 1 - d];
          fits = eb == 1 || eb == a.shape()[R - 1 - d];
        }
        if (fits) {
          DA r = std::move(a);  // in place: xtensor's r += b on a container would go through a temporary
          if constexpr (B == binary::add)
            xt::noalias(r) += b;
          else if constexpr (B == binary::sub)
            xt::noalias(r) -= b;
          else if constexpr (B == binary::mul)
            xt::noalias(r) *= b;
          else
            xt::noalias(r) /= b;
          return r;
        }
      }
      if constexpr (!std::is_lvalue_reference_v<Y> && std::is_same_v<std::remove_cvref_t<Y>, xt::xtensor<T, R>> &&
                    std::is_same_v<std::remove_cvref_t<X>, xt::xtensor<T, R>>) {
        // The right operand's buffer, when both have the result's shape:
        // each element reads only its own position of both operands.
        if (a.shape() == b.shape()) {
          xt::xtensor<T, R> r = std::move(b);
          xt::noalias(r) = f(a, r);
          return r;
        }
      }
      return ::xshard::detail::fresh_copy<T, R>(f(a, b));
    }
  }
  template <std::size_t K, class G, class Y, class A0, class A1>
  static auto vjp(G&& g, const vjp_context<Y, A0, A1>& c) {
    using A = std::conditional_t<K == 0, A0, A1>;
    constexpr bool passes = B == binary::add || (B == binary::sub && K == 0);  // the gradient is g itself
    if constexpr (Sharded<G>) {
      using D = std::remove_cvref_t<A>;
      using DG = std::remove_cvref_t<G>;
      auto scaled = [&] {
        if constexpr (passes) {
          return DG(std::forward<G>(g));
        } else if constexpr (B == binary::sub) {
          return local_map(g, [](const auto& v) { return -v; });
        } else if constexpr (B == binary::div && K == 1) {
          // -g a / b^2, b possibly a rank-1 operand along the last dim
          DG r = local_zip(g, detail::with_layout_of<DG>(c.template operand<0>()),
                           [](const auto& u, const auto& v) { return -u * v; });
          const auto& b = c.template operand<1>().local();
          xt::noalias(r.local()) /= b * b;
          return r;
        } else if constexpr (K == 0 && detail::is_bias_of<A0, A1>()) {
          // g times (over) the rank-1 operand along the last dim (a norm's
          // gain): the forward's own bias path, row by row in g's block
          // when it is ours.
          return DG(eval(std::forward<G>(g), c.template operand<1>()));
        } else if constexpr (B == binary::div) {
          return detail::zip_binary<binary::div>(std::forward<G>(g),
                                                 detail::with_layout_of<DG>(c.template operand<1>()));
        } else {
          return detail::zip_binary<binary::mul>(std::forward<G>(g),
                                                 detail::with_layout_of<DG>(c.template operand<1 - K>()));
        }
      };
      if constexpr (detail::is_bias_of<G, A>()) {
        // The rank-1 operand's gradient: g (scaled) summed over the rows,
        // read where it is (no copy of g for a bias add); a scaled
        // temporary goes back to the workspace, if any.
        if constexpr (passes) {
          return einsum_to<"...m->m", typename D::spec_type>(g);
        } else {
          auto t = scaled();
          auto r = einsum_to<"...m->m", typename D::spec_type>(t);
          ::xshard::detail::recycle(std::move(t));
          return r;
        }
      } else {
        return scaled();
      }
    } else {
      constexpr std::size_t R = detail::rank_v<A>;
      if constexpr (passes)
        return detail::sum_to<R>(std::forward<G>(g), c.a_shapes[K]);
      else if constexpr (B == binary::sub)
        return detail::sum_to<R>(xt::eval(-g), c.a_shapes[K]);
      else if constexpr (B == binary::mul && detail::is_gain_product<G, A0, A1>()) {
        if (auto r = detail::gain_product_vjp<K>(std::forward<G>(g), c.template operand<0>(), c.template operand<1>()))
          return std::move(*r);
        return detail::sum_to<R>(xt::eval(g * c.template operand<1 - K>()), c.a_shapes[K]);
      } else if constexpr (B == binary::mul)
        return detail::sum_to<R>(xt::eval(g * c.template operand<1 - K>()), c.a_shapes[K]);
      else if constexpr (K == 0)
        return detail::sum_to<R>(xt::eval(g / c.template operand<1>()), c.a_shapes[K]);
      else
        return detail::sum_to<R>(
            xt::eval(-g * c.template operand<0>() / (c.template operand<1>() * c.template operand<1>())),
            c.a_shapes[K]);
    }
  }
  template <class Y, class A0, class A1>
  static consteval node_collectives forward_collectives() {
    return {};
  }
  /// A bias's gradient: the sum over every dim but the last (its plan).
  template <class Y, class A0, class A1>
  static consteval node_collectives backward_collectives() {
    return backward_collectives_of<1, Y, A0, A1>();
  }
  /// Operand K's: the bias's (K = 1) sum; none for the other.
  static constexpr bool splits_backward_collectives = true;
  template <std::size_t K, class Y, class A0, class A1>
  static consteval node_collectives backward_collectives_of() {
    node_collectives r;
    if constexpr (K == 1 && detail::is_bias_of<A0, A1>()) {
      using DY = std::remove_cvref_t<Y>;
      using D1 = std::remove_cvref_t<A1>;
      for (planned_collective c :
           einsum_plan_to<"...m->m", typename DY::mesh_type, typename D1::spec_type, typename DY::spec_type>()
               .collectives()) {
        c.tensor = 1;
        detail::append(r, std::array{c});
      }
    }
    return r;
  }
  /// A bias's gradient (K = 1): its sum over the rows, when that is
  /// all-reduced last (rule<einsum_op>::reduces_gradient_last).
  template <std::size_t K, class Y, class A0, class A1>
  static consteval bool reduces_gradient_last() {
    if constexpr (K == 1 && detail::is_bias_of<A0, A1>()) {
      using DY = std::remove_cvref_t<Y>;
      using D1 = std::remove_cvref_t<A1>;
      return detail::reduces_result_last(
          einsum_plan_to<"...m->m", typename DY::mesh_type, typename D1::spec_type, typename DY::spec_type>());
    } else {
      return false;
    }
  }
};

/// einsum<Eq>(a...) + b, b (the last operand) a rank-1 tensor along the
/// result's last dim, on one device: the GEMM adds b in its epilogue
/// (xshard::einsum_bias). Where b does not run along the last dim it is
/// numpy's + (a length-1 b broadcasts; others are +'s error).
template <fixed_string Eq>
struct rule<einsum_bias_op<Eq>> : local_op {
  template <class... A>
  static auto eval(const A&... a) {
    constexpr std::size_t n = sizeof...(A) - 1;
    const auto args = std::forward_as_tuple(a...);
    const auto& b = std::get<n>(args);
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      auto r = ::xshard::detail::einsum_plus_bias<Eq>(b, std::get<I>(args)...);
      using R = decltype(r.first);
      if (r.second) return std::move(r.first);
      return R(rule<binary_op<binary::add>>::eval(std::move(r.first), b));
    }
    (std::make_index_sequence<n>{});
  }
  /// The bias's gradient: g summed over every dim but the last. The
  /// others: the einsum's, of g summed back to the einsum's shape when b
  /// broadcast it (an einsum result of last extent 1).
  template <std::size_t K, class G, class Y, class... A>
  static auto vjp(G&& g, const vjp_context<Y, A...>& c) {
    constexpr std::size_t n = sizeof...(A) - 1;
    if constexpr (K == n) {
      return detail::sum_to<1>(std::forward<G>(g), c.a_shapes[K]);
    } else {
      return c.template first_operands<n>([&](const auto&... a) {
        constexpr std::size_t R = detail::rank_v<G>;
        if (bias_broadcast(g, c)) {
          const xt::xtensor<detail::element_t<G>, R> summed =
              xt::sum(g, {R - 1}, xt::keep_dims | xt::evaluation_strategy::immediate);
          return ::xshard::einsum_vjp<Eq, K>(summed, a...);
        }
        return ::xshard::einsum_vjp<Eq, K>(g, a...);
      });
    }
  }
  /// Whether b broadcast the einsum's result: g's last extent is not the
  /// einsum's (which is then 1).
  template <class G, class Y, class... A>
  static bool bias_broadcast(const G& g, const vjp_context<Y, A...>& c) {
    return c.template first_operands<sizeof...(A) - 1>([&](const auto&... a) {
      return g.shape()[detail::rank_v<G> - 1] != ::xshard::detail::einsum_last_extent<Eq>(a...);
    });
  }
};

template <class C>
struct rule<scale_op<C>> : local_op {
  template <class X>
  static auto eval(const X& a) {
    using T = detail::element_t<X>;
    if constexpr (Sharded<X>) {
      return local_map(a, [](const auto& v) { return v * T(C::value); });
    } else if constexpr (std::is_same_v<X, detail::plain_t<X>>) {
      detail::plain_t<X> r = ::xshard::detail::fresh_tensor<T, detail::rank_v<X>>(a.shape());
      detail::scale_elements(r.data(), a.data(), T(C::value), r.size());
      return r;
    } else {
      return detail::to_plain<X>(a * T(C::value));
    }
  }
  template <std::size_t K, class G, class Y, class A>
  static auto vjp(G&& g, const vjp_context<Y, A>&) {
    using T = detail::element_t<G>;
    if constexpr (!Sharded<G> && !std::is_lvalue_reference_v<G> &&
                  std::is_same_v<std::remove_cvref_t<G>, detail::plain_t<G>>) {
      detail::scale_elements(g.data(), g.data(), T(C::value), g.size());  // the cotangent is ours: scaled in place
      return std::move(g);
    } else {
      return eval(g);
    }
  }
};

template <>
struct rule<tanh_op> : local_op {
  template <class X>
  static auto eval(const X& a) {
    if constexpr (Sharded<X>)
      return local_map(a, [](const auto& v) { return xt::tanh(v); });
    else
      return detail::to_plain<X>(xt::tanh(a));
  }
  template <std::size_t K, class G, class Y, class A>
  static auto vjp(G&& g, const vjp_context<Y, A>& c) {
    using T = detail::element_t<A>;
    auto f = [](const auto& u, const auto& y) { return u * (T(1) - y * y); };
    if constexpr (Sharded<G>)
      return local_zip(g, *c.y, f);
    else
      return detail::to_plain<A>(f(g, *c.y));
  }
};

template <gelu_kind K0>
struct rule<gelu_op<K0>> : local_op {
  static constexpr gelu_approximate approximate =
      K0 == gelu_kind::none ? gelu_approximate::none : gelu_approximate::tanh;
  template <class X>
  static auto eval(const X& a) {
    if constexpr (Sharded<X>)
      return local_map(a, [](const auto& v) { return ::xshard::gelu(v, approximate); });
    else
      return detail::to_plain<X>(::xshard::gelu(a, approximate));
  }
  template <std::size_t K, class G, class Y, class A>
  static auto vjp(G&& g, const vjp_context<Y, A>& c) {
    if constexpr (K0 == gelu_kind::none) {  // the cdf from the output: no erf in the backward
      if constexpr (Sharded<G>)
        return local_zip(g, c.template operand<0>(), [&](const auto& u, const auto& h) {
          return ::xshard::gelu_backward_from_output(u, h, c.y->local());
        });
      else
        return detail::to_plain<A>(::xshard::gelu_backward_from_output(g, c.template operand<0>(), *c.y));
    } else if constexpr (Sharded<G>) {
      return local_zip(g, c.template operand<0>(),
                       [](const auto& u, const auto& h) { return ::xshard::gelu_backward(u, h, approximate); });
    } else {
      return detail::to_plain<A>(::xshard::gelu_backward(g, c.template operand<0>(), approximate));
    }
  }
};

namespace detail {

/// The mesh axes (of size > 1) that split dim d of sharded type X.
template <class X>
constexpr axis_set splitting_axes(std::size_t d) {
  using D = std::remove_cvref_t<X>;
  axis_set s = 0;
  for (const mesh_axis_t ax : D::resolved.dims[d])
    if (D::mesh_shape[static_cast<std::size_t>(ax)] > 1) s |= axis_bit(static_cast<std::size_t>(ax));
  return s;
}

/// Dim d of an operand X, counted from the end when negative (softmax's and
/// log_softmax's Dim = -1: the last).
template <class X>
constexpr std::size_t resolved_dim(int d) {
  return d < 0 ? std::remove_cvref_t<X>::rank - static_cast<std::size_t>(-d) : static_cast<std::size_t>(d);
}

/// The axes that split dim d of an operand X of a reduction along d
/// (softmax, log_softmax, layer_norm, rms_norm): splitting_axes for a
/// sharded X, none for a plain tensor. Non-zero picks the rule's partial
/// statistics and their all-reduces.
template <class X>
constexpr axis_set reduced_dim_split(std::size_t d) {
  if constexpr (Sharded<X>)
    return splitting_axes<X>(d);
  else
    return axis_set{0};
}

/// A contiguous row-major block seen as (outer, n, inner) around dim d.
struct around_dim {
  std::size_t outer = 1, n = 1, inner = 1;
  template <class S>
  around_dim(const S& shape, std::size_t d) {
    for (std::size_t e = 0; e < shape.size(); ++e) (e < d ? outer : e == d ? n : inner) *= shape[e];
  }
  std::size_t at(std::size_t o, std::size_t k, std::size_t i) const { return (o * n + k) * inner + i; }
};

/// softmax along dim d of a block whose dim d is split over `axes`: the
/// row maxima and the row sums are all-reduced over them (partial max and
/// sum), so no device gathers the dim.
template <class X>
auto split_softmax(const X& x, std::size_t d, axis_set axes) {
  using T = typename X::value_type;
  const auto& v = x.local();
  const around_dim s(v.shape(), d);
  xt::xtensor<T, X::rank> y = xt::xtensor<T, X::rank>::from_shape(v.shape());
  std::vector<T> row(s.outer * s.inner, -std::numeric_limits<T>::infinity());
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k)
      for (std::size_t i = 0; i < s.inner; ++i)
        row[o * s.inner + i] = std::max(row[o * s.inner + i], v.data()[s.at(o, k, i)]);
  const auto& dev = x.device();
  dev.all_reduce(dev.device, std::span<T>(row), reduce_op::max, axes);
  std::vector<T> sum(row.size(), T(0));
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k)
      for (std::size_t i = 0; i < s.inner; ++i) {
        const std::size_t j = s.at(o, k, i);
        y.data()[j] = std::exp(v.data()[j] - row[o * s.inner + i]);
        sum[o * s.inner + i] += y.data()[j];
      }
  dev.all_reduce(dev.device, std::span<T>(sum), reduce_op::sum, axes);
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k)
      for (std::size_t i = 0; i < s.inner; ++i) y.data()[s.at(o, k, i)] /= sum[o * s.inner + i];
  return std::remove_cvref_t<X>(dev, x.global_shape(), std::move(y));
}

/// softmax's vjp along a split dim: dx = y (g - sum(g y)), the sum
/// all-reduced over `axes`.
template <class G, class Y>
auto split_softmax_backward(const G& g, const Y& y, std::size_t d, axis_set axes) {
  using T = typename Y::value_type;
  const auto& gv = g.local();
  const auto& yv = y.local();
  const around_dim s(yv.shape(), d);
  std::vector<T> dot(s.outer * s.inner, T(0));
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k)
      for (std::size_t i = 0; i < s.inner; ++i)
        dot[o * s.inner + i] += gv.data()[s.at(o, k, i)] * yv.data()[s.at(o, k, i)];
  const auto& dev = y.device();
  dev.all_reduce(dev.device, std::span<T>(dot), reduce_op::sum, axes);
  xt::xtensor<T, Y::rank> dx = xt::xtensor<T, Y::rank>::from_shape(yv.shape());
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k)
      for (std::size_t i = 0; i < s.inner; ++i) {
        const std::size_t j = s.at(o, k, i);
        dx.data()[j] = yv.data()[j] * (gv.data()[j] - dot[o * s.inner + i]);
      }
  return std::remove_cvref_t<Y>(dev, y.global_shape(), std::move(dx));
}

}  // namespace detail

/// softmax along Dim; over a dim split across devices by partial max and
/// sum all-reduces (two in the forward, one in the backward).
template <int Dim>
struct rule<softmax_op<Dim>> {
  template <class X>
  static constexpr std::size_t dim = detail::resolved_dim<X>(Dim);
  template <class X>
  static constexpr axis_set split = detail::reduced_dim_split<X>(dim<X>);
  template <class X>
  static auto eval(const X& a) {
    if constexpr (Sharded<X>) {
      static_assert(std::remove_cvref_t<X>::partial_axes == 0, "xshard::graph: softmax of partial sums");
      if constexpr (split<X> != 0)
        return detail::split_softmax(a, dim<X>, split<X>);
      else
        return local_map(a, [](const auto& v) { return ::xshard::softmax(v, Dim); });
    } else {
      return detail::to_plain<X>(::xshard::softmax(a, Dim));
    }
  }
  template <std::size_t K, class G, class Y, class A>
  static auto vjp(G&& g, const vjp_context<Y, A>& c) {
    if constexpr (Sharded<G>) {
      if constexpr (split<A> != 0)
        return detail::split_softmax_backward(g, *c.y, dim<A>, split<A>);
      else
        return local_zip(g, *c.y, [](const auto& u, const auto& y) { return ::xshard::softmax_backward(u, y, Dim); });
    } else {
      return detail::to_plain<A>(::xshard::softmax_backward(g, *c.y, Dim));
    }
  }
  template <class Y, class A>
  static consteval node_collectives forward_collectives() {
    return detail::all_reduces(split<A>, 2);
  }
  template <class Y, class A>
  static consteval node_collectives backward_collectives() {
    return detail::all_reduces(split<A>, 1, 0);
  }
};

namespace detail {

/// log_softmax along the middle dim of a contiguous block seen as (outer,
/// n, inner): y = x - max - log(sum exp(x - max)). `reduce(row_stats, op)`
/// all-reduces the per-row maxima and sums over the devices that split the
/// dim (it does nothing on one device), so no device gathers the dim.
template <class T, class Reduce>
void log_softmax_rows(const T* x, T* y, const around_dim& s, Reduce&& reduce) {
  std::vector<T> top(s.outer * s.inner, -std::numeric_limits<T>::infinity());
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k)
      for (std::size_t i = 0; i < s.inner; ++i) top[o * s.inner + i] = std::max(top[o * s.inner + i], x[s.at(o, k, i)]);
  reduce(std::span<T>(top), reduce_op::max);
  std::vector<T> sum(top.size(), T(0));
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k)
      for (std::size_t i = 0; i < s.inner; ++i)
        sum[o * s.inner + i] += std::exp(x[s.at(o, k, i)] - top[o * s.inner + i]);
  reduce(std::span<T>(sum), reduce_op::sum);
  for (std::size_t r = 0; r < sum.size(); ++r) sum[r] = top[r] + std::log(sum[r]);  // log sum exp
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k)
      for (std::size_t i = 0; i < s.inner; ++i) y[s.at(o, k, i)] = x[s.at(o, k, i)] - sum[o * s.inner + i];
}

/// log_softmax's vjp from its output y: dx = g - exp(y) sum(g), the row
/// sums of g all-reduced by `reduce` as above.
template <class T, class Reduce>
void log_softmax_backward_rows(const T* g, const T* y, T* dx, const around_dim& s, Reduce&& reduce) {
  std::vector<T> sum(s.outer * s.inner, T(0));
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k)
      for (std::size_t i = 0; i < s.inner; ++i) sum[o * s.inner + i] += g[s.at(o, k, i)];
  reduce(std::span<T>(sum), reduce_op::sum);
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k)
      for (std::size_t i = 0; i < s.inner; ++i) {
        const std::size_t j = s.at(o, k, i);
        dx[j] = g[j] - std::exp(y[j]) * sum[o * s.inner + i];
      }
}

}  // namespace detail

/// log_softmax along Dim (the loss's log-probabilities); over a dim split
/// across devices by partial max and sum all-reduces, two in the forward
/// and one in the backward (a vocabulary-parallel cross-entropy).
template <int Dim>
struct rule<log_softmax_op<Dim>> {
  template <class X>
  static constexpr std::size_t dim = detail::resolved_dim<X>(Dim);
  template <class X>
  static constexpr axis_set split = detail::reduced_dim_split<X>(dim<X>);
  /// The all-reduce of row statistics over the devices splitting the dim.
  template <class X>
  static auto reducer([[maybe_unused]] const X& x) {
    if constexpr (Sharded<X> && split<X> != 0)
      return [&x](auto row, reduce_op op) { x.device().all_reduce(x.device().device, row, op, split<X>); };
    else
      return [](auto, reduce_op) {};
  }
  template <class X>
  static auto eval(const X& a) {
    if constexpr (Sharded<X>) {
      static_assert(std::remove_cvref_t<X>::partial_axes == 0, "xshard::graph: log_softmax of partial sums");
      using T = detail::element_t<X>;
      const auto& v = a.local();
      xt::xtensor<T, std::remove_cvref_t<X>::rank> y =
          xt::xtensor<T, std::remove_cvref_t<X>::rank>::from_shape(v.shape());
      detail::log_softmax_rows(v.data(), y.data(), detail::around_dim(v.shape(), dim<X>), reducer(a));
      return std::remove_cvref_t<X>(a.device(), a.global_shape(), std::move(y));
    } else {
      detail::plain_t<X> v(a);
      detail::plain_t<X> y = detail::plain_t<X>::from_shape(v.shape());
      detail::log_softmax_rows(v.data(), y.data(), detail::around_dim(v.shape(), dim<X>), reducer(a));
      return y;
    }
  }
  template <std::size_t K, class G, class Y, class A>
  static auto vjp(G&& g, const vjp_context<Y, A>& c) {
    const auto& y = *c.y;
    if constexpr (Sharded<G>) {
      using T = detail::element_t<A>;
      using D = std::remove_cvref_t<Y>;
      const auto& gv = g.local();
      const auto& yv = y.local();
      xt::xtensor<T, D::rank> dx = xt::xtensor<T, D::rank>::from_shape(yv.shape());
      detail::log_softmax_backward_rows(gv.data(), yv.data(), dx.data(), detail::around_dim(yv.shape(), dim<A>),
                                        reducer(y));
      return D(y.device(), y.global_shape(), std::move(dx));
    } else {
      detail::plain_t<A> gv(g);
      detail::plain_t<A> dx = detail::plain_t<A>::from_shape(gv.shape());
      detail::log_softmax_backward_rows(gv.data(), y.data(), dx.data(), detail::around_dim(gv.shape(), dim<A>),
                                        reducer(y));
      return dx;
    }
  }
  template <class Y, class A>
  static consteval node_collectives forward_collectives() {
    return detail::all_reduces(split<A>, 2);
  }
  template <class Y, class A>
  static consteval node_collectives backward_collectives() {
    return detail::all_reduces(split<A>, 1, 0);
  }
};

namespace detail {

/// The dim d of a rank-R value counted from the end when negative.
template <int D, std::size_t R>
constexpr std::size_t dim_index() {
  static_assert((D < 0 ? -D <= int(R) : D < int(R)), "xshard::graph: a dim beyond the operand's rank");
  return D < 0 ? R + D : static_cast<std::size_t>(D);
}

template <class X, std::size_t... Dims>
constexpr void require_unsharded_dims(const char*) {
  if constexpr (Sharded<X>) {
    using D = std::remove_cvref_t<X>;
    static_assert(((D::resolved.dims[Dims].empty()) && ...),
                  "xshard::graph: this op needs the dim unsharded: constrain it to None first");
  }
}

/// f(block) on plain values or on this device's block of a sharded value.
template <class X, class F>
auto on_blocks(const X& x, F&& f) {
  if constexpr (Sharded<X>)
    return local_map(x, f);
  else
    return to_plain<X>(f(x));
}
template <class X, class Y, class F>
auto on_blocks(const X& x, const Y& y, F&& f) {
  if constexpr (Sharded<X>)
    return local_zip(x, y, f);
  else
    return to_plain<Y>(f(x, y));
}

/// dst = src with `fill` in the entries of a contiguous row-major block of
/// shape `shape` whose index along dim kd exceeds its index along dim qd
/// (the causal mask); dst may be src (then only the fill is written). Each
/// innermost row's masked entries are one contiguous run (a suffix when kd
/// is the last dim, a prefix when qd is, all or none otherwise): no
/// per-element index arithmetic. Row ranges over the thread pool.
template <class S, class T>
void mask_above_diagonal(const S& shape, std::size_t qd, std::size_t kd, const T* src, T* dst, T fill) {
  const std::size_t rank = shape.size();
  if (rank == 0) return;
  const std::size_t last = rank - 1, n = shape[last];
  std::size_t rows = 1;
  for (std::size_t d = 0; d < last; ++d) rows *= shape[d];
  if (n == 0 || rows == 0) return;
  parallel_ranges(rows, ::xshard::detail::rows_per_grain(n), [&](std::size_t r0, std::size_t r1) {
    // The first row's index in dims 0..last-1 (no allocation for a shape of static rank).
    auto idx = [&] {
      if constexpr (requires { std::tuple_size<S>::value; })
        return std::array<std::size_t, std::tuple_size_v<S>>{};
      else
        return std::vector<std::size_t>(rank, 0);
    }();
    for (std::size_t d = last, r = r0; d-- > 0;) {
      idx[d] = r % shape[d];
      r /= shape[d];
    }
    for (std::size_t row = r0; row < r1; ++row) {
      const T* const s = src + row * n;
      T* const o = dst + row * n;
      std::size_t f0 = n, f1 = n;  // the masked run [f0, f1)
      if (kd == last) {
        f0 = std::min(idx[qd] + 1, n);
      } else if (qd == last) {
        f0 = 0;
        f1 = std::min(idx[kd], n);
      } else if (idx[kd] > idx[qd]) {
        f0 = 0;
      }
      if (s != o) {
        std::copy(s, s + f0, o);
        std::copy(s + f1, s + n, o + f1);
      }
      std::fill(o + f0, o + f1, fill);
      for (std::size_t d = last; d-- > 0;) {  // odometer over the outer dims
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
  });
}

/// mask_above_diagonal in place.
template <class S, class T>
void fill_above_diagonal(const S& shape, std::size_t qd, std::size_t kd, T* data, T fill) {
  mask_above_diagonal(shape, qd, kd, static_cast<const T*>(data), data, fill);
}

}  // namespace detail

namespace detail {

/// Per-row mean and 1/sqrt(var + eps) over the last dim of a block whose
/// last dim is split over `axes` (two all-reduces: the sums, then the
/// centred squares, as the two-pass formula the composite uses).
template <class X>
std::pair<std::vector<typename X::value_type>, std::vector<typename X::value_type>> split_norm_stats(const X& x,
                                                                                                     axis_set axes,
                                                                                                     double eps) {
  using T = typename X::value_type;
  const auto& v = x.local();
  const around_dim s(v.shape(), X::rank - 1);
  const T n = static_cast<T>(x.global_shape()[X::rank - 1]);
  std::vector<T> mean(s.outer, T(0)), rstd(s.outer, T(0));
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k) mean[o] += v.data()[s.at(o, k, 0)];
  const auto& dev = x.device();
  dev.all_reduce(dev.device, std::span<T>(mean), reduce_op::sum, axes);
  for (T& m : mean) m /= n;
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k) {
      const T c = v.data()[s.at(o, k, 0)] - mean[o];
      rstd[o] += c * c;
    }
  dev.all_reduce(dev.device, std::span<T>(rstd), reduce_op::sum, axes);
  for (T& r : rstd) r = T(1) / std::sqrt(r / n + static_cast<T>(eps));
  return {std::move(mean), std::move(rstd)};
}

/// layer_norm over a last dim split over `axes`.
template <class X>
auto split_layer_norm(const X& x, axis_set axes, double eps) {
  using T = typename X::value_type;
  const auto [mean, rstd] = split_norm_stats(x, axes, eps);
  const auto& v = x.local();
  const around_dim s(v.shape(), X::rank - 1);
  xt::xtensor<T, X::rank> y = xt::xtensor<T, X::rank>::from_shape(v.shape());
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k) y.data()[s.at(o, k, 0)] = (v.data()[s.at(o, k, 0)] - mean[o]) * rstd[o];
  return std::remove_cvref_t<X>(x.device(), x.global_shape(), std::move(y));
}

/// Its vjp: dx = rstd (g - mean(g) - xhat mean(g xhat)), the statistics
/// recomputed and the two means all-reduced together.
template <class G, class X>
auto split_layer_norm_backward(const G& g, const X& x, axis_set axes, double eps) {
  using T = typename X::value_type;
  const auto [mean, rstd] = split_norm_stats(x, axes, eps);
  const auto& v = x.local();
  const auto& gv = g.local();
  const around_dim s(v.shape(), X::rank - 1);
  const T n = static_cast<T>(x.global_shape()[X::rank - 1]);
  std::vector<T> sums(2 * s.outer, T(0));  // sum g, then sum g xhat
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k) {
      const std::size_t j = s.at(o, k, 0);
      sums[o] += gv.data()[j];
      sums[s.outer + o] += gv.data()[j] * (v.data()[j] - mean[o]) * rstd[o];
    }
  const auto& dev = x.device();
  dev.all_reduce(dev.device, std::span<T>(sums), reduce_op::sum, axes);
  xt::xtensor<T, X::rank> dx = xt::xtensor<T, X::rank>::from_shape(v.shape());
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k) {
      const std::size_t j = s.at(o, k, 0);
      const T xhat = (v.data()[j] - mean[o]) * rstd[o];
      dx.data()[j] = rstd[o] * (gv.data()[j] - sums[o] / n - xhat * sums[s.outer + o] / n);
    }
  return std::remove_cvref_t<X>(x.device(), x.global_shape(), std::move(dx));
}

}  // namespace detail

/// layer_norm over the last dim; over a last dim split across devices by
/// partial sums (two all-reduces in the forward; three in the backward,
/// which recomputes the statistics).
template <class Eps>
struct rule<layer_norm_op<Eps>> {
  template <class X>
  static constexpr axis_set split = detail::reduced_dim_split<X>(std::remove_cvref_t<X>::rank - 1);
  template <class X>
  static auto eval(const X& a) {
    if constexpr (split<X> != 0)
      return detail::split_layer_norm(a, split<X>, Eps::value);
    else
      return detail::on_blocks(a, [](const auto& v) { return ::xshard::layer_norm(v, Eps::value).output; });
  }
  /// The statistics are recomputed from x rather than kept.
  template <std::size_t K, class G, class Y, class A>
  static auto vjp(G&& g, const vjp_context<Y, A>& c) {
    if constexpr (split<A> != 0)
      return detail::split_layer_norm_backward(g, c.template operand<0>(), split<A>, Eps::value);
    else
      return detail::on_blocks(g, c.template operand<0>(), [](const auto& u, const auto& x) {
        const auto stats = ::xshard::layer_norm(x, Eps::value);
        return ::xshard::layer_norm_backward(u, x, stats.mean, stats.rstd).input;
      });
  }
  template <class Y, class A>
  static consteval node_collectives forward_collectives() {
    return detail::all_reduces(split<A>, 2);
  }
  template <class Y, class A>
  static consteval node_collectives backward_collectives() {
    return detail::all_reduces(split<A>, 3, 0);
  }
};

namespace detail {

/// Per-row 1/sqrt(mean(x^2) + eps) over a last dim split over `axes` (one
/// all-reduce of the partial sums of squares).
template <class X>
std::vector<typename X::value_type> split_rms_stats(const X& x, axis_set axes, double eps) {
  using T = typename X::value_type;
  const auto& v = x.local();
  const around_dim s(v.shape(), X::rank - 1);
  const T n = static_cast<T>(x.global_shape()[X::rank - 1]);
  std::vector<T> rstd(s.outer, T(0));
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k) rstd[o] += v.data()[s.at(o, k, 0)] * v.data()[s.at(o, k, 0)];
  const auto& dev = x.device();
  dev.all_reduce(dev.device, std::span<T>(rstd), reduce_op::sum, axes);
  for (T& r : rstd) r = T(1) / std::sqrt(r / n + static_cast<T>(eps));
  return rstd;
}

template <class X>
auto split_rms_norm(const X& x, axis_set axes, double eps) {
  using T = typename X::value_type;
  const std::vector<T> rstd = split_rms_stats(x, axes, eps);
  const auto& v = x.local();
  const around_dim s(v.shape(), X::rank - 1);
  xt::xtensor<T, X::rank> y = xt::xtensor<T, X::rank>::from_shape(v.shape());
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k) y.data()[s.at(o, k, 0)] = v.data()[s.at(o, k, 0)] * rstd[o];
  return std::remove_cvref_t<X>(x.device(), x.global_shape(), std::move(y));
}

/// dx = rstd (g - y mean(g y)), y = x rstd; the statistics recomputed, the
/// mean all-reduced.
template <class G, class X>
auto split_rms_norm_backward(const G& g, const X& x, axis_set axes, double eps) {
  using T = typename X::value_type;
  const std::vector<T> rstd = split_rms_stats(x, axes, eps);
  const auto& v = x.local();
  const auto& gv = g.local();
  const around_dim s(v.shape(), X::rank - 1);
  const T n = static_cast<T>(x.global_shape()[X::rank - 1]);
  std::vector<T> dot(s.outer, T(0));
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k) dot[o] += gv.data()[s.at(o, k, 0)] * v.data()[s.at(o, k, 0)] * rstd[o];
  const auto& dev = x.device();
  dev.all_reduce(dev.device, std::span<T>(dot), reduce_op::sum, axes);
  xt::xtensor<T, X::rank> dx = xt::xtensor<T, X::rank>::from_shape(v.shape());
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t k = 0; k < s.n; ++k) {
      const std::size_t j = s.at(o, k, 0);
      dx.data()[j] = rstd[o] * (gv.data()[j] - v.data()[j] * rstd[o] * dot[o] / n);
    }
  return std::remove_cvref_t<X>(x.device(), x.global_shape(), std::move(dx));
}

}  // namespace detail

/// rms_norm over the last dim (the xshard.rms_norm composite and its
/// backward); over a split last dim by partial sums of squares (one
/// all-reduce forward; two backward, which recomputes the statistics).
template <class Eps>
struct rule<rms_norm_op<Eps>> {
  template <class X>
  static constexpr axis_set split = detail::reduced_dim_split<X>(std::remove_cvref_t<X>::rank - 1);
  template <class X>
  static auto eval(const X& a) {
    if constexpr (split<X> != 0)
      return detail::split_rms_norm(a, split<X>, Eps::value);
    else
      return detail::on_blocks(a, [](const auto& v) {
        auto r = ::xshard::rms_norm(v, Eps::value);
        ::xshard::detail::recycle(std::move(r.rstd));  // the backward recomputes it
        return std::move(r.output);
      });
  }
  template <std::size_t K, class G, class Y, class A>
  static auto vjp(G&& g, const vjp_context<Y, A>& c) {
    if constexpr (split<A> != 0)
      return detail::split_rms_norm_backward(g, c.template operand<0>(), split<A>, Eps::value);
    else
      return detail::on_blocks(g, c.template operand<0>(), [](const auto& u, const auto& x) {
        auto r = ::xshard::rms_norm(x, Eps::value);
        ::xshard::detail::recycle(std::move(r.output));
        auto dx = ::xshard::rms_norm_backward(u, x, r.rstd);
        ::xshard::detail::recycle(std::move(r.rstd));
        return dx;
      });
  }
  template <class Y, class A>
  static consteval node_collectives forward_collectives() {
    return detail::all_reduces(split<A>, 1);
  }
  template <class Y, class A>
  static consteval node_collectives backward_collectives() {
    return detail::all_reduces(split<A>, 2, 0);
  }
};

template <int QDim, int KDim>
struct rule<causal_mask_op<QDim, KDim>> : local_op {
  template <class X>
  static constexpr std::size_t q = detail::dim_index<QDim, detail::rank_v<X>>();
  template <class X>
  static constexpr std::size_t k = detail::dim_index<KDim, detail::rank_v<X>>();
  /// v with the entries where key > query set to fill.
  template <class V>
  static auto masked(const V& v, typename V::value_type fill) {
    if constexpr (std::is_same_v<V, detail::plain_t<V>>) {
      // One pass: the copy and the fill.
      detail::plain_t<V> r = ::xshard::detail::fresh_tensor<typename V::value_type, detail::rank_v<V>>(v.shape());
      detail::mask_above_diagonal(r.shape(), q<V>, k<V>, v.data(), r.data(), fill);
      return r;
    } else {
      detail::plain_t<V> r = detail::to_plain<V>(v);
      detail::fill_above_diagonal(r.shape(), q<V>, k<V>, r.data(), fill);
      return r;
    }
  }
  /// v masked: in place when v is a plain tensor of ours (the scores no
  /// other node reads, the cotangent), else into a fresh one.
  template <class V>
  static auto masked_value(V&& v, detail::element_t<V> fill) {
    using D = std::remove_cvref_t<V>;
    if constexpr (!Sharded<D> && !std::is_lvalue_reference_v<V> && std::is_same_v<D, detail::plain_t<D>>) {
      detail::fill_above_diagonal(v.shape(), q<D>, k<D>, v.data(), fill);
      return D(std::move(v));
    } else {
      return detail::on_blocks(v, [fill](const auto& b) { return masked(b, fill); });
    }
  }
  template <class X>
  static auto eval(X&& a) {
    using D = std::remove_cvref_t<X>;
    detail::require_unsharded_dims<D, q<D>, k<D>>("causal_mask");
    return masked_value(std::forward<X>(a), -std::numeric_limits<detail::element_t<X>>::infinity());
  }
  template <std::size_t K, class G, class Y, class A>
  static auto vjp(G&& g, const vjp_context<Y, A>&) {
    return masked_value(std::forward<G>(g), 0);
  }
};

/// A user kernel. Kernel::forward(a...) and Kernel::template vjp<K>(g, y,
/// a...) take and return plain tensors; on sharded values they run on this
/// device's blocks, which the signature's sharding rule makes correct: a
/// label is split the same way in every operand that has it, a label that
/// is not in the output (summed over by the kernel) is not split, and the
/// output's dims are split like the operands' dims of the same label. An
/// operand missing a split output label (a bias "d" beside "bsd") gets a
/// partial gradient, all-reduced over those mesh axes.
template <fixed_string Name, fixed_string Sig, class Kernel>
struct rule<custom_op<Name, Sig, Kernel>> {
  template <class... A>
  static constexpr einsum_binding binding = ::xshard::detail::sharded_binding<Sig, detail::rank_v<A>...>();

  /// The output's layout and each operand's partial axes (sharded).
  template <class... A>
  struct sharding {
    using M = typename std::remove_cvref_t<std::tuple_element_t<0, std::tuple<A...>>>::mesh_type;
    static constexpr einsum_binding b = binding<A...>;
    static constexpr std::array<resolved_spec, sizeof...(A)> in{std::remove_cvref_t<A>::resolved...};
    /// The axes of label l in the operands (the first that has it).
    static constexpr axis_list axes_of(int l) {
      for (std::size_t i = 0; i < sizeof...(A); ++i)
        for (std::size_t d = 0; d < b.operand_labels[i].size(); ++d)
          if (b.operand_labels[i][d] == l) return in[i].dims[d];
      return {};
    }
    static constexpr bool in_output(int l) {
      for (int o : b.output_labels)
        if (o == l) return true;
      return false;
    }
    static constexpr bool rule_holds() {
      for (std::size_t i = 0; i < sizeof...(A); ++i)
        for (std::size_t d = 0; d < b.operand_labels[i].size(); ++d) {
          const int l = b.operand_labels[i][d];
          if (!(in[i].dims[d] == axes_of(l))) return false;           // split alike everywhere
          if (!in_output(l) && !in[i].dims[d].empty()) return false;  // summed labels unsplit
        }
      return true;
    }
    static constexpr resolved_spec out = [] {
      resolved_spec r;
      for (int l : b.output_labels) r.dims.push_back(axes_of(l));
      return r;
    }();
    /// Mesh axes splitting output labels that operand i does not have.
    static constexpr axis_set partial(std::size_t i) {
      axis_set s = 0;
      for (int l : b.output_labels) {
        bool has = false;
        for (int x : b.operand_labels[i]) has = has || x == l;
        if (!has)
          for (const mesh_axis_t ax : axes_of(l)) s |= axis_set{1} << ax;
      }
      return s;
    }
  };

  template <class... A>
  static auto eval(const A&... a) {
    constexpr einsum_binding b = binding<A...>;
    (void)b;
    const trace_me scope(Name.view());  // a user's kernel is traced by its name, also inside scan_layers
    if constexpr ((Sharded<A> || ...)) {
      static_assert((Sharded<A> && ...), "xshard::graph::custom: sharded and plain operands mixed");
      using S = sharding<A...>;
      static_assert(S::rule_holds(),
                    "xshard::graph::custom: the operands' layouts break the signature's sharding rule (a label split "
                    "differently in two operands, or a summed label split): constrain them first");
      using D0 = std::remove_cvref_t<std::tuple_element_t<0, std::tuple<A...>>>;
      using T = typename D0::value_type;
      constexpr std::size_t R = S::b.output_labels.size();
      using Out =
          sharded<T, R, typename S::M, typename ::xshard::detail::spec_of_resolved<typename S::M, S::out>::type>;
      xt::xtensor<T, R> block(Kernel::forward(a.local()...));
      std::array<std::int64_t, R> global{};
      const std::array<std::span<const std::int64_t>, sizeof...(A)> shapes{
          std::span<const std::int64_t>(a.global_shape())...};
      for (std::size_t d = 0; d < R; ++d)
        for (std::size_t i = 0; i < sizeof...(A); ++i)
          for (std::size_t e = 0; e < S::b.operand_labels[i].size(); ++e)
            if (S::b.operand_labels[i][e] == S::b.output_labels[d]) global[d] = shapes[i][e];
      const auto& first = std::get<0>(std::forward_as_tuple(a...));
      return Out(first.device(), global, std::move(block));
    } else {
      using T = detail::element_t<std::tuple_element_t<0, std::tuple<A...>>>;
      return xt::xtensor<T, binding<A...>.output_labels.size()>(Kernel::forward(a...));
    }
  }

  template <std::size_t K, class G, class Y, class... A>
  static auto vjp(G&& g, const vjp_context<Y, A...>& c) {
    using AK = std::remove_cvref_t<std::tuple_element_t<K, std::tuple<A...>>>;
    const trace_me scope(Name.view(), {{"pass", "backward"}, {"operand", static_cast<std::int64_t>(K)}});
    if constexpr (Sharded<G>) {
      using S = sharding<A...>;
      using T = typename AK::value_type;
      const AK& ak = c.template operand<K>();
      xt::xtensor<T, AK::rank> block = [&]<std::size_t... I>(std::index_sequence<I...>) {
        return xt::xtensor<T, AK::rank>(
            Kernel::template vjp<K>(g.local(), c.y->local(), c.template operand<I>().local()...));
      }
      (std::index_sequence_for<A...>{});
      constexpr axis_set partial = S::partial(K);
      if constexpr (partial != 0) {
        const auto& dev = ak.device();
        ::xshard::detail::all_reduce_or_defer(dev, std::span<T>(block.data(), block.size()), reduce_op::sum, partial);
      }
      return owning_sharded_t<AK>(ak.device(), ak.global_shape(), std::move(block));
    } else {
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return detail::to_plain<AK>(Kernel::template vjp<K>(g, *c.y, c.template operand<I>()...));
      }
      (std::index_sequence_for<A...>{});
    }
  }
  template <class Y, class... A>
  static consteval node_collectives forward_collectives() {
    return {};
  }
  /// Operand K's gradient is all-reduced over the axes its partial sums
  /// span (the signature's rule).
  template <class Y, class... A>
  static consteval node_collectives backward_collectives() {
    return detail::every_operands_collectives<rule, Y, A...>();
  }
  static constexpr bool splits_backward_collectives = true;
  template <std::size_t K, class Y, class... A>
  static consteval node_collectives backward_collectives_of() {
    node_collectives r;
    if constexpr ((Sharded<A> && ...))
      detail::append(r, detail::all_reduces(sharding<A...>::partial(K), 1, static_cast<int>(K)));
    return r;
  }
  /// Operand K's all-reduce, when it has one, is vjp<K>'s last step on
  /// the block it returns.
  template <std::size_t K, class Y, class... A>
  static consteval bool reduces_gradient_last() {
    if constexpr ((Sharded<A> && ...))
      return sharding<A...>::partial(K) != 0;
    else
      return false;
  }
};

template <class S>
struct rule<constrain_op<S>> {
  template <class X>
  static auto eval(X&& a) {
    if constexpr (Sharded<X>)
      return ::xshard::constrain<S>(std::forward<X>(a));  // an rvalue of the same layout: its block moved
    else if constexpr (::xshard::detail::is_pooled_tensor<std::remove_cvref_t<X>>::value &&
                       std::is_lvalue_reference_v<X>)
      return ::xshard::detail::fresh_copy_of(a);  // the current workspace's, if any
    else
      return std::remove_cvref_t<X>(std::forward<X>(a));
  }
  template <std::size_t K, class G, class Y, class A>
  static auto vjp(G&& g, const vjp_context<Y, A>&) {
    using DG = std::remove_cvref_t<G>;
    if constexpr (Sharded<G>) {
      using D = std::remove_cvref_t<A>;
      if constexpr (DG::resolved == D::resolved)
        return DG(std::forward<G>(g));
      else
        return ::xshard::constrain<typename D::spec_type>(g);
    } else {
      return DG(std::forward<G>(g));
    }
  }
  template <class Y, class A>
  static consteval node_collectives forward_collectives() {
    if constexpr (Sharded<A>)
      return detail::collectives_of(redistribute_plan<A, S>(), 0);
    else
      return {};
  }
  template <class Y, class A>
  static consteval node_collectives backward_collectives() {
    if constexpr (Sharded<A>) {
      using D = std::remove_cvref_t<A>;
      if constexpr (std::remove_cvref_t<Y>::resolved == D::resolved)
        return {};
      else
        return detail::collectives_of(redistribute_plan<Y, typename D::spec_type>(), -1);
    } else {
      return {};
    }
  }
  /// The gradient handed over still holding partial sums over axes P (the
  /// graph sums its readers' partial gradients and lets this node reduce
  /// them, program::summed_reduce_axes): one redistribution to the
  /// operand's layout, which reduce-scatters where the operand splits a dim
  /// over P (sequence parallelism's gathered input) instead of an
  /// all-reduce and a slice, and all-reduces otherwise.
  static constexpr bool takes_partial_gradient = true;
  template <axis_set P, class Y>
  using partial_t = sharded<typename std::remove_cvref_t<Y>::value_type, std::remove_cvref_t<Y>::rank,
                            typename std::remove_cvref_t<Y>::mesh_type, typename std::remove_cvref_t<Y>::spec_type, P>;
  template <axis_set P, class G, class Y, class A>
  static auto vjp_partial(G&& g, const vjp_context<Y, A>&) {
    static_assert(std::is_rvalue_reference_v<G&&> && !std::is_const_v<std::remove_reference_t<G>>);
    partial_t<P, G> pg(g.device(), g.global_shape(), std::move(g.local()));
    return ::xshard::constrain<typename std::remove_cvref_t<A>::spec_type>(std::move(pg));
  }
  template <axis_set P, class Y, class A>
  static consteval node_collectives backward_collectives_partial() {
    return detail::collectives_of(redistribute_plan<partial_t<P, Y>, typename std::remove_cvref_t<A>::spec_type>(), -1);
  }
};

/// A named or traced value is its op's.
template <fixed_string Name, class Op>
struct rule<named_op<Name, Op>> : rule<Op> {};
template <fixed_string Scope, class Op>
struct rule<traced_op<Scope, Op>> : rule<Op> {};

}  // namespace xshard::graph
