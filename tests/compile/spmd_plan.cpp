// Sharded einsum and redistribution plans, decided at compile time. Each
// expectation is derived by hand from the rule in spmd/einsum.hpp and the
// rule table in spmd/layout.hpp.
#include <xshard/spmd/einsum.hpp>

namespace {

using M = xshard::mesh<"data=2, model=2">;
using xshard::collective_kind;
using xshard::spec;

constexpr xshard::axis_set data = 1, model = 2;

constexpr xshard::resolved_spec resolved(auto s) { return xshard::detail::typed_resolved<M, decltype(s)>(); }

// --- The 2-D sharded linear layer y = einsum("...n,mn->...m", x, w). ---

// Column-parallel weight (m on model), batch on data: no traffic at all.
constexpr auto col_fwd = xshard::einsum_plan<"...n,mn->...m", M, spec<"data, None, None">, spec<"model, None">>();
static_assert(col_fwd.collective_count() == 0);
static_assert(!col_fwd.partial());
static_assert(col_fwd.result == resolved(spec<"data, None, model">{}));

// Row-parallel weight (n on model) after a column-parallel layer: the
// contraction over n leaves a partial sum over model, all-reduced.
constexpr auto row_fwd = xshard::einsum_plan<"...n,mn->...m", M, spec<"data, None, model">, spec<"None, model">>();
static_assert(row_fwd.collective_count() == 1);
static_assert(row_fwd.collectives()[0] == xshard::planned_collective{collective_kind::all_reduce, model, -1});
static_assert(row_fwd.local_output.partial == model);
static_assert(row_fwd.result == resolved(spec<"data, None, None">{}));

// ... or reduce-scattered when the output is asked sharded on model.
constexpr auto row_fwd_rs = xshard::einsum_plan_to<"...n,mn->...m", M, spec<"data, None, model">,
                                                   spec<"data, None, model">, spec<"None, model">>();
static_assert(row_fwd_rs.collective_count() == 1);
static_assert(row_fwd_rs.collectives()[0] == xshard::planned_collective{collective_kind::reduce_scatter, model, -1});

// Backward of the column-parallel layer. Weight gradient: the batch dims are
// contracted and sharded on data: a partial sum over data, all-reduced.
constexpr auto col_dw = xshard::einsum_plan<"...m,...n->mn", M, spec<"data, None, model">, spec<"data, None, None">>();
static_assert(col_dw.collective_count() == 1);
static_assert(col_dw.collectives()[0] == xshard::planned_collective{collective_kind::all_reduce, data, -1});
static_assert(col_dw.result == resolved(spec<"model, None">{}));
// Input gradient: the contraction over m (sharded on model) is all-reduced;
// the batch sharding is kept.
constexpr auto col_dx = xshard::einsum_plan<"...m,mn->...n", M, spec<"data, None, model">, spec<"model, None">>();
static_assert(col_dx.collective_count() == 1);
static_assert(col_dx.collectives()[0] == xshard::planned_collective{collective_kind::all_reduce, model, -1});
static_assert(col_dx.result == resolved(spec<"data, None, None">{}));

// A conflict: j is sharded on model in A but on data in B; data already
// shards i, so B gathers its j (one all-gather of operand 1), and the
// contraction over j (model) is all-reduced.
constexpr auto conflict = xshard::einsum_plan<"ij,jk->ik", M, spec<"data, model">, spec<"data, None">>();
static_assert(conflict.collective_count() == 2);
static_assert(conflict.collectives()[0] == xshard::planned_collective{collective_kind::all_gather, data, 1});
static_assert(conflict.collectives()[1] == xshard::planned_collective{collective_kind::all_reduce, model, -1});
static_assert(conflict.result == resolved(spec<"data, None">{}));

// A replicated operand is sliced locally: no traffic.
constexpr auto slice = xshard::einsum_plan<"ij,jk->ik", M, spec<"data, None">, spec<"None, None">>();
static_assert(slice.collective_count() == 0);
static_assert(slice.operands[1].steps.size() == 0);  // B is replicated and has no i: nothing to do
constexpr auto slice2 = xshard::einsum_plan<"ij,jk->ik", M, spec<"None, model">, spec<"None, None">>();
static_assert(slice2.operands[1].steps.size() == 1 && slice2.operands[1].steps[0].kind == xshard::step_kind::slice);
static_assert(slice2.collective_count() == 1);  // only the all-reduce of the contraction over j (model)
static_assert(slice2.collectives()[0] == xshard::planned_collective{collective_kind::all_reduce, model, -1});

// Bytes: the row-parallel all-reduce of the (data-sharded) output block,
// x (8, 4, 6), w (5, 6): block 4 x 4 x 5 floats = 320 bytes, ring all-reduce
// over 2 devices sends 2 (2 - 1) / 2 of it.
constexpr xshard::einsum_binding row_binding = xshard::detail::sharded_binding<"...n,mn->...m", 3, 2>();
constexpr std::int64_t x_shape[] = {8, 4, 6}, w_shape[] = {5, 6};
constexpr std::span<const std::int64_t> row_shapes[] = {x_shape, w_shape};
static_assert(xshard::plan_bytes_sent(row_fwd, row_binding, M::mesh_shape(), row_shapes, 4) == 320);

// --- Redistribution rule table. ---
constexpr xshard::mesh_shape_t mesh = M::mesh_shape();
constexpr xshard::sharded_layout layout(auto s, xshard::axis_set partial = 0) { return {resolved(s), partial}; }

// shard(a) -> shard(b) on the same axis: one all-to-all.
constexpr auto a2a = xshard::plan_redistribute(layout(spec<"data, None">{}), resolved(spec<"None, data">{}), mesh);
static_assert(a2a.collective_count() == 1 && a2a.steps[0].kind == xshard::step_kind::all_to_all);
static_assert(a2a.steps[0].dim == 0 && a2a.steps[0].dim2 == 1);
// shard -> replicate: all-gather.
constexpr auto ag = xshard::plan_redistribute(layout(spec<"data, None">{}), resolved(spec<"None, None">{}), mesh);
static_assert(ag.collective_count() == 1 && ag.steps[0].kind == xshard::step_kind::all_gather);
// partial -> shard: reduce-scatter; partial -> replicate: all-reduce.
constexpr auto rs =
    xshard::plan_redistribute(layout(spec<"data, None">{}, model), resolved(spec<"data, model">{}), mesh);
static_assert(rs.collective_count() == 1 && rs.steps[0].kind == xshard::step_kind::reduce_scatter);
constexpr auto ar =
    xshard::plan_redistribute(layout(spec<"data, None">{}, model), resolved(spec<"data, None">{}), mesh);
static_assert(ar.collective_count() == 1 && ar.steps[0].kind == xshard::step_kind::all_reduce);
// replicate -> shard: a local slice, no traffic.
constexpr auto sl = xshard::plan_redistribute(layout(spec<"None, None">{}), resolved(spec<"model, data">{}), mesh);
static_assert(sl.collective_count() == 0 && sl.steps.size() == 1 && sl.steps[0].kind == xshard::step_kind::slice);
// The layouts each step acts on, replayed from the plan's start (hand-checked).
static_assert(a2a.before(0) == layout(spec<"data, None">{}) && a2a.before(1) == layout(spec<"None, data">{}));
static_assert(rs.before(0) == layout(spec<"data, None">{}, model) && rs.before(1) == layout(spec<"data, model">{}));
static_assert(ar.before(1) == layout(spec<"data, None">{}) && sl.before(1) == layout(spec<"model, data">{}));
// "data, model" -> "model, data": all-gather over data (dim 0), then
// all-to-all of model from dim 1 to dim 0, then a local slice of dim 1.
constexpr auto swap = xshard::plan_redistribute(layout(spec<"data, model">{}), resolved(spec<"model, data">{}), mesh);
static_assert(swap.steps.size() == 3 && swap.steps[0].kind == xshard::step_kind::all_gather &&
              swap.steps[1].kind == xshard::step_kind::all_to_all && swap.steps[2].kind == xshard::step_kind::slice);
static_assert(swap.before(1) == layout(spec<"None, model">{}) && swap.before(2) == layout(spec<"model, None">{}) &&
              swap.before(3) == layout(spec<"model, data">{}) && swap.before(3) == swap.result);
// Unchanged: nothing.
constexpr auto same = xshard::plan_redistribute(layout(spec<"data, model">{}), resolved(spec<"data, model">{}), mesh);
static_assert(same.steps.size() == 0);

}  // namespace
