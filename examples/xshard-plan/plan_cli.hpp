// xshard-plan's logic as a function: main.cpp and tests/fuzz/fuzz_plan_cli.cpp
// both call run_cli, so the fuzzer exercises exactly what the tool runs.
//
//   const xshard_plan::cli_result r = xshard_plan::run_cli({"--mesh", "x=4", "--spec", "x"});
//   // r.status 0: r.out is the JSON object (or the picture with --visualize), r.err empty;
//   // r.status 2: r.out empty, r.err one line ending in '\n'; --help: usage on r.out, status 0.
//
// The command line is read by CLI11 (libcli11-dev), the JSON written by
// nlohmann-json (nlohmann-json3-dev); the library itself uses neither.
// Nothing escapes run_cli: every exception becomes status 2 and one stderr line.
#pragma once

#include <CLI/CLI.hpp>  // the command line (libcli11-dev)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <nlohmann/json.hpp>  // the JSON object printed (nlohmann-json3-dev)
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>
#include <xshard/xshard.hpp>

namespace xshard_plan {

/// What the tool prints and returns.
struct cli_result {
  int status = 0;
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

namespace detail {

/// The first line of --help.
inline constexpr std::string_view help_banner = "xshard-plan: the sharding engine on the command line";

struct options {
  std::optional<std::string> mesh, devices, spec, shape, ici, dcn, axes, topology;
  bool hybrid = false;
  bool visualize = false;
};

[[noreturn]] inline void fail(const std::string& what) { throw xshard::error("xshard-plan: " + what); }

/// Why `text` is not a list "7,6,5" of non-negative integers below `limit`
/// (empty when it is one; an empty text is the empty list).
inline std::string int_list_error(std::string_view text, std::int64_t limit) {
  xshard::detail::cursor c{text};
  c.skip_space();
  if (c.at_end()) return {};
  while (true) {
    c.skip_space();
    std::int64_t v = 0;
    if (!c.integer(v, limit))
      return "expected a number below " + std::to_string(limit) + " at column " + std::to_string(c.pos + 1) + " in \"" +
             std::string(text) + "\"";
    c.skip_space();
    if (c.at_end()) return {};
    if (!c.eat(','))
      return "unexpected '" + std::string(1, c.peek()) + "' at column " + std::to_string(c.pos + 1) + " in \"" +
             std::string(text) + "\"";
  }
}

/// "7,6,5" -> numbers; each a non-negative integer below `limit`.
inline std::vector<std::int64_t> parse_ints(std::string_view what, std::string_view text, std::int64_t limit) {
  if (const std::string why = int_list_error(text, limit); !why.empty()) fail(std::string(what) + ": " + why);
  std::vector<std::int64_t> out;
  xshard::detail::cursor c{text};
  while (true) {
    c.skip_space();
    if (c.at_end()) return out;
    std::int64_t v = 0;
    (void)c.integer(v, limit);
    out.push_back(v);
    c.skip_space();
    (void)c.eat(',');
  }
}

/// Reads the command line into `o`; returns the help text when -h/--help
/// was given (then `o` is not filled), else an empty string. Throws
/// xshard::error on bad input.
inline std::string parse_args(std::span<const std::string_view> args, options& o) {
  CLI::App app{std::string(help_banner), "xshard-plan"};
  app.footer(
      "Prints one JSON object: sharding_type, tile_assignment, group_assignment, replication_groups, hlo, hlo_v2, "
      "sdy {mesh, sharding}, mesh, device_ids and, with --shape, shards (per device its replica id and [start, end) "
      "per dim). Bad input: exit status 2, one line on stderr, nothing on stdout.");
  std::string mesh, devices, spec, shape, ici, dcn, axes, topology;
  auto list = [](std::int64_t limit) {
    return CLI::Validator([limit](std::string& s) { return int_list_error(s, limit); }, "LIST", "");
  };
  CLI::Option* mesh_opt = app.add_option("--mesh", mesh, "the mesh, e.g. \"data=4,model=2\"")->type_name("TEXT");
  CLI::Option* devices_opt =
      app.add_option("--devices", devices, "its device ids in row-major order (default 0..n-1), e.g. 7,6,5,4,3,2,1,0")
          ->check(list(xshard::max_mesh_devices))
          ->needs(mesh_opt);
  app.add_option("--spec", spec, "the partition spec, e.g. \"data,None\" or \"(data,model),None\"")
      ->type_name("TEXT")
      ->required();
  CLI::Option* shape_opt =
      app.add_option("--shape", shape, "a global shape, e.g. 8,16 (\"\" for a scalar): adds \"shards\"")
          ->check(list(std::int64_t{1} << 40));
  CLI::Option* hybrid_opt = app.add_flag("--hybrid", o.hybrid, "build a HybridMesh (ICI x DCN) from a topology file")
                                ->excludes(mesh_opt)
                                ->excludes(devices_opt);
  app.add_option("--ici", ici, "ICI mesh shape, e.g. 1,4,1")
      ->check(list(xshard::max_mesh_devices + 1))
      ->needs(hybrid_opt);
  app.add_option("--dcn", dcn, "DCN mesh shape, e.g. 2,1,1")
      ->check(list(xshard::max_mesh_devices + 1))
      ->needs(hybrid_opt);
  app.add_option("--axes", axes, "axis names of the hybrid mesh, e.g. data,fsdp,tensor")
      ->type_name("NAMES")
      ->needs(hybrid_opt);
  app.add_option("--topology", topology, "a JSON list of {\"id\", \"coords\", \"slice_index\"}")
      ->check(CLI::ExistingFile)
      ->needs(hybrid_opt);
  app.add_flag("--visualize", o.visualize, "print the text picture of the shards instead of JSON")->needs(shape_opt);

  std::vector<std::string> argv(args.begin(), args.end());
  std::reverse(argv.begin(), argv.end());  // CLI11 reads a vector from the back
  try {
    app.parse(std::move(argv));
  } catch (const CLI::CallForHelp&) {
    return app.help();
  } catch (const CLI::ParseError& e) {
    fail(e.what());
  }
  auto set = [&](std::optional<std::string>& slot, const std::string& value, std::string_view name) {
    if (app.count(std::string(name)) > 0) slot = value;
  };
  set(o.mesh, mesh, "--mesh");
  set(o.devices, devices, "--devices");
  set(o.spec, spec, "--spec");
  set(o.shape, shape, "--shape");
  set(o.ici, ici, "--ici");
  set(o.dcn, dcn, "--dcn");
  set(o.axes, axes, "--axes");
  set(o.topology, topology, "--topology");
  if (o.hybrid && (!o.ici || !o.topology)) fail("--hybrid needs --ici and --topology");
  if (!o.hybrid && !o.mesh) fail("--mesh is required (or --hybrid)");
  return {};
}

inline std::vector<std::string> parse_names(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view n = text.substr(start, end - start);
    while (!n.empty() && n.front() == ' ') n.remove_prefix(1);
    while (!n.empty() && n.back() == ' ') n.remove_suffix(1);
    out.emplace_back(n);
    start = end + 1;
  }
  return out;
}

inline xshard::runtime_mesh make_mesh(const options& o) {
  if (!o.hybrid) {
    std::vector<int> ids;
    if (o.devices)
      for (std::int64_t v : parse_ints("--devices", *o.devices, xshard::max_mesh_devices))
        ids.push_back(static_cast<int>(v));
    if (o.devices && ids.empty()) fail("--devices is empty");
    return xshard::runtime_mesh(*o.mesh, std::move(ids));
  }
  const auto ici = parse_ints("--ici", *o.ici, xshard::max_mesh_devices + 1);
  const auto dcn = o.dcn ? parse_ints("--dcn", *o.dcn, xshard::max_mesh_devices + 1) : std::vector<std::int64_t>{};
  const auto devices = xshard::read_topology_file(*o.topology);
  return xshard::hybrid_mesh(devices, ici, dcn, o.axes ? parse_names(*o.axes) : std::vector<std::string>{});
}

using json = nlohmann::ordered_json;  // keys in the order written

/// Nested JSON lists of an int_array's values by its shape ([] for rank 0).
inline json nested(const xshard::int_array& a, std::size_t dim, std::size_t& pos) {
  json out = json::array();
  for (std::int64_t i = 0; i < a.shape[dim]; ++i) {
    if (dim + 1 == a.shape.size())
      out.push_back(a.values[pos++]);
    else
      out.push_back(nested(a, dim + 1, pos));
  }
  return out;
}
inline json nested(const xshard::int_array& a) {
  std::size_t pos = 0;
  return a.shape.empty() ? json::array() : nested(a, 0, pos);
}

/// nlohmann's text of `v`, compact (invalid UTF-8 replaced, never thrown).
inline std::string compact(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

/// The object one member per line, each value compact, a list of objects
/// (the shards) one element per line: dump(2) would put every number of a
/// tile assignment on a line of its own.
inline std::string json_text(const json& j) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : j.items()) {
    out += first ? "\n  " : ",\n  ";
    first = false;
    out += compact(key) + ": ";
    if (value.is_array() && !value.empty() && value.front().is_object()) {
      out += "[";
      for (std::size_t i = 0; i < value.size(); ++i) out += (i ? ",\n    " : "\n    ") + compact(value[i]);
      out += "\n  ]";
    } else {
      out += compact(value);
    }
  }
  return out + "\n}\n";
}

inline std::string run(const options& o) {
  const xshard::runtime_mesh m = make_mesh(o);
  const xshard::op_sharding op = xshard::get_op_sharding(m, *o.spec);
  const xshard::xla_sharding x = xshard::to_xla(op);
  std::optional<xshard::shard_layout> layout;
  std::vector<std::int64_t> shape;
  if (o.shape) {
    shape = parse_ints("--shape", *o.shape, std::int64_t{1} << 40);
    layout = xshard::shard_slices(m, *o.spec, shape);
  }
  if (o.visualize) return xshard::visualize(m, *o.spec, shape);

  json j;
  j["sharding_type"] = std::string(xshard::to_string(op.type));
  j["tile_assignment"] = nested(op.tile_assignment);
  j["group_assignment"] = nested(op.group_assignment);
  j["replication_groups"] = op.replication_groups;
  j["hlo"] = xshard::hlo_text(x).str();
  j["hlo_v2"] = xshard::hlo_text(x, xshard::hlo_format::v2).str();
  j["sdy"] = {{"mesh", xshard::sdy_mesh_text(m)}, {"sharding", xshard::sdy_sharding_text(m, *o.spec)}};
  j["mesh"] = m.text();
  j["device_ids"] = m.device_ids();
  if (layout) {
    json shards = json::array();
    for (const xshard::shard& s : layout->shards) {
      json slices = json::array();
      for (const xshard::shard_slice& sl : s.slices) slices.push_back({sl.start, sl.end});
      shards.push_back({{"device", s.device}, {"replica", s.replica}, {"slices", std::move(slices)}});
    }
    j["shards"] = std::move(shards);
  }
  return json_text(j);
}

}  // namespace detail

/// Runs xshard-plan on `args` (argv without the program name).
inline cli_result run_cli(std::span<const std::string_view> args) {
  cli_result r;
  try {
    detail::options o;
    if (std::string help = detail::parse_args(args, o); !help.empty()) {
      r.out = std::move(help);
      return r;
    }
    r.out = detail::run(o);  // only once everything succeeded
    return r;
  } catch (const std::exception& e) {
    r.err = e.what();
  } catch (...) {
    r.err = "xshard-plan: unexpected error";
  }
  for (char& c : r.err)
    if (c == '\n') c = ' ';
  r.err += '\n';
  r.out.clear();  // nothing on stdout on error
  r.status = 2;
  return r;
}
inline cli_result run_cli(std::initializer_list<std::string_view> args) {
  return run_cli(std::span<const std::string_view>(args.begin(), args.size()));
}

}  // namespace xshard_plan
