// xshard/einsum/grad.hpp - gradients of einsum, derived from the equation.
//
// For y = einsum(eq, x0, ..., xn-1) and operand i, dL/dxi is an einsum of
// the output gradient and the other operands whose output is xi's term:
//
// Example (compiled in tests/compile/doc_einsum.cpp):
//   static_assert(xshard::einsum_grad<"...n,mn->...m", 0>() == "...m,mn->...n");  // dx of linear
//   static_assert(xshard::einsum_grad<"...n,mn->...m", 1>() == "...m,...n->mn");  // dW of linear
//   static_assert(xshard::broadcast_grad<"...m", "m">() == "...m->m");            // db of a bias add
//
// The equation's output is xi's term with what einsum cannot write removed:
// a repeated letter (a diagonal) appears once, and letters (or the ellipsis)
// found in no other input are dropped. einsum_vjp then puts the result into
// xi's shape: it embeds diagonals, broadcasts along the dropped labels, and
// sums over dims that xi broadcast from extent 1 (or over ellipsis dims xi
// does not have).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "einsum.hpp"
#include "parse.hpp"

namespace xshard {

/// The gradient equation of operand `i`: inputs are the output term then the
/// other operands' terms in order.
constexpr checked<einsum_equation> derive_grad_equation(const einsum_equation& eq, std::size_t i) {
  checked<einsum_equation> out;
  if (i >= eq.inputs.size()) {
    out.diag.code = errc::einsum_operand_count;
    out.diag.a = static_cast<std::int64_t>(eq.inputs.size());
    out.diag.b = static_cast<std::int64_t>(i) + 1;
    return out;
  }
  einsum_equation& g = out.value;
  g.explicit_output = true;
  g.inputs.push_back(eq.output);
  for (std::size_t j = 0; j < eq.inputs.size(); ++j)
    if (j != i) g.inputs.push_back(eq.inputs[j]);
  const einsum_term& t = eq.inputs[i];
  for (std::size_t k = 0; k < t.labels.size(); ++k) {
    const char c = t.labels[k];
    if (g.output.count(c) > 0) continue;  // a diagonal: once
    if (g.inputs_with(c) == 0) continue;  // summed inside xi only: broadcast later
    g.output.labels.push_back(c);
    g.output.columns.push_back(0);
  }
  return out;
}

/// The gradient equation of a broadcast (e.g. a bias add): the output
/// gradient summed over the dims the input was broadcast along.
constexpr checked<einsum_equation> derive_broadcast_grad(std::string_view out_term, std::string_view in_term) {
  text_builder t;
  t << in_term << "->" << in_term;  // parse in_term once to validate it as a term
  checked<einsum_equation> in = parse_einsum(t.view());
  checked<einsum_equation> out;
  if (!in.ok()) {
    out.diag = in.diag;
    return out;
  }
  text_builder o;
  o << out_term << "->" << out_term;
  checked<einsum_equation> outp = parse_einsum(o.view());
  if (!outp.ok()) {
    out.diag = outp.diag;
    return out;
  }
  out.value.explicit_output = true;
  out.value.inputs.push_back(outp.value.inputs[0]);
  for (std::size_t k = 0; k < in.value.inputs[0].labels.size(); ++k) {
    const char c = in.value.inputs[0].labels[k];
    if (out.value.inputs[0].count(c) == 0) {
      out.diag = detail::einsum_at(errc::einsum_output_unknown, static_cast<int>(k) + 1, c);
      return out;
    }
    out.value.output.labels.push_back(c);
    out.value.output.columns.push_back(0);
  }
  return out;
}

namespace detail {
template <fixed_string Eq, std::size_t I>
inline constexpr checked<einsum_equation> grad_equation = derive_grad_equation(parsed_equation<Eq>.value, I);
template <fixed_string Out, fixed_string In>
inline constexpr checked<einsum_equation> broadcast_equation = derive_broadcast_grad(Out.view(), In.view());
}  // namespace detail

/// The gradient equation of operand I as text, at compile time.
template <fixed_string Eq, std::size_t I>
consteval auto einsum_grad() {
  static_assert(raise<detail::parsed_equation<Eq>.diag>());
  static_assert(raise<detail::grad_equation<Eq, I>.diag>());
  return to_fixed_string<[] { return einsum_text(detail::grad_equation<Eq, I>.value); }>();
}

/// The gradient equation of a broadcast from term In to term Out.
template <fixed_string Out, fixed_string In>
consteval auto broadcast_grad() {
  static_assert(raise<detail::broadcast_equation<Out, In>.diag>());
  return to_fixed_string<[] { return einsum_text(detail::broadcast_equation<Out, In>.value); }>();
}

/// Run-time: the gradient equation of operand i of `equation`.
inline std::string einsum_grad_equation(std::string_view equation, std::size_t i) {
  const einsum_equation eq = parse_einsum(equation).get(equation);
  return einsum_text(derive_grad_equation(eq, i).get(equation)).str();
}

namespace detail {

/// Puts a reduced gradient `g` (labels g_labels) into operand `op`'s shape
/// (labels op_labels): diagonals embedded, dropped labels broadcast, labels
/// the operand has at extent 1 (or lacks) summed.
template <class T>
void scatter_grad(const T* g, std::span<const std::int64_t> g_shape, std::span<const int> g_labels, T* out,
                  std::span<const std::int64_t> out_shape, std::span<const int> out_labels) {
  // Iterate over every label of either side; extents from whichever has it
  // at more than 1.
  std::vector<int> labels;
  std::vector<std::int64_t> extent;
  auto add = [&](int id, std::int64_t n) {
    for (std::size_t k = 0; k < labels.size(); ++k)
      if (labels[k] == id) {
        extent[k] = std::max(extent[k], n);
        return;
      }
    labels.push_back(id);
    extent.push_back(n);
  };
  for (std::size_t d = 0; d < g_labels.size(); ++d) add(g_labels[d], g_shape[d]);
  for (std::size_t d = 0; d < out_labels.size(); ++d) add(out_labels[d], out_shape[d]);
  std::int64_t total = 1;
  for (std::int64_t n : extent) total *= n;
  std::size_t out_size = 1;
  for (std::int64_t n : out_shape) out_size *= static_cast<std::size_t>(n);
  std::fill(out, out + out_size, T(0));
  if (total == 0) return;
  auto strides_for = [&](std::span<const std::int64_t> shape, std::span<const int> ids) {
    std::vector<std::int64_t> s(labels.size(), 0);
    std::int64_t stride = 1;
    for (std::size_t d = ids.size(); d-- > 0;) {
      for (std::size_t k = 0; k < labels.size(); ++k)
        if (labels[k] == ids[d] && shape[d] != 1) s[k] += stride;
      stride *= shape[d];
    }
    return s;
  };
  const auto gs = strides_for(g_shape, g_labels), os = strides_for(out_shape, out_labels);
  std::vector<std::int64_t> idx(labels.size(), 0);
  std::int64_t go = 0, oo = 0;
  for (std::int64_t it = 0; it < total; ++it) {
    out[oo] += g[go];
    for (std::size_t k = labels.size(); k-- > 0;) {
      go += gs[k];
      oo += os[k];
      if (++idx[k] < extent[k]) break;
      go -= gs[k] * extent[k];
      oo -= os[k] * extent[k];
      idx[k] = 0;
    }
  }
}

/// A shape as signed extents, bounded (no allocation).
using extent_list64 = static_vector<std::int64_t, max_einsum_rank>;

/// A range's elements in a bounded list L. @pre the binding checked the
/// ranks (no more than L's capacity).
template <class L, class R>
L bounded(const R& r) {
  L out;
  for (const auto v : r) out.push_back(static_cast<std::remove_cvref_t<decltype(out[0])>>(v));
  return out;
}

/// Refuses an output gradient whose shape is not the forward output's (the
/// scatter below indexes the operand's gradient by the gradient's extents);
/// returns each label's extent. Allocates nothing unless it throws.
template <class G, class... E>
einsum_extents check_output_gradient(const einsum_binding& fb, const G& gy, std::string_view text, const E&... ops) {
  const std::array<extent_list64, sizeof...(E)> s{bounded<extent_list64>(ops.shape())...};
  std::array<std::span<const std::int64_t>, sizeof...(E)> shapes{};
  for (std::size_t i = 0; i < sizeof...(E); ++i) shapes[i] = std::span<const std::int64_t>(s[i].begin(), s[i].end());
  const einsum_extents ext =
      einsum_label_extents(fb, std::span<const std::span<const std::int64_t>>(shapes.data(), shapes.size())).get(text);
  auto what = [&] { return "xshard: einsum_vjp \"" + std::string(text) + "\": the output gradient "; };
  if (gy.dimension() != fb.output_labels.size())
    throw error(what() + "has rank " + std::to_string(gy.dimension()) + ", the output " +
                std::to_string(fb.output_labels.size()));
  for (std::size_t d = 0; d < fb.output_labels.size(); ++d)
    if (static_cast<std::int64_t>(gy.shape()[d]) != ext.of[fb.output_labels[d]])
      throw error(what() + "has extent " + std::to_string(gy.shape()[d]) + " in dim " + std::to_string(d) +
                  ", the output " + std::to_string(ext.of[fb.output_labels[d]]));
  return ext;
}

/// The j-th operand other than operand I.
template <std::size_t I>
constexpr std::size_t skip_index(std::size_t j) {
  if constexpr (I == 0)
    return j + 1;
  else
    return j < I ? j : j + 1;
}

/// The labels of operand I of einsum<Eq> (xl, its ellipsis dims
/// right-aligned to the forward's broadcast ellipsis) and of operand I's
/// gradient einsum's result (gl, its ellipsis ids shifted to line up with
/// the forward binding fb). Bounded lists: no allocation.
template <fixed_string Eq, std::size_t I, std::size_t N>
std::pair<label_list, label_list> grad_labels(const einsum_binding& fb, std::int64_t gy_rank,
                                              const std::array<std::int64_t, N>& ranks) {
  static constexpr auto grad_text = einsum_grad<Eq, I>();
  constexpr const einsum_equation& geq = grad_equation<Eq, I>.value;
  std::array<std::int64_t, N> granks{gy_rank};
  for (std::size_t j = 0, k = 1; j < N; ++j)
    if (j != I) granks[k++] = ranks[j];
  const einsum_binding gb = bind_einsum(geq, granks).get(grad_text.view());
  label_list gl;
  for (int id : gb.output_labels)
    gl.push_back(id >= einsum_letter_ids ? id + (fb.ellipsis_dims - gb.ellipsis_dims) : id);
  return {bounded<label_list>(fb.operand_labels[I]), gl};
}

/// The static rank of the gradient einsum's result (Text: operand I's
/// gradient equation, its operands G and the other operands of Ops), or -1.
template <fixed_string Text, std::size_t I, class G, class Ops, std::size_t... J>
consteval std::int64_t grad_output_rank(std::index_sequence<J...>) {
  return typed_output_rank<Text, G, std::tuple_element_t<skip_index<I>(J), Ops>...>();
}

}  // namespace detail

/// The gradient of operand I of einsum<Eq>(ops...) given the output
/// gradient `gy`: same shape as operand I.
template <fixed_string Eq, std::size_t I, class G, class... E>
auto einsum_vjp(const G& gy, const E&... ops) {
  using T = detail::value_t<G>;
  constexpr const einsum_equation& eq = detail::parsed_equation<Eq>.value;
  static constexpr auto grad_text = einsum_grad<Eq, I>();
  const auto& xi = std::get<I>(std::forward_as_tuple(ops...));
  // The bookkeeping below is bounded lists: a call allocates nothing but
  // the gradient itself (and the einsum's result).
  const std::array<std::int64_t, sizeof...(E)> ranks{static_cast<std::int64_t>(ops.dimension())...};
  const einsum_binding fb = bind_einsum(eq, ranks).get(Eq.view());
  detail::check_output_gradient(fb, gy, Eq.view(), ops...);
  // The reduced gradient: einsum of gy and the other operands.
  auto others = [&]<std::size_t... J>(std::index_sequence<J...>) {
    return einsum<grad_text>(gy, std::get<detail::skip_index<I>(J)>(std::forward_as_tuple(ops...))...);
  };
  auto reduced = others(std::make_index_sequence<sizeof...(E) - 1>{});
  // Shape of operand I (and its static rank, if any).
  const auto xshape = detail::bounded<detail::extent_list64>(xi.shape());
  constexpr std::int64_t rank = tensor_rank_v<decltype(xi)>;
  using result_t =
      std::conditional_t<(rank >= 0), xt::xtensor<T, static_cast<std::size_t>(rank < 0 ? 0 : rank)>, xt::xarray<T>>;
  // Labels: xi's own, the reduced gradient's.
  const auto [xl, gl] = detail::grad_labels<Eq, I>(fb, static_cast<std::int64_t>(gy.dimension()), ranks);
  result_t dx;
  // The usual case (a GEMM's operands): the reduced gradient has operand
  // I's labels in its order and its extents, so it is the gradient.
  if (gl == xl && std::equal(reduced.shape().begin(), reduced.shape().end(), xi.shape().begin(), xi.shape().end())) {
    if constexpr (std::is_same_v<decltype(reduced), result_t>) {
      return reduced;
    } else {
      const auto& r = xt::eval(reduced);  // reduced itself when it is a container
      dx = result_t::from_shape(xi.shape());
      std::copy(r.data(), r.data() + r.size(), dx.data());
      return dx;
    }
  }
  dx = result_t::from_shape(xi.shape());
  const xt::xarray<T> rg = reduced;
  const auto rshape = detail::bounded<detail::extent_list64>(rg.shape());
  detail::scatter_grad<T>(rg.data(), std::span<const std::int64_t>(rshape.begin(), rshape.end()),
                          std::span<const int>(gl.begin(), gl.end()), dx.data(),
                          std::span<const std::int64_t>(xshape.begin(), xshape.end()),
                          std::span<const int>(xl.begin(), xl.end()));
  return dx;
}

/// einsum_vjp<Eq, I>(gy, ops...) written into `out` (operand I's shape),
/// without allocating it, when it is the usual case: the reduced gradient's
/// labels are operand I's, in its order, and operand I broadcasts no dim
/// (each of its extents is its label's). Then it is one einsum into out
/// (the same GEMM, so the same bits as einsum_vjp) and returns true; else
/// it writes nothing and returns false (einsum_vjp handles the rest).
/// @pre out does not overlap gy or an operand.
template <fixed_string Eq, std::size_t I, class Out, class G, class... E>
bool einsum_vjp_into(Out& out, const G& gy, const E&... ops) {
  constexpr const einsum_equation& eq = detail::parsed_equation<Eq>.value;
  static constexpr auto grad_text = einsum_grad<Eq, I>();
  constexpr std::int64_t grad_rank =
      detail::grad_output_rank<grad_text, I, G, std::tuple<E...>>(std::make_index_sequence<sizeof...(E) - 1>{});
  if constexpr (grad_rank >= 0 && tensor_rank_v<Out> >= 0 && grad_rank != tensor_rank_v<Out>) {
    return false;  // the reduced gradient has another rank (a diagonal's, a summed operand's)
  } else {
    const auto& xi = std::get<I>(std::forward_as_tuple(ops...));
    const std::array<std::int64_t, sizeof...(E)> ranks{static_cast<std::int64_t>(ops.dimension())...};
    const einsum_binding fb = bind_einsum(eq, ranks).get(Eq.view());
    const einsum_extents ext = detail::check_output_gradient(fb, gy, Eq.view(), ops...);
    const auto [xl, gl] = detail::grad_labels<Eq, I>(fb, static_cast<std::int64_t>(gy.dimension()), ranks);
    if (!(gl == xl)) return false;
    // Operand I broadcasts none of its dims when each of its extents is its
    // label's over the forward's operands.
    if (out.dimension() != xl.size()) return false;
    for (std::size_t d = 0; d < xl.size(); ++d)
      if (static_cast<std::int64_t>(xi.shape()[d]) != ext.of[xl[d]] || out.shape()[d] != xi.shape()[d]) return false;
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      einsum_into<grad_text>(out, gy, std::get<detail::skip_index<I>(J)>(std::forward_as_tuple(ops...))...);
    }
    (std::make_index_sequence<sizeof...(E) - 1>{});
    return true;
  }
}

/// The gradient of a broadcast (e.g. bias add y = z + b): gy summed to b.
template <fixed_string Out, fixed_string In, class G>
auto broadcast_vjp(const G& gy) {
  return einsum<broadcast_grad<Out, In>()>(gy);
}

}  // namespace xshard
