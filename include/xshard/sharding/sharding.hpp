// xshard/sharding/sharding.hpp - the typed face of the sharding engine: the
// OpSharding and XLA text of a (mesh, spec) pair as compile-time constants.
//
// Example (compiled in tests/compile/doc_sharding.cpp):
//   using M = xshard::mesh<"data=4, model=2">;
//   using S = xshard::spec<"data, None">;
//   static_assert(xshard::hlo_sharding<M, S>() ==
//                 "{devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
//   static_assert(xshard::hlo_sharding_v2<M, S>() == "{devices=[4,1,2]<=[8] last_tile_dim_replicate}");
//   constexpr auto& op = xshard::op_sharding_v<M, S>;
//   static_assert(op.type == xshard::sharding_type::partial && op.replication_groups[3][1] == 7);
//
// A spec that does not fit the mesh (unknown axis name, index out of range,
// an axis used twice) is a compile error naming it.
#pragma once

#include <array>
#include <cstddef>

#include "../core/diagnostics.hpp"
#include "../mesh/mesh.hpp"
#include "hlo.hpp"
#include "op_sharding.hpp"
#include "spec.hpp"

namespace xshard {

/// OpSharding as compile-time data with exact sizes: NT tile-assignment
/// values, NG group-assignment values, NR replication groups of RS devices.
template <std::size_t NT, std::size_t NG, std::size_t NR, std::size_t RS>
struct fixed_op_sharding {
  sharding_type type = sharding_type::replicated;
  fixed_int_array<NT> tile_assignment{};
  fixed_int_array<NG> group_assignment{};
  std::array<std::array<int, RS>, NR> replication_groups{};

  /// The same value as the run-time engine's op_sharding.
  op_sharding runtime() const {
    op_sharding o;
    o.type = type;
    o.tile_assignment = tile_assignment.runtime();
    o.group_assignment = group_assignment.runtime();
    for (const auto& g : replication_groups) o.replication_groups.emplace_back(g.begin(), g.end());
    return o;
  }
  friend constexpr bool operator==(const fixed_op_sharding& a, const op_sharding& b) {
    if (a.type != b.type || !(a.tile_assignment == b.tile_assignment) || !(a.group_assignment == b.group_assignment) ||
        a.replication_groups.size() != b.replication_groups.size())
      return false;
    for (std::size_t g = 0; g < NR; ++g)
      if (!std::equal(a.replication_groups[g].begin(), a.replication_groups[g].end(), b.replication_groups[g].begin(),
                      b.replication_groups[g].end()))
        return false;
    return true;
  }
};

namespace detail {

template <Mesh M, Spec S>
constexpr checked<op_sharding> op_of() {
  return compute_op_sharding(M::ref(), S::value);
}

template <Mesh M, Spec S>
inline constexpr diagnostic op_diag = op_of<M, S>().diag;

template <Mesh M, Spec S>
consteval auto make_fixed_op() {
  constexpr std::size_t nt = op_of<M, S>().value.tile_assignment.size();
  constexpr std::size_t ng = op_of<M, S>().value.group_assignment.size();
  constexpr std::size_t nr = op_of<M, S>().value.replication_groups.size();
  constexpr std::size_t rs = nr ? op_of<M, S>().value.replication_groups[0].size() : 0;
  const op_sharding o = op_of<M, S>().value;
  fixed_op_sharding<nt, ng, nr, rs> out;
  out.type = o.type;
  out.tile_assignment = to_fixed<nt>(o.tile_assignment);
  out.group_assignment = to_fixed<ng>(o.group_assignment);
  for (std::size_t g = 0; g < nr; ++g)
    for (std::size_t i = 0; i < rs; ++i) out.replication_groups[g][i] = o.replication_groups[g][i];
  return out;
}

template <Mesh M, Spec S>
consteval bool check_spec_on_mesh() {
  return raise<op_diag<M, S>>();
}

}  // namespace detail

/// torch_xla's OpSharding of (M, S), computed at compile time.
template <Mesh M, Spec S>
requires(detail::check_spec_on_mesh<M, S>()) inline constexpr auto op_sharding_v = detail::make_fixed_op<M, S>();

/// torch_xla's sharding type of (M, S).
template <Mesh M, Spec S>
requires(detail::check_spec_on_mesh<M, S>()) inline constexpr sharding_type sharding_type_v =
    detail::op_of<M, S>().value.type;

/// XLA's HloSharding text for (M, S) in XLA's normal form, as a fixed_string
/// that compares with string literals in constant expressions.
template <Mesh M, Spec S, hlo_format Format = hlo_format::v1>
consteval auto hlo_sharding() {
  static_assert(detail::check_spec_on_mesh<M, S>());
  if constexpr (!detail::op_diag<M, S>.ok()) {
    return fixed_string<0>{};
  } else {
    return to_fixed_string<[] { return hlo_text(to_xla(detail::op_of<M, S>().value), Format); }>();
  }
}

/// The same in the V2 (iota) format where the devices allow it.
template <Mesh M, Spec S>
consteval auto hlo_sharding_v2() {
  return hlo_sharding<M, S, hlo_format::v2>();
}

/// The XLA sharding of (M, S) as a value (constexpr usable).
template <Mesh M, Spec S>
constexpr xla_sharding xla_sharding_of() {
  static_assert(detail::check_spec_on_mesh<M, S>());
  return to_xla(detail::op_of<M, S>().value);
}

}  // namespace xshard
