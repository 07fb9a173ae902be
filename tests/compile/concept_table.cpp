// Compile-time table of xshard's concepts and of the overloads they
// constrain: each row a type (or a call, in a requires-expression) and
// whether it is accepted. A concept is quiet (false, not a hard error) on
// what it refuses, so these rows are also the proof that the concepts can
// sit in overload sets and `requires` clauses.
#include <array>
#include <deque>
#include <initializer_list>
#include <list>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xshard/mesh/mesh.hpp>
#include <xshard/nn/layer.hpp>
#include <xshard/nn/linear.hpp>
#include <xshard/sharding/shardable.hpp>
#include <xshard/spmd/collectives.hpp>
#include <xshard/spmd/global.hpp>
#include <xshard/spmd/sharded.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

namespace {

using xshard::mesh;
using xshard::spec;
using M = mesh<"data=2, model=2">;
using T2 = xt::xtensor<float, 2>;

// --- Mesh and Spec: only the typed mesh and spec templates -------------------
static_assert(xshard::Mesh<M>);
static_assert(xshard::Mesh<mesh<"4", 3, 2, 1, 0>>);
static_assert(!xshard::Mesh<xshard::runtime_mesh>);  // the run-time mesh is a value, not a type of the mesh
static_assert(!xshard::Mesh<int>);
static_assert(!xshard::Mesh<spec<"data">>);
static_assert(xshard::Spec<spec<"data, None">>);
static_assert(xshard::Spec<spec<"">>);
static_assert(!xshard::Spec<M>);
static_assert(!xshard::Spec<std::string>);

// --- shardable: quiet on every refusal (rank, unknown axis, reuse, not a mesh)
static_assert(xshard::shardable<M, spec<"data, model">, T2>);
static_assert(!xshard::shardable<M, spec<"data">, T2>);
static_assert(!xshard::shardable<M, spec<"rows, None">, T2>);
static_assert(!xshard::shardable<M, spec<"model, model">, T2>);
static_assert(!xshard::shardable<int, spec<"data, None">, T2>);
static_assert(!xshard::shardable<M, int, T2>);

// --- Sharded and Global: the sharded value types, through references too ----
using S = xshard::sharded<float, 2, M, spec<"data, None">>;
using G = xshard::global<float, 2, M, spec<"data, None">>;
static_assert(xshard::Sharded<S>);
static_assert(xshard::Sharded<const S&>);
static_assert(xshard::Sharded<S&&>);
static_assert(!xshard::Sharded<T2>);
static_assert(!xshard::Sharded<G>);
static_assert(xshard::Global<G>);
static_assert(xshard::Global<const G&>);
static_assert(!xshard::Global<S>);
static_assert(!xshard::Global<T2>);

// --- collective_buffer: contiguous and sized ---------------------------------
static_assert(xshard::collective_buffer<std::vector<float>>);
static_assert(xshard::collective_buffer<std::span<const double>>);
static_assert(xshard::collective_buffer<std::array<int, 3>>);
static_assert(xshard::collective_buffer<float[4]>);
static_assert(!xshard::collective_buffer<std::list<float>>);  // not contiguous
static_assert(!xshard::collective_buffer<float*>);            // not a range
static_assert(!xshard::collective_buffer<int>);
static_assert(xshard::collective_buffer<std::vector<float>&>);
static_assert(xshard::collective_buffer<const std::vector<float>&>);
static_assert(xshard::collective_buffer<std::initializer_list<int>>);
static_assert(xshard::collective_buffer<xt::xtensor<float, 2>>);  // row-major storage, walked in order
// A strided view has data() and size() but is not contiguous.
static_assert(
    !xshard::collective_buffer<decltype(xt::view(std::declval<xt::xtensor<float, 2>&>(), xt::all(), xt::range(0, 2)))>);
static_assert(!xshard::collective_buffer<std::deque<float>>);
static_assert(std::is_same_v<xshard::buffer_value_t<const std::vector<float>&>, float>);
static_assert(std::is_same_v<xshard::buffer_value_t<std::span<const double>>, double>);
static_assert(std::is_same_v<xshard::buffer_value_t<const int (&)[3]>, int>);
static_assert(xshard::mutable_buffer_v<std::vector<float>&>);
static_assert(xshard::mutable_buffer_v<const std::span<float>&>);  // a span's constness is shallow
static_assert(!xshard::mutable_buffer_v<std::span<const float>>);
static_assert(!xshard::mutable_buffer_v<const std::vector<float>&>);
static_assert(!xshard::mutable_buffer_v<const float (&)[4]>);

// --- layer / stackable_layer -------------------------------------------------
static_assert(xshard::layer<xshard::linear_layer<float>>);
static_assert(xshard::layer<xshard::linear_layer<double>>);
struct no_vjp {
  using params = T2;
  using input = T2;
  using output = T2;
  using residuals = T2;
  static constexpr std::array<std::string_view, 1> param_names{"w"};
  std::pair<output, residuals> forward(const params&, const input&) const;
};
static_assert(!xshard::layer<no_vjp>);  // forward alone is not a layer
static_assert(!xshard::layer<int>);
static_assert(!xshard::stackable_layer<no_vjp>);
struct wrong_vjp : no_vjp {  // vjp must return the pair (param grads, input grad)
  params vjp(const params&, const residuals&, const output&) const;
};
static_assert(!xshard::layer<wrong_vjp>);
struct widening {  // a layer whose output type differs from its input
  using params = std::tuple<T2>;
  using input = T2;
  using output = xt::xtensor<float, 3>;
  using residuals = T2;
  static constexpr std::array<std::string_view, 1> param_names{"w"};
  std::pair<output, residuals> forward(const params&, const input&) const;
  std::pair<params, input> vjp(const params&, const residuals&, const output&) const;
};
static_assert(xshard::layer<widening> && !xshard::stackable_layer<widening>);
static_assert(xshard::stackable_layer<xshard::linear_layer<float>>);

// --- Overloads constrained by the concepts, as requires-expressions ----------
// (Inside concepts: a requires-expression outside a template may not hold an
// invalid expression.)
// A typed mesh's accessors are static and constant expressions; a runtime
// mesh's are members of a value.
template <class Mm>
concept static_accessors = requires {
  std::integral_constant<std::size_t, Mm::rank()>{};
};
static_assert(static_accessors<M>);
static_assert(!static_accessors<xshard::runtime_mesh>);
static_assert(requires(const xshard::runtime_mesh& m) { m.rank(); });
static_assert(M::mesh_shape().size() == 2 && M::mesh_shape()[0] == 2);
static_assert(M::axis_index("model") == 1 && !M::axis_index("rows"));
// check_shardable, the loud twin of the quiet concept, takes only a mesh and
// a spec type.
template <class Mm, class Ss>
concept checkable = requires {
  xshard::check_shardable<Mm, Ss, T2>();
};
static_assert(checkable<M, spec<"data, None">>);
static_assert(!checkable<int, spec<"data, None">>);
static_assert(!checkable<M, int>);

}  // namespace
