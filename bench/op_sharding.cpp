// bench/op_sharding.cpp - the run-time face of the sharding engine.
//
// What is timed, per mesh (8 = 4x2, 256 = 16x16 and 4x8x8, 4096 = 64x64 and
// 16x16x16 devices; the mesh itself is built once, outside the loop):
//
//   op_sharding/<mesh>/<spec>  get_op_sharding(mesh, "spec text"): parse the
//                              spec, resolve it, transpose the logical mesh,
//                              and for PARTIAL the groups. Three specs:
//                                tiled    "a, b" / "a, b, c"       (TILED)
//                                partial  "None, b"                (PARTIAL, replicated over the rest)
//                                tuple    "(b, a)" / "(c, a), b"   (TILED, tuple axes merged)
//   hlo_text_v1|v2/<mesh>      hlo_text(xla, v1|v2).str() for the partial spec
//                              (to_xla done once, outside the loop)
//   parse_hlo_v1/<mesh>        parse_hlo(V1 text of the partial spec)
//   shard_slices/<mesh>        shard_slices(mesh, tiled 2-D spec, {10007, 4099})
//                              (uneven extents: the last shards are short)
//
// Counters: `devices` (the mesh size) and items/s, where one item is one
// device handled (so items/s is comparable across mesh sizes); hlo_text and
// parse_hlo also report bytes/s of HLO text.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>
#include <xshard/xshard.hpp>

namespace {

struct mesh_case {
  const char* label;    // in the benchmark name
  const char* text;     // runtime_mesh text
  const char* tiled;    // fully tiled spec
  const char* partial;  // spec with None (PARTIAL)
  const char* tuple;    // spec with a tuple entry
  const char* spec_2d;  // a rank-2 spec for shard_slices
};

// clang-format off
constexpr std::array<mesh_case, 5> meshes{{
    {"4x2",      "a=4, b=2",          "a, b",    "None, b", "(b, a)",    "a, b"},
    {"16x16",    "a=16, b=16",        "a, b",    "None, b", "(b, a)",    "a, b"},
    {"4x8x8",    "a=4, b=8, c=8",     "a, b, c", "None, b", "(c, a), b", "(c, a), b"},
    {"64x64",    "a=64, b=64",        "a, b",    "None, b", "(b, a)",    "a, b"},
    {"16x16x16", "a=16, b=16, c=16",  "a, b, c", "None, b", "(c, a), b", "(c, a), b"},
}};
// clang-format on

constexpr std::array<std::int64_t, 2> shape_2d{10007, 4099};

void set_device_counters(benchmark::State& state, const xshard::runtime_mesh& mesh) {
  state.counters["devices"] = static_cast<double>(mesh.size());
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * mesh.size());
}

void bm_op_sharding(benchmark::State& state, const char* mesh_text, const char* spec_text) {
  const xshard::runtime_mesh mesh(mesh_text);
  for (auto _ : state) {
    xshard::op_sharding op = xshard::get_op_sharding(mesh, spec_text);
    benchmark::DoNotOptimize(op);
    benchmark::ClobberMemory();
  }
  set_device_counters(state, mesh);
}

void bm_hlo_text(benchmark::State& state, const char* mesh_text, const char* spec_text, xshard::hlo_format fmt) {
  const xshard::runtime_mesh mesh(mesh_text);
  const xshard::xla_sharding xla = xshard::to_xla(xshard::get_op_sharding(mesh, spec_text));
  std::size_t chars = 0;
  for (auto _ : state) {
    std::string text = xshard::hlo_text(xla, fmt).str();
    chars = text.size();
    benchmark::DoNotOptimize(text);
    benchmark::ClobberMemory();
  }
  set_device_counters(state, mesh);
  state.counters["chars"] = static_cast<double>(chars);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * chars));
}

void bm_parse_hlo(benchmark::State& state, const char* mesh_text, const char* spec_text) {
  const xshard::runtime_mesh mesh(mesh_text);
  const std::string text = xshard::hlo_sharding_text(mesh, spec_text, xshard::hlo_format::v1);
  for (auto _ : state) {
    xshard::checked<xshard::xla_sharding> parsed = xshard::parse_hlo(text);
    if (!parsed.ok()) {
      state.SkipWithError("parse_hlo rejected the engine's own text");
      break;
    }
    benchmark::DoNotOptimize(parsed);
    benchmark::ClobberMemory();
  }
  set_device_counters(state, mesh);
  state.counters["chars"] = static_cast<double>(text.size());
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
}

void bm_shard_slices(benchmark::State& state, const char* mesh_text, const char* spec_text) {
  const xshard::runtime_mesh mesh(mesh_text);
  for (auto _ : state) {
    xshard::shard_layout layout = xshard::shard_slices(mesh, spec_text, shape_2d);
    benchmark::DoNotOptimize(layout);
    benchmark::ClobberMemory();
  }
  set_device_counters(state, mesh);
}

std::string name(const char* group, const mesh_case& m, const char* suffix = nullptr) {
  std::string n = std::string(group) + '/' + m.label;
  if (suffix) n += std::string("/") + suffix;
  return n;
}

// Registered from a static initialiser so that the cases come from the
// table above rather than one BENCHMARK_CAPTURE line per case.
const bool registered = [] {
  for (const mesh_case& m : meshes) {
    benchmark::RegisterBenchmark(name("op_sharding", m, "tiled").c_str(), bm_op_sharding, m.text, m.tiled);
    benchmark::RegisterBenchmark(name("op_sharding", m, "partial").c_str(), bm_op_sharding, m.text, m.partial);
    benchmark::RegisterBenchmark(name("op_sharding", m, "tuple").c_str(), bm_op_sharding, m.text, m.tuple);
  }
  for (const mesh_case& m : meshes)
    benchmark::RegisterBenchmark(name("hlo_text_v1", m).c_str(), bm_hlo_text, m.text, m.partial,
                                 xshard::hlo_format::v1);
  for (const mesh_case& m : meshes)
    benchmark::RegisterBenchmark(name("hlo_text_v2", m).c_str(), bm_hlo_text, m.text, m.partial,
                                 xshard::hlo_format::v2);
  for (const mesh_case& m : meshes)
    benchmark::RegisterBenchmark(name("parse_hlo_v1", m).c_str(), bm_parse_hlo, m.text, m.partial);
  for (const mesh_case& m : meshes)
    benchmark::RegisterBenchmark(name("shard_slices", m).c_str(), bm_shard_slices, m.text, m.spec_2d);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
