// xshard/xshard.hpp - everything. Layers, bottom up: core, mesh, sharding.
#pragma once

#include "core/diagnostics.hpp"
#include "core/error.hpp"
#include "core/fixed_string.hpp"
#include "core/static_vector.hpp"
#include "core/text.hpp"
#include "mesh/axes.hpp"
#include "mesh/hybrid.hpp"
#include "mesh/mesh.hpp"
#include "mesh/topology.hpp"
#include "sharding/hlo.hpp"
#include "sharding/op_sharding.hpp"
#include "sharding/shardable.hpp"
#include "sharding/sharding.hpp"
#include "sharding/shards.hpp"
#include "sharding/spec.hpp"
#include "sharding/visualize.hpp"
