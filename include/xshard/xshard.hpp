// xshard/xshard.hpp - everything. Layers, bottom up: core, then mesh ->
// sharding and einsum (which depend only on core, xtensor and xsimd).
#pragma once

#include "core/diagnostics.hpp"
#include "core/error.hpp"
#include "core/fixed_string.hpp"
#include "core/static_vector.hpp"
#include "core/tensor_traits.hpp"
#include "core/text.hpp"
#include "core/thread_pool.hpp"
#include "einsum/einsum.hpp"
#include "einsum/grad.hpp"
#include "einsum/kernel.hpp"
#include "einsum/parse.hpp"
#include "einsum/plan.hpp"
#include "mesh/axes.hpp"
#include "mesh/hybrid.hpp"
#include "mesh/mesh.hpp"
#include "mesh/topology.hpp"
#include "nn/linear.hpp"
#include "sharding/hlo.hpp"
#include "sharding/op_sharding.hpp"
#include "sharding/shardable.hpp"
#include "sharding/sharding.hpp"
#include "sharding/shards.hpp"
#include "sharding/spec.hpp"
#include "sharding/visualize.hpp"
#include "spmd/collectives.hpp"
#include "spmd/thread_mesh.hpp"
#if defined(XSHARD_WITH_MPI)  // set by the CMake target xshard::mpi
#include "spmd/mpi_mesh.hpp"
#endif
