// xshard-plan's logic as a function: main.cpp and tests/fuzz/fuzz_plan_cli.cpp
// both call run_cli, so the fuzzer exercises exactly what the tool runs.
//
//   const xshard_plan::cli_result r = xshard_plan::run_cli({"--mesh", "x=4", "--spec", "x"});
//   // r.status 0: r.out is the JSON object (or the picture with --visualize), r.err empty;
//   // r.status 2: r.out empty, r.err one line ending in '\n'; --help: usage on r.out, status 0.
//
// Nothing escapes run_cli: every exception becomes status 2 and one stderr line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
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

inline constexpr std::string_view usage =
    "usage: xshard-plan --mesh \"data=4,model=2\" [--devices 7,6,...] --spec \"data,None\" [--shape 8,16] "
    "[--visualize]\n"
    "       xshard-plan --hybrid --ici 1,4,1 [--dcn 2,1,1] [--axes a,b,c] --topology devices.json --spec ... "
    "[--shape ...] [--visualize]\n";

struct options {
  std::optional<std::string> mesh, devices, spec, shape, ici, dcn, axes, topology;
  bool hybrid = false;
  bool visualize = false;
};

[[noreturn]] inline void fail(const std::string& what) { throw xshard::error("xshard-plan: " + what); }

inline options parse_args(std::span<const std::string_view> args) {
  options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    auto value = [&](std::optional<std::string>& slot) {
      if (slot) fail("option " + std::string(a) + " given twice");
      if (i + 1 >= args.size()) fail("option " + std::string(a) + " needs a value");
      slot = std::string(args[++i]);
    };
    if (a == "--mesh")
      value(o.mesh);
    else if (a == "--devices")
      value(o.devices);
    else if (a == "--spec")
      value(o.spec);
    else if (a == "--shape")
      value(o.shape);
    else if (a == "--ici")
      value(o.ici);
    else if (a == "--dcn")
      value(o.dcn);
    else if (a == "--axes")
      value(o.axes);
    else if (a == "--topology")
      value(o.topology);
    else if (a == "--hybrid")
      o.hybrid = true;
    else if (a == "--visualize")
      o.visualize = true;
    else
      fail("unknown argument '" + std::string(a) + "'");
  }
  if (!o.spec) fail("--spec is required");
  if (o.hybrid) {
    if (o.mesh || o.devices) fail("--hybrid builds the mesh from --ici/--dcn/--topology; drop --mesh/--devices");
    if (!o.ici || !o.topology) fail("--hybrid needs --ici and --topology");
  } else {
    if (!o.mesh) fail("--mesh is required (or --hybrid)");
    if (o.ici || o.dcn || o.axes || o.topology) fail("--ici/--dcn/--axes/--topology need --hybrid");
  }
  if (o.visualize && !o.shape) fail("--visualize needs --shape");
  return o;
}

/// "7,6,5" -> numbers; each a non-negative integer below `limit`.
inline std::vector<std::int64_t> parse_ints(std::string_view what, std::string_view text, std::int64_t limit) {
  std::vector<std::int64_t> out;
  xshard::detail::cursor c{text};
  c.skip_space();
  if (c.at_end()) return out;
  while (true) {
    c.skip_space();
    std::int64_t v = 0;
    if (!c.integer(v, limit)) {
      fail("malformed " + std::string(what) + " \"" + std::string(text) + "\": expected a number below " +
           std::to_string(limit) + " at column " + std::to_string(c.pos + 1));
    }
    out.push_back(v);
    c.skip_space();
    if (c.at_end()) return out;
    if (!c.eat(',')) {
      fail("malformed " + std::string(what) + " \"" + std::string(text) + "\": unexpected '" +
           std::string(1, c.peek()) + "' at column " + std::to_string(c.pos + 1));
    }
  }
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

inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + '"';
}

/// Nested JSON lists of an int_array's values by its shape.
inline void nested(std::string& out, const xshard::int_array& a, std::size_t dim, std::size_t& pos) {
  if (a.shape.empty()) return;
  out += '[';
  for (std::int64_t i = 0; i < a.shape[dim]; ++i) {
    if (i) out += ',';
    if (dim + 1 == a.shape.size())
      out += std::to_string(a.values[pos++]);
    else
      nested(out, a, dim + 1, pos);
  }
  out += ']';
}
inline std::string nested(const xshard::int_array& a) {
  if (a.shape.empty()) return "[]";
  std::string out;
  std::size_t pos = 0;
  nested(out, a, 0, pos);
  return out;
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

  std::string j = "{\n";
  j += "  \"sharding_type\": " + json_string(xshard::to_string(op.type)) + ",\n";
  j += "  \"tile_assignment\": " + nested(op.tile_assignment) + ",\n";
  j += "  \"group_assignment\": " + nested(op.group_assignment) + ",\n";
  j += "  \"replication_groups\": [";
  for (std::size_t g = 0; g < op.replication_groups.size(); ++g) {
    j += g ? ",[" : "[";
    for (std::size_t i = 0; i < op.replication_groups[g].size(); ++i)
      j += (i ? "," : "") + std::to_string(op.replication_groups[g][i]);
    j += ']';
  }
  j += "],\n";
  j += "  \"hlo\": " + json_string(xshard::hlo_text(x).str()) + ",\n";
  j += "  \"hlo_v2\": " + json_string(xshard::hlo_text(x, xshard::hlo_format::v2).str()) + ",\n";
  j += "  \"mesh\": " + json_string(m.text()) + ",\n";
  j += "  \"device_ids\": [";
  for (std::size_t i = 0; i < m.device_ids().size(); ++i) j += (i ? "," : "") + std::to_string(m.device_ids()[i]);
  j += "]";
  if (layout) {
    j += ",\n  \"shards\": [";
    for (std::size_t i = 0; i < layout->shards.size(); ++i) {
      const xshard::shard& s = layout->shards[i];
      j += i ? ",\n    " : "\n    ";
      j += "{\"device\": " + std::to_string(s.device) + ", \"replica\": " + std::to_string(s.replica) +
           ", \"slices\": [";
      for (std::size_t d = 0; d < s.slices.size(); ++d)
        j += (d ? ", [" : "[") + std::to_string(s.slices[d].start) + ", " + std::to_string(s.slices[d].end) + "]";
      j += "]}";
    }
    j += "\n  ]";
  }
  j += "\n}\n";
  return j;
}

}  // namespace detail

/// Runs xshard-plan on `args` (argv without the program name).
inline cli_result run_cli(std::span<const std::string_view> args) {
  cli_result r;
  try {
    if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
      r.out = detail::usage;
      return r;
    }
    r.out = detail::run(detail::parse_args(args));  // only once everything succeeded
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
