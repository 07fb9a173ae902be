// xshard/einsum/einsum.hpp - einsum over xtensor: typed and run-time faces.
//
// Example (compiled in tests/compile/doc_einsum.cpp):
//   xt::xtensor<float, 3> y = xshard::einsum<"...n,mn->...m">(x, w);  // checked at compile time
//   xt::xarray<float> y2 = xshard::einsum("...n,mn->...m", x, w);      // same parser, at run time
//   xshard::einsum_into<"bij,bjk->bik">(out, a, b);                   // no allocation
//   xt::xtensor<float, 3> h = xshard::einsum_bias<"...n,mn->...m">(bias, x, w);  // + bias in the GEMM
//
// Operands: xt::xtensor, xt::xtensor_fixed, xt::xarray and strided views
// (transposed, sliced) are read in place through their strides; any other
// expression is evaluated once. float or double, all operands alike.
// The result is xt::xtensor<T, R> when every operand's rank is static (R is
// computed from the equation), else xt::xarray<T>.
//
// Execution: one operand takes the reduction path (einsum/kernel.hpp's
// run_reduce: summed labels, diagonals as summed strides); two are one
// strided batched GEMM (einsum/kernel.hpp) whose groups are
//   batch = labels in A, B and the output   M = in A and the output only
//   N     = in B and the output only        K = not in the output
// (a label summed inside one operand is in K with stride 0 in the other;
// size-1 broadcasting is stride 0; a diagonal sums the strides); three or
// more follow plan_einsum's greedy pairwise order through dense intermediates.
// einsum_bias adds a rank-1 bias along the result's last dim as the GEMM
// stores its result (the micro-kernel's epilogue, after the last K block),
// in the order of a separate `+ bias`, so with the same bits.
// The typed API on one or two small row-major operands of static shape
// (xt::xtensor_fixed) runs einsum/fixed.hpp instead: the same groups planned
// at compile time, loops with constant bounds, no allocation by einsum_into.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "../core/diagnostics.hpp"
#include "../core/error.hpp"
#include "../core/fixed_string.hpp"
#include "../core/tensor_traits.hpp"
#include "../core/text.hpp"
#include "../core/workspace.hpp"
#include "fixed.hpp"
#include "kernel.hpp"
#include "parse.hpp"
#include "plan.hpp"

namespace xshard {

namespace detail {

/// An operand as the engine sees it: data, shape, strides (elements), labels.
/// Run-time only (bounded_vector: no stores to the unused items, which
/// were 8 KB per einsum call).
template <class T>
struct strided_operand {
  const T* data = nullptr;
  bounded_vector<std::int64_t, max_einsum_rank> shape;
  bounded_vector<std::ptrdiff_t, max_einsum_rank> strides;
  bounded_vector<int, max_einsum_rank> labels;
};

/// The operands of one einsum call, and the labels of one group of a
/// contraction (batch, M, N or K): bounded lists, so a call allocates none.
template <class T>
using operand_list = bounded_vector<strided_operand<T>, max_einsum_operands>;
using label_list = static_vector<int, max_einsum_labels>;
/// One group of a contraction's labels (batch, M, N or K), per call: a
/// bounded list (a static_vector here zeroed 304 bytes per group per call).
using label_group = bounded_vector<int, max_einsum_labels>;
/// An output's shape and strides (its rank is the output labels').
using extent_list = static_vector<std::size_t, max_einsum_rank>;
using stride_list = static_vector<std::ptrdiff_t, max_einsum_rank>;

/// Per label id: the summed stride of its dims (a diagonal), 0 when the
/// operand broadcasts it (extent 1 against a larger extent). Only the ids
/// below the call's label bound are set and read (zeroing all of them cost
/// 684 bytes of stores per table, three or four tables per contraction).
struct label_strides {
  int n;  // ids [0, n) are set
  std::ptrdiff_t s[max_einsum_labels];
  bool has[max_einsum_labels];

  explicit label_strides(const einsum_extents& ext) : n(ext.label_bound) {
    std::fill_n(s, n, std::ptrdiff_t{0});
    std::fill_n(has, n, false);
  }
  label_strides(const label_strides& o) : n(o.n) { *this = o; }
  label_strides& operator=(const label_strides& o) {
    n = o.n;
    std::copy_n(o.s, n, s);
    std::copy_n(o.has, n, has);
    return *this;
  }
};

template <class T>
label_strides strides_by_label(const strided_operand<T>& op, const einsum_extents& ext) {
  label_strides r(ext);
  for (std::size_t d = 0; d < op.labels.size(); ++d) {
    const int id = op.labels[d];
    r.has[id] = true;
    if (op.shape[d] == 1 && ext.of[id] != 1) continue;
    r.s[id] += op.strides[d];
  }
  return r;
}

/// The output's strides by label (0 for extent-1 labels).
inline label_strides output_strides_by_label(std::span<const int> labels, std::span<const std::ptrdiff_t> strides,
                                             const einsum_extents& ext) {
  label_strides r(ext);
  for (std::size_t d = 0; d < labels.size(); ++d) {
    r.has[labels[d]] = true;
    r.s[labels[d]] = ext.of[labels[d]] == 1 ? 0 : strides[d];
  }
  return r;
}

/// Orders a label group by decreasing |stride| in `s`, so the last label
/// (the fastest in the offset tables) has the smallest stride.
/// An insertion sort: stable like std::stable_sort, so the same order, and a
/// group is a few labels (std::stable_sort here cost every including TU
/// its instantiation).
inline void sort_by_stride(label_group& labels, const label_strides& s) {
  auto abs_stride = [&s](int id) { return s.s[id] < 0 ? -s.s[id] : s.s[id]; };
  for (std::size_t i = 1; i < labels.size(); ++i) {
    const int x = labels[i];
    std::size_t j = i;
    for (; j > 0 && abs_stride(x) > abs_stride(labels[j - 1]); --j) labels[j] = labels[j - 1];
    labels[j] = x;
  }
}

/// Offset tables of a label group for several operands (odometer order:
/// the last label varies fastest).
inline void fill_offsets(const label_group& labels, const einsum_extents& ext,
                         std::initializer_list<std::pair<const label_strides*, offsets*>> outs) {
  std::size_t count = 1;
  for (int id : labels) count *= static_cast<std::size_t>(ext.of[id]);
  for (const auto& o : outs) {
    // Label by label, slowest first: each entry so far is followed by its
    // steps along the next label (the odometer order in count steps).
    offsets& out = *o.second;
    out.resize(count);
    if (count == 0) continue;
    out[0] = 0;
    std::size_t filled = 1;
    for (int id : labels) {
      const std::size_t extent = static_cast<std::size_t>(ext.of[id]);
      const std::ptrdiff_t stride = o.first->s[id];
      for (std::size_t i = filled; i-- > 0;) {  // backwards: entry i moves to i * extent first
        const std::ptrdiff_t base = out[i];
        std::ptrdiff_t* const dst = out.data() + i * extent;
        for (std::size_t j = 0; j < extent; ++j) dst[j] = base + static_cast<std::ptrdiff_t>(j) * stride;
      }
      filled *= extent;
    }
  }
}

/// What fills a contraction's offset tables: per group (batch, M, N, K) its
/// label count, then per label its extent and its strides in A, B and C.
/// A bounded list: a call writes, compares and copies the entries it uses
/// (a static_vector zeroed all 2.4 KB of them per call).
using gemm_key = bounded_vector<std::ptrdiff_t, 4 + 4 * max_einsum_labels>;

/// The offset tables of this thread's last contractions, by key (least
/// recently used out).
template <class T>
struct gemm_cache {
  static constexpr std::size_t slots = 32;  // a decoder block's forward and backward contractions (about 18) all fit
  struct slot {
    gemm_key key;
    std::uint64_t used = 0;  // 0: empty
    gemm_problem<T> problem;
  };
  /// The problem whose tables `key` describes; fill(p) fills them first on
  /// a miss.
  template <class Fill>
  static gemm_problem<T>& find(const gemm_key& key, Fill&& fill) {
    thread_local std::array<slot, slots> cache;
    thread_local std::uint64_t clock = 0;
    slot* victim = &cache[0];
    for (slot& s : cache) {
      if (s.used != 0 && s.key == key) {
        s.used = ++clock;
        return s.problem;
      }
      if (s.used < victim->used) victim = &s;
    }
    victim->used = 0;  // a fill that throws leaves the slot empty
    fill(victim->problem);
    victim->key = key;
    victim->used = ++clock;
    return victim->problem;
  }
};

/// A bias added along the output's last dim (einsum_bias): its values and
/// their stride.
template <class T>
struct bias_operand {
  const T* data = nullptr;
  std::ptrdiff_t stride = 1;
};

/// C[..., l] = bias[l] over C's whole index space, or 0 without a bias (a
/// bias the GEMM's epilogue cannot add, C then accumulated into; or a
/// result with nothing to sum). @pre C has rank >= 1 when a bias is given.
template <class T>
void fill_output(T* c, std::span<const int> c_labels, std::span<const std::ptrdiff_t> c_strides,
                 const einsum_extents& ext, const bias_operand<T>* bias) {
  const std::size_t rank = c_labels.size();
  extent_list idx, shape;
  for (std::size_t d = 0; d < rank; ++d) {
    idx.push_back(0);
    shape.push_back(static_cast<std::size_t>(ext.of[c_labels[d]]));
    if (shape[d] == 0) return;
  }
  while (true) {
    std::ptrdiff_t at = 0;
    for (std::size_t d = 0; d < rank; ++d) at += static_cast<std::ptrdiff_t>(idx[d]) * c_strides[d];
    c[at] = bias ? bias->data[static_cast<std::ptrdiff_t>(idx[rank - 1]) * bias->stride] : T(0);
    std::size_t d = rank;
    while (d > 0 && ++idx[d - 1] == shape[d - 1]) idx[--d] = 0;
    if (d == 0) return;
  }
}

/// C (labels c_labels, strides c_strides) (+)= contraction of A and B
/// (+ bias along C's last label: in the GEMM's epilogue when that label is
/// one of N's, else written into C first).
template <class T>
void contract_pair(strided_operand<T> a, strided_operand<T> b, T* c, std::span<const int> c_labels,
                   std::span<const std::ptrdiff_t> c_strides, const einsum_extents& ext, bool accumulate,
                   const bias_operand<T>* bias = nullptr) {
  const label_strides sc = output_strides_by_label(c_labels, c_strides, ext);
  label_strides sa = strides_by_label(a, ext), sb = strides_by_label(b, ext);
  // Make the output's fastest label an N label so C rows are contiguous.
  std::ptrdiff_t best = -1;
  int fastest = -1;
  for (std::size_t d = 0; d < c_labels.size(); ++d) {
    const std::ptrdiff_t s = sc.s[c_labels[d]] < 0 ? -sc.s[c_labels[d]] : sc.s[c_labels[d]];
    if (ext.of[c_labels[d]] > 1 && (best < 0 || s < best)) best = s, fastest = c_labels[d];
  }
  if (fastest >= 0 && sa.has[fastest] && !sb.has[fastest]) {
    std::swap(a, b);
    std::swap(sa, sb);
  }
  // A's and B's labels once each, in increasing id order (the groups'
  // order before sorting by stride).
  label_group ids;
  for (const strided_operand<T>* op : {&a, &b})
    for (int id : op->labels) {
      std::size_t at = ids.size();
      while (at > 0 && ids[at - 1] > id) --at;
      if (at > 0 && ids[at - 1] == id) continue;
      ids.push_back(id);
      for (std::size_t j = ids.size() - 1; j > at; --j) ids[j] = ids[j - 1];
      ids[at] = id;
    }
  label_group batch, m, n, k;
  for (int id : ids) {
    if (sc.has[id]) {
      if (sa.has[id] && sb.has[id])
        batch.push_back(id);
      else if (sa.has[id])
        m.push_back(id);
      else
        n.push_back(id);
    } else {
      k.push_back(id);
    }
  }
  for (int id : c_labels)  // output labels that neither operand has (extent 1)
    if (!sa.has[id] && !sb.has[id]) batch.push_back(id);
  sort_by_stride(batch, sc);
  sort_by_stride(m, sc);
  sort_by_stride(n, sc);
  sort_by_stride(k, sa);
  // The offset tables of the last few contractions live on this thread,
  // keyed by what fills them: a training step's GEMMs (a handful of shapes,
  // over and over) neither refill nor rescan a table, and a contraction of a
  // shape seen before allocates nothing. One contraction runs at a time per
  // thread (its GEMM's tasks run on other threads, on this one).
  gemm_key key;
  for (const label_group* group : {&batch, &m, &n, &k}) {
    key.push_back(static_cast<std::ptrdiff_t>(group->size()));
    for (int id : *group) {
      key.push_back(ext.of[id]);
      key.push_back(sa.s[id]);
      key.push_back(sb.s[id]);
      key.push_back(sc.s[id]);
    }
  }
  gemm_problem<T>& g = gemm_cache<T>::find(key, [&](gemm_problem<T>& p) {
    fill_offsets(batch, ext, {{&sa, &p.a_batch}, {&sb, &p.b_batch}, {&sc, &p.c_batch}});
    fill_offsets(m, ext, {{&sa, &p.a_m}, {&sc, &p.c_m}});
    fill_offsets(n, ext, {{&sb, &p.b_n}, {&sc, &p.c_n}});
    fill_offsets(k, ext, {{&sa, &p.a_k}, {&sb, &p.b_k}});
    p.describe();
  });
  g.a = a.data;
  g.b = b.data;
  g.c = c;
  g.bias = nullptr;
  if (bias) {
    const int last = c_labels.back();
    bool in_n = false;
    for (int id : n) in_n = in_n || id == last;
    if (!in_n) {  // C's last label is not along N (e.g. a batch label): C starts as the bias
      fill_output(c, c_labels, c_strides, ext, bias);
      accumulate = true;
    } else {
      // Column j's bias (the odometer order of N's table), then zeros to a
      // whole panel of the widest kernel (32 elements) past N.
      label_strides by_bias(ext);
      by_bias.has[last] = true;
      by_bias.s[last] = bias->stride;
      thread_local offsets at;
      thread_local std::vector<T> columns;
      fill_offsets(n, ext, {{&by_bias, &at}});
      columns.assign(at.size() + 32, T(0));
      for (std::size_t j = 0; j < at.size(); ++j) columns[j] = bias->data[at[j]];
      g.bias = columns.data();
    }
  }
  g.accumulate = accumulate;
  run_gemm(g);
}

/// C (labels c_labels) (+)= A summed over its labels not in C: the
/// single-operand path (reductions, diagonals, permutations).
template <class T>
void reduce_single(const strided_operand<T>& a, T* c, std::span<const int> c_labels,
                   std::span<const std::ptrdiff_t> c_strides, const einsum_extents& ext, bool accumulate) {
  const label_strides sc = output_strides_by_label(c_labels, c_strides, ext);
  const label_strides sa = strides_by_label(a, ext);
  label_group m, k;
  for (int id : c_labels) m.push_back(id);
  for (int id = 0; id < ext.label_bound; ++id)
    if (sa.has[id] && !sc.has[id]) k.push_back(id);
  sort_by_stride(m, sc);
  sort_by_stride(k, sa);
  thread_local reduce_problem<T> r;  // as contract_pair's tables
  r.a = a.data;
  r.c = c;
  r.accumulate = accumulate;
  fill_offsets(m, ext, {{&sa, &r.a_m}, {&sc, &r.c_m}});
  fill_offsets(k, ext, {{&sa, &r.a_k}});
  run_reduce(r);
}

inline stride_list row_major_strides(std::span<const std::int64_t> shape) {
  stride_list s;
  for (std::size_t d = 0; d < shape.size(); ++d) s.push_back(1);
  for (std::size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * static_cast<std::ptrdiff_t>(shape[d]);
  return s;
}

/// Runs a bound equation on strided operands into C (3+ operands: ops is
/// used up, each contracted pair replaced by its intermediate).
template <class T>
void execute_einsum(const einsum_binding& bind, const einsum_extents& ext, operand_list<T>& ops, T* c,
                    std::span<const std::ptrdiff_t> c_strides, bool accumulate,
                    const contraction_order* static_plan = nullptr, const bias_operand<T>* bias = nullptr) {
  std::span<const int> c_labels(bind.output_labels.begin(), bind.output_labels.end());
  if (ops.size() == 1) {
    if (bias) {
      fill_output(c, c_labels, c_strides, ext, bias);
      accumulate = true;
    }
    reduce_single(ops[0], c, c_labels, c_strides, ext, accumulate);
    return;
  }
  if (ops.size() == 2) {  // the one step any plan has: no plan to make
    contract_pair(ops[0], ops[1], c, c_labels, c_strides, ext, accumulate, bias);
    return;
  }
  const contraction_order plan = static_plan ? *static_plan : plan_einsum(bind, ext);  // compile-time plan if given
  std::vector<std::vector<T>> temps;  // the intermediates of 3+ operands (none for two)
  if (plan.steps.size() > 1) temps.reserve(plan.steps.size() - 1);
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    const einsum_step& st = plan.steps[s];
    const strided_operand<T> lhs = ops[static_cast<std::size_t>(st.lhs)], rhs = ops[static_cast<std::size_t>(st.rhs)];
    ops.erase_at(static_cast<std::size_t>(st.rhs));
    ops.erase_at(static_cast<std::size_t>(st.lhs));
    if (s + 1 == plan.steps.size()) {
      contract_pair(lhs, rhs, c, c_labels, c_strides, ext, accumulate, bias);
      return;
    }
    strided_operand<T> t;
    std::int64_t n = 1;
    for (int id : st.result) {
      t.labels.push_back(id);
      t.shape.push_back(ext.of[id]);
      n *= ext.of[id];
    }
    const auto strides = row_major_strides(std::span<const std::int64_t>(t.shape.begin(), t.shape.end()));
    for (std::ptrdiff_t x : strides) t.strides.push_back(x);
    temps.emplace_back(static_cast<std::size_t>(n), T(0));
    t.data = temps.back().data();
    contract_pair(lhs, rhs, temps.back().data(), std::span<const int>(t.labels.begin(), t.labels.end()),
                  std::span<const std::ptrdiff_t>(strides.begin(), strides.end()), ext, false);
    ops.push_back(t);
  }
}

/// A tensor expression as a strided operand; evaluates it into `keep` when
/// it has no strided data to read in place.
template <class T, class E>
strided_operand<T> as_operand(const E& e, std::optional<xt::xarray<T>>& keep) {
  using D = std::remove_cvref_t<E>;
  static_assert(std::is_same_v<typename D::value_type, T>,
                "xshard::einsum: all operands must have the same value type");
  strided_operand<T> op;
  if (e.dimension() > max_einsum_rank) {
    diagnostic d;
    d.code = errc::einsum_too_many;
    d.a = static_cast<std::int64_t>(e.dimension());
    d.b = static_cast<std::int64_t>(max_einsum_rank);
    throw error(describe(d));
  }
  if constexpr (xt::has_data_interface<D>::value) {
    op.data = e.data() + e.data_offset();
    for (std::size_t d = 0; d < e.dimension(); ++d) {
      op.shape.push_back(static_cast<std::int64_t>(e.shape()[d]));
      op.strides.push_back(static_cast<std::ptrdiff_t>(e.strides()[d]));
    }
  } else {
    keep.emplace(e);
    op = as_operand<T>(*keep, keep);
  }
  return op;
}

/// The binding of an equation to operands of run-time ranks; throws
/// xshard::error naming the offender (the equation text is quoted).
template <class T>
einsum_binding bind_ranks(const einsum_equation& eq, std::string_view text, const operand_list<T>& ops) {
  static_vector<std::int64_t, max_einsum_operands> ranks;
  for (const auto& op : ops) ranks.push_back(static_cast<std::int64_t>(op.shape.size()));
  return bind_einsum(eq, std::span<const std::int64_t>(ranks.begin(), ranks.end())).get(text);
}

/// Labels the operands' dims by `bind` and checks their extents into `ext`
/// (as constructed); throws xshard::error naming the offender.
template <class T>
void bind_operands(const einsum_binding& bind, std::string_view text, operand_list<T>& ops, einsum_extents& ext) {
  bounded_vector<std::span<const std::int64_t>, max_einsum_operands> shapes;
  for (const auto& op : ops) shapes.push_back(std::span<const std::int64_t>(op.shape.begin(), op.shape.end()));
  throw_if_error(einsum_label_extents_into(
                     bind, std::span<const std::span<const std::int64_t>>(shapes.begin(), shapes.end()), ext),
                 text);
  for (std::size_t i = 0; i < ops.size(); ++i)
    for (int id : bind.operand_labels[i]) ops[i].labels.push_back(id);
}

template <class T>
extent_list output_shape(const einsum_binding& b, const einsum_extents& ext) {
  extent_list s;
  for (int id : b.output_labels) s.push_back(static_cast<std::size_t>(ext.of[id]));
  return s;
}

template <class E>
using value_t = typename std::remove_cvref_t<E>::value_type;

template <class T, class Out>
void check_output(const Out& out, std::span<const std::size_t> shape, std::string_view text) {
  bool ok = out.dimension() == shape.size();
  for (std::size_t d = 0; ok && d < shape.size(); ++d) ok = static_cast<std::size_t>(out.shape()[d]) == shape[d];
  if (!ok) {
    throw error("xshard: einsum output has shape " + detail::shape_text(out.shape()) + " but \"" + std::string(text) +
                "\" gives " + detail::shape_text(shape));
  }
}

/// Where the result goes: given the output shape, returns its data pointer
/// and strides (allocating, or checking a caller's tensor).
template <class T>
struct output_target {
  T* data;
  stride_list strides;
  bool with_bias = true;  ///< add the call's bias, if any (false: the product alone)
};
/// A tensor's strides as an output target's.
template <class E>
stride_list strides_of(const E& e) {
  stride_list s;
  for (const auto x : e.strides()) s.push_back(static_cast<std::ptrdiff_t>(x));
  return s;
}

template <class T, class Alloc, class... E>
void einsum_run(const einsum_equation& eq, std::string_view text, Alloc&& alloc, bool accumulate,
                const contraction_order* plan, const einsum_binding* bound, const bias_operand<T>* bias,
                const E&... operands);

}  // namespace detail

// ---------------------------------------------------------------------------
// Inspection: the parsed equation as a constant.

namespace detail {
template <fixed_string Eq>
inline constexpr checked<einsum_equation> parsed_equation = parse_einsum(Eq.view());
}

/// The parsed equation (index classes via .classify(c), output via .output).
///   static_assert(einsum_equation_v<"...n,mn->...m">.classify('n') == index_class::contracted);
template <fixed_string Eq>
requires(raise<detail::parsed_equation<Eq>.diag>()) inline constexpr einsum_equation einsum_equation_v =
    detail::parsed_equation<Eq>.value;

/// The equation in canonical form with its explicit output: "ij,jk" -> "ij,jk->ik".
template <fixed_string Eq>
consteval auto einsum_canonical() {
  static_assert(raise<detail::parsed_equation<Eq>.diag>());
  return to_fixed_string<[] { return einsum_text(detail::parsed_equation<Eq>.value); }>();
}

namespace detail {

template <fixed_string Eq, std::size_t N>
constexpr diagnostic operand_count_diag() {
  diagnostic d;
  const einsum_equation& eq = parsed_equation<Eq>.value;
  if (eq.inputs.size() != N) {
    d.code = errc::einsum_operand_count;
    d.a = static_cast<std::int64_t>(eq.inputs.size());
    d.b = static_cast<std::int64_t>(N);
  }
  return d;
}

template <fixed_string Eq, class... E>
constexpr checked<einsum_binding> static_binding() {
  const std::array<std::int64_t, sizeof...(E)> ranks{tensor_rank_v<E>...};
  return bind_einsum(parsed_equation<Eq>.value, ranks);
}

template <fixed_string Eq, class... E>
constexpr diagnostic static_extents_diag() {
  const std::array<std::span<const std::int64_t>, sizeof...(E)> shapes{
      std::span<const std::int64_t>(static_extents<E>::value)...};
  return einsum_label_extents(static_binding<Eq, E...>().value, shapes).diag;
}

/// Compile-time checks of the typed API: operand count, static ranks,
/// static extents. Returns the output rank (-1 if not static).
template <fixed_string Eq, class... E>
consteval std::int64_t typed_output_rank() {
  static_assert(raise<parsed_equation<Eq>.diag>());
  if constexpr (!parsed_equation<Eq>.ok()) {
    return -1;
  } else {
    static_assert(raise<operand_count_diag<Eq, sizeof...(E)>()>());
    if constexpr (!operand_count_diag<Eq, sizeof...(E)>().ok() || ((tensor_rank_v<E> < 0) || ...)) {
      return -1;
    } else {
      static_assert(raise<static_binding<Eq, E...>().diag>());
      if constexpr (static_binding<Eq, E...>().ok() && (static_extents<E>::known && ...)) {
        static_assert(raise<static_extents_diag<Eq, E...>()>());
      }
      return static_binding<Eq, E...>().ok()
                 ? static_cast<std::int64_t>(static_binding<Eq, E...>().value.output_labels.size())
                 : -1;
    }
  }
}

/// The contraction order for 3+ operands whose extents are all static,
/// planned at compile time (nullptr otherwise: planned at run time).
template <fixed_string Eq, class... E>
constexpr contraction_order static_plan_value() {
  const std::array<std::span<const std::int64_t>, sizeof...(E)> shapes{
      std::span<const std::int64_t>(static_extents<E>::value)...};
  const einsum_binding b = static_binding<Eq, E...>().value;
  return plan_einsum(b, einsum_label_extents(b, shapes).value);
}
template <fixed_string Eq, class... E>
inline constexpr contraction_order static_plan_v = static_plan_value<Eq, E...>();

/// The binding of operands of static ranks, made at compile time (nullptr
/// when a rank is dynamic: bound at run time). A call then neither builds
/// nor copies the 1.7 KB binding.
template <fixed_string Eq, class... E>
inline constexpr einsum_binding static_binding_v = static_binding<Eq, E...>().value;
template <fixed_string Eq, class... E>
constexpr const einsum_binding* static_bound() {
  if constexpr (typed_output_rank<Eq, E...>() >= 0)
    return &static_binding_v<Eq, E...>;
  else
    return nullptr;
}

template <fixed_string Eq, class... E>
constexpr const contraction_order* static_plan() {
  if constexpr (sizeof...(E) >= 3 && (static_extents<E>::known && ...)) {
    if constexpr (typed_output_rank<Eq, E...>() >= 0 && static_extents_diag<Eq, E...>().ok())
      return &static_plan_v<Eq, E...>;
  }
  return nullptr;
}

// The fixed path (einsum/fixed.hpp): 1 or 2 operands, all static row-major
// tensors of value type T (float or double), valid for the equation, and a
// small contraction. Everything else, errors included, takes the general path.
template <fixed_string Eq, class... E>
constexpr fixed_plan fixed_plan_value() {
  const std::array<std::span<const std::int64_t>, sizeof...(E)> shapes{
      std::span<const std::int64_t>(static_extents<E>::value)...};
  const einsum_binding b = static_binding<Eq, E...>().value;
  return make_fixed_plan(b, einsum_label_extents(b, shapes).value, shapes);
}
template <fixed_string Eq, class... E>
inline constexpr fixed_plan fixed_plan_v = fixed_plan_value<Eq, E...>();

template <class E, class T>
inline constexpr bool fixed_operand_v = static_row_major_v<E>&& std::is_same_v<value_t<E>, T>;

template <fixed_string Eq, class T, class... E>
consteval bool fixed_path() {
  if constexpr (!(std::is_same_v<T, float> || std::is_same_v<T, double>) || sizeof...(E) > 2 ||
                !(fixed_operand_v<E, T> && ...)) {
    return false;
  } else if constexpr (typed_output_rank<Eq, E...>() < 0 || !static_extents_diag<Eq, E...>().ok()) {
    return false;
  } else {
    return fixed_plan_v<Eq, E...>.madds < fixed_max_madds;
  }
}

/// The output shape of a fixed-path equation.
template <fixed_string Eq, class... E>
constexpr auto fixed_output_shape() {
  constexpr std::int64_t rank = typed_output_rank<Eq, E...>();
  const std::array<std::span<const std::int64_t>, sizeof...(E)> shapes{
      std::span<const std::int64_t>(static_extents<E>::value)...};
  const einsum_binding b = static_binding<Eq, E...>().value;
  const einsum_extents ext = einsum_label_extents(b, shapes).value;
  std::array<std::size_t, static_cast<std::size_t>(rank)> shape{};
  for (std::size_t d = 0; d < shape.size(); ++d) shape[d] = static_cast<std::size_t>(ext.of[b.output_labels[d]]);
  return shape;
}

/// einsum_into's output on the fixed path: static, row-major, of value type
/// T and the equation's shape (a wrong shape keeps the general path's error).
template <fixed_string Eq, class T, class Out, class... E>
consteval bool fixed_output() {
  if constexpr (!fixed_path<Eq, T, E...>() || !static_row_major_v<Out> || std::is_const_v<Out>) {
    return false;
  } else if constexpr (!std::is_same_v<value_t<Out>, T>) {
    return false;
  } else {
    constexpr auto want = fixed_output_shape<Eq, E...>();
    constexpr auto& got = static_extents<Out>::value;
    if (want.size() != got.size()) return false;
    for (std::size_t d = 0; d < want.size(); ++d)
      if (static_cast<std::int64_t>(want[d]) != got[d]) return false;
    return true;
  }
}

/// Runs the fixed path into row-major C of the output's shape (allocates
/// nothing). @pre fixed_path<Eq, T, E...>()
template <fixed_string Eq, class T, class... E>
void fixed_einsum(T* c, const E&... operands) {
  const T* const data[] = {(operands.data() + operands.data_offset())..., nullptr};
  run_fixed<T, fixed_plan_v<Eq, E...>>(data[0], data[1], c);
}

}  // namespace detail

namespace detail {
/// A fresh result tensor of `shape` (rank R, or dynamic when R < 0).
template <class T, std::int64_t R>
auto make_result(std::span<const std::size_t> shape) {
  if constexpr (R == 0) {
    return xt::xtensor<T, 0>();  // one element; resize({}) trips GCC's -Wnonnull
  } else if constexpr (R > 0) {
    std::array<std::size_t, static_cast<std::size_t>(R)> s{};
    std::copy(shape.begin(), shape.end(), s.begin());
    return fresh_tensor<T, static_cast<std::size_t>(R)>(s);  // the current workspace's, if any
  } else {
    if (shape.empty()) return xt::xarray<T>(T(0));
    return xt::xarray<T>::from_shape(typename xt::xarray<T>::shape_type(shape.begin(), shape.end()));
  }
}
}  // namespace detail

/// einsum with subscripts checked at compile time.
template <fixed_string Eq, class E0, class... E>
auto einsum(const E0& first, const E&... rest) {
  using T = detail::value_t<E0>;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "xshard::einsum supports float and double");
  constexpr std::int64_t rank = detail::typed_output_rank<Eq, E0, E...>();
  using result = decltype(detail::make_result<T, rank>({}));
  if constexpr (detail::fixed_path<Eq, T, E0, E...>() && result::static_layout == xt::layout_type::row_major) {
    // Static shapes: plan made at compile time; only the result is allocated.
    result out;
    if constexpr (rank > 0) out = result::from_shape(detail::fixed_output_shape<Eq, E0, E...>());
    detail::fixed_einsum<Eq>(out.data(), first, rest...);
    return out;
  } else {
    // A reference to the variable template's object: a constexpr local
    // copy would be built on the stack at every call (its address is taken).
    constexpr const einsum_equation& eq = detail::parsed_equation<Eq>.value;
    result out;
    detail::einsum_run<T>(
        eq, Eq.view(),
        [&](std::span<const std::size_t> shape) {
          out = detail::make_result<T, rank>(shape);
          return detail::output_target<T>{out.data(), detail::strides_of(out)};
        },
        false, detail::static_plan<Eq, E0, E...>(), detail::static_bound<Eq, E0, E...>(), nullptr, first, rest...);
    return out;
  }
}

/// einsum with subscripts read at run time (same parser and planner).
template <class E0, class... E>
xt::xarray<detail::value_t<E0>> einsum(std::string_view equation, const E0& first, const E&... rest) {
  using T = detail::value_t<E0>;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "xshard::einsum supports float and double");
  const einsum_equation eq = parse_einsum(equation).get(equation);
  xt::xarray<T> out;
  detail::einsum_run<T>(
      eq, equation,
      [&](std::span<const std::size_t> shape) {
        out = detail::make_result<T, -1>(shape);
        return detail::output_target<T>{out.data(), detail::strides_of(out)};
      },
      false, nullptr, nullptr, nullptr, first, rest...);
  return out;
}

/// Writes the result into `out` (any strided tensor of the right shape)
/// without allocating it. @pre out does not overlap an operand (checked:
/// xshard::error otherwise).
template <fixed_string Eq, class Out, class E0, class... E>
void einsum_into(Out& out, const E0& first, const E&... rest) {
  using T = detail::value_t<E0>;
  constexpr std::int64_t rank = detail::typed_output_rank<Eq, E0, E...>();
  static_assert(rank < 0 || tensor_rank_v<Out> < 0 || tensor_rank_v<Out> == rank,
                "xshard::einsum_into: the output tensor's rank does not match the equation");
  if constexpr (detail::fixed_output<Eq, T, Out, E0, E...>()) {
    // Static shapes: no allocation; the overlap check compares storage blocks.
    T* const c = out.data() + out.data_offset();
    constexpr std::int64_t c_size = detail::static_size<Out>();
    if (detail::fixed_overlaps<T>(c, c_size, first.data() + first.data_offset(), detail::static_size<E0>()) ||
        (detail::fixed_overlaps<T>(c, c_size, rest.data() + rest.data_offset(), detail::static_size<E>()) || ...))
      throw error("xshard: einsum output overlaps an operand");
    detail::fixed_einsum<Eq>(c, first, rest...);
  } else {
    constexpr const einsum_equation& eq = detail::parsed_equation<Eq>.value;
    detail::einsum_run<T>(
        eq, Eq.view(),
        [&](std::span<const std::size_t> shape) {
          detail::check_output<T>(out, shape, Eq.view());
          return detail::output_target<T>{out.data() + out.data_offset(), detail::strides_of(out)};
        },
        false, detail::static_plan<Eq, E0, E...>(), detail::static_bound<Eq, E0, E...>(), nullptr, first, rest...);
  }
}

namespace detail {
/// einsum<Eq>(first, rest...) with `bias` added along the result's last dim
/// when its length is that dim's extent (then .second is true; else the
/// product alone, for the caller to broadcast or refuse).
template <fixed_string Eq, class B, class E0, class... E>
auto einsum_plus_bias(const B& bias, const E0& first, const E&... rest) {
  using T = value_t<E0>;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "xshard::einsum supports float and double");
  static_assert(std::is_same_v<value_t<B>, T>, "xshard::einsum_bias: the bias has the operands' value type");
  static_assert(tensor_rank_v<B> < 0 || tensor_rank_v<B> == 1, "xshard::einsum_bias: the bias has rank 1");
  constexpr std::int64_t rank = typed_output_rank<Eq, E0, E...>();
  static_assert(rank != 0, "xshard::einsum_bias: a rank-0 result has no last dim for a bias");
  std::optional<xt::xarray<T>> keep;
  const strided_operand<T> b = as_operand<T>(bias, keep);
  const bias_operand<T> bop{b.data, b.strides.empty() ? 1 : b.strides[0]};
  constexpr const einsum_equation& eq = parsed_equation<Eq>.value;
  std::pair<decltype(make_result<T, rank>({})), bool> r;
  einsum_run<T>(
      eq, Eq.view(),
      [&](std::span<const std::size_t> shape) {
        r.second = !shape.empty() && b.shape.size() == 1 && static_cast<std::size_t>(b.shape[0]) == shape.back();
        r.first = make_result<T, rank>(shape);
        return output_target<T>{r.first.data(), strides_of(r.first), r.second};
      },
      false, static_plan<Eq, E0, E...>(), static_bound<Eq, E0, E...>(), &bop, first, rest...);
  return r;
}

/// The extent of einsum<Eq>(operands...)'s last dim, read off the operands
/// (static ranks). @pre the operands fit the equation; the result has rank >= 1.
template <fixed_string Eq, class... E>
std::size_t einsum_last_extent(const E&... operands) {
  constexpr einsum_binding b = static_binding<Eq, E...>().value;
  static_assert(!b.output_labels.empty(), "xshard::einsum: a rank-0 result has no last dim");
  constexpr int last = b.output_labels[b.output_labels.size() - 1];
  std::size_t extent = 1, k = 0;
  (
      [&] {
        for (std::size_t d = 0; d < b.operand_labels[k].size(); ++d)
          if (b.operand_labels[k][d] == last) extent = std::max<std::size_t>(extent, operands.shape()[d]);
        ++k;
      }(),
      ...);
  return extent;
}
}  // namespace detail

/// einsum<Eq>(first, rest...) + bias, the bias (rank 1) running along the
/// result's last dim, as a linear layer's: added in the GEMM's epilogue (as
/// the last K block stores the result, after the product's sum: the bits of
/// a separate `+ bias`) when the result's last dim is the GEMM's N, else
/// written into the result before the product is summed in. One pass over
/// the result instead of two. A bias whose length is not the result's last
/// extent is an xshard::error naming both shapes.
template <fixed_string Eq, class B, class E0, class... E>
auto einsum_bias(const B& bias, const E0& first, const E&... rest) {
  auto r = detail::einsum_plus_bias<Eq>(bias, first, rest...);
  if (!r.second) {
    const std::size_t rank = r.first.dimension();
    throw error(std::string("xshard::einsum_bias: a bias of shape ") + detail::shape_text(bias.shape()) +
                " for a result of shape " + detail::shape_text(r.first.shape()) + " (it runs along the last dim" +
                (rank == 0 ? ", which a rank-0 result lacks" : "") + ") in '" + std::string(Eq.view()) + "'");
  }
  return std::move(r.first);
}

namespace detail {

template <class T, class Alloc>
void einsum_run_bound(const einsum_binding& bind, std::string_view text, Alloc& alloc, bool accumulate,
                      const contraction_order* plan, const bias_operand<T>* bias, operand_list<T>& ops);

template <class T, class Alloc, class... E>
void einsum_run(const einsum_equation& eq, std::string_view text, Alloc&& alloc, bool accumulate,
                const contraction_order* plan, const einsum_binding* bound, const bias_operand<T>* bias,
                const E&... operands) {
  if (bias && accumulate) throw error("xshard: an einsum with a bias does not accumulate");
  if (sizeof...(E) > max_einsum_operands) {
    diagnostic d;
    d.code = errc::einsum_operand_count;
    d.a = static_cast<std::int64_t>(eq.inputs.size());
    d.b = static_cast<std::int64_t>(sizeof...(E));
    throw error(describe(d, text));
  }
  // Storage for operands with no strided data (expressions, evaluated);
  // none is made when every operand has its data.
  constexpr bool evaluates = (!xt::has_data_interface<std::remove_cvref_t<E>>::value || ...);
  std::array<std::optional<xt::xarray<T>>, evaluates ? sizeof...(E) : 1> keep;
  operand_list<T> ops;
  std::size_t i = 0;
  ((ops.push_back(as_operand<T>(operands, keep[evaluates ? i : 0])), ++i), ...);
  if (bound) {  // made at compile time (static ranks)
    einsum_run_bound<T>(*bound, text, alloc, accumulate, plan, bias, ops);
  } else {
    const einsum_binding made = bind_ranks<T>(eq, text, ops);
    einsum_run_bound<T>(made, text, alloc, accumulate, plan, bias, ops);
  }
}

/// einsum_run once the equation is bound to the operands' ranks.
template <class T, class Alloc>
void einsum_run_bound(const einsum_binding& bind, std::string_view text, Alloc& alloc, bool accumulate,
                      const contraction_order* plan, const bias_operand<T>* bias, operand_list<T>& ops) {
  einsum_extents ext;
  bind_operands<T>(bind, text, ops, ext);
  const extent_list shape = output_shape<T>(bind, ext);
  const output_target<T> target = alloc(std::span<const std::size_t>(shape.begin(), shape.end()));
  if (!target.with_bias) bias = nullptr;
  T* const out = target.data;
  const stride_list& out_strides = target.strides;
  // Refuse an output that overlaps an operand: the kernel reads operands
  // while writing the output. An empty output overlaps nothing (and its data
  // pointer may be null, which no offset may be added to).
  std::ptrdiff_t lo = 0, hi = 0;
  bool out_empty = false;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    out_empty = out_empty || shape[d] == 0;
    if (shape[d] > 0) (out_strides[d] < 0 ? lo : hi) += out_strides[d] * static_cast<std::ptrdiff_t>(shape[d] - 1);
  }
  for (const auto& op : ops) {
    if (out_empty) break;
    std::ptrdiff_t olo = 0, ohi = 0;
    bool empty = false;
    for (std::size_t d = 0; d < op.shape.size(); ++d) {
      empty = empty || op.shape[d] == 0;
      (op.strides[d] < 0 ? olo : ohi) += op.strides[d] * (op.shape[d] - 1);
    }
    if (!empty && op.data + olo <= out + hi && out + lo <= op.data + ohi)
      throw error("xshard: einsum output overlaps an operand");
  }
  // A label of extent 0 leaves nothing to sum: the output is empty or zero.
  // The kernels never see such a problem (an empty operand's data may be
  // null, and no offset may be added to a null pointer).
  bool zero_extent = false;
  for (const auto& op : ops)  // every used label is an operand's
    for (int id : op.labels) zero_extent = zero_extent || ext.of[id] == 0;
  if (zero_extent) {
    if (accumulate || out_empty) return;
    // Nothing summed: zeros, or the bias alone.
    fill_output(out, std::span<const int>(bind.output_labels.begin(), bind.output_labels.end()),
                std::span<const std::ptrdiff_t>(out_strides.begin(), out_strides.end()), ext, bias);
    return;
  }
  execute_einsum<T>(bind, ext, ops, out, std::span<const std::ptrdiff_t>(out_strides.begin(), out_strides.end()),
                    accumulate, plan, bias);
}

}  // namespace detail
}  // namespace xshard
