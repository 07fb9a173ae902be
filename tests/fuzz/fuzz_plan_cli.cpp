// fuzz_plan_cli: the xshard-plan command line (examples/xshard-plan/plan_cli.hpp),
// including its topology file.
//
// Input: the arguments separated by '\0', optionally followed by '\x01' and
// the topology file's content. The value after --topology is replaced by the
// path of a memfd holding that content (rewritten for every input), except
// "dir" (a directory) and "missing" (a path that does not exist), so the
// tool never reads arbitrary files.
//
// Properties (the tool's contract, README and DESIGN.md):
//  - run_cli returns; status 0 or 2, nothing else;
//  - status 2: nothing on stdout, exactly one line on stderr, and it is an
//    xshard error ("xshard..."), never another exception's text;
//  - status 0: nothing on stderr; the usage only when -h/--help was given;
//    a picture only with --visualize; otherwise one JSON object that a
//    strict validator written here accepts, with the keys of DESIGN.md
//    (and "sdy"), whose "hlo" and "hlo_v2" strings parse (parse_hlo) to the
//    same sharding, whose "sdy" mesh line and sharding read back
//    (parse_sdy) to "mesh", "device_ids" and a spec with that "hlo", and
//    whose shards of a {replicated} sharding have replica == device.
// Driver cap: inputs whose --mesh (or --mesh=) has more than 4096 devices are skipped (the
// JSON lists every device; the parsers are fuzzed at full size elsewhere).
#include <sys/mman.h>  // memfd_create
#include <unistd.h>    // ftruncate, pwrite

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>  // reads back the JSON the strict validator accepted
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <xshard/mesh/axes.hpp>
#include <xshard/sharding/hlo.hpp>
#include <xshard/sharding/sdy.hpp>

#include "fuzz_common.hpp"
#include "plan_cli.hpp"

namespace {

int topology_fd = -1;
std::string topology_path;

/// A strict JSON validator (RFC 8259 values, no duplicate-key check); also
/// collects the top-level object's string members.
class json_checker {
 public:
  explicit json_checker(std::string_view s) : s_(s) {}
  bool document(std::vector<std::pair<std::string, std::string>>& top) {
    ws();
    if (peek() != '{' || !object(&top, 0)) return false;
    ws();
    return i_ == s_.size();
  }

 private:
  std::string_view s_;
  std::size_t i_ = 0;
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  bool string(std::string* out) {
    if (peek() != '"') return false;
    ++i_;
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c == '\\') {
        if (i_ >= s_.size()) return false;
        const char e = s_[i_++];
        if (std::string_view("\"\\/bfnrt").find(e) != std::string_view::npos) {
          if (out) *out += e == '"' || e == '\\' || e == '/' ? e : '?';
          continue;
        }
        if (e != 'u' || i_ + 4 > s_.size()) return false;
        for (int k = 0; k < 4; ++k)
          if (!std::isxdigit(static_cast<unsigned char>(s_[i_++]))) return false;
        if (out) *out += '?';
        continue;
      }
      if (out) *out += c;
    }
    return false;
  }
  bool number() {
    if (peek() == '-') ++i_;
    if (peek() == '0') {
      ++i_;
    } else {
      if (!(peek() >= '1' && peek() <= '9')) return false;
      while (peek() >= '0' && peek() <= '9') ++i_;
    }
    return !(peek() == '.' || peek() == 'e' || peek() == 'E');  // the tool prints integers only
  }
  bool value(int depth) {
    if (depth > 64) return false;
    ws();
    const char c = peek();
    if (c == '{') return object(nullptr, depth + 1);
    if (c == '[') {
      ++i_;
      ws();
      if (peek() == ']') return ++i_, true;
      while (true) {
        if (!value(depth + 1)) return false;
        ws();
        if (peek() == ']') return ++i_, true;
        if (peek() != ',') return false;
        ++i_;
      }
    }
    if (c == '"') return string(nullptr);
    for (std::string_view word : {"true", "false", "null"})
      if (s_.substr(i_, word.size()) == word) return i_ += word.size(), true;
    return number();
  }
  bool object(std::vector<std::pair<std::string, std::string>>* members, int depth) {
    ++i_;  // '{'
    ws();
    if (peek() == '}') return ++i_, true;
    while (true) {
      ws();
      std::string key;
      if (!string(&key)) return false;
      ws();
      if (peek() != ':') return false;
      ++i_;
      ws();
      if (members && peek() == '"') {
        std::string v;
        if (!string(&v)) return false;
        members->emplace_back(key, v);
      } else {
        if (!value(depth)) return false;
        if (members) members->emplace_back(key, std::string());
      }
      ws();
      if (peek() == '}') return ++i_, true;
      if (peek() != ',') return false;
      ++i_;
    }
  }
};

bool too_big(const std::vector<std::string>& args) {
  auto big = [](std::string_view mesh) {
    const auto axes = xshard::parse_mesh_axes(mesh);
    return axes.ok() && xshard::mesh_size(axes.value) > 4096;
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--mesh" && i + 1 < args.size() && big(args[i + 1])) return true;
    if (args[i].rfind("--mesh=", 0) == 0 && big(std::string_view(args[i]).substr(7))) return true;  // CLI11's form
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  topology_fd = memfd_create("xshard-fuzz-topology", 0);
  if (topology_fd < 0) std::abort();
  topology_path = "/proc/self/fd/" + std::to_string(topology_fd);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto argv_text_and_file = fuzz::split_once(fuzz::as_text(data, size), '\x01');
  const std::string_view argv_text = argv_text_and_file.first, file = argv_text_and_file.second;
  std::vector<std::string> args;
  if (!argv_text.empty()) {
    std::size_t start = 0;
    while (true) {
      const std::size_t end = argv_text.find('\0', start);
      args.emplace_back(argv_text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
      if (end == std::string_view::npos) break;
      start = end + 1;
    }
  }
  if (too_big(args)) return 0;
  bool reads_file = false;
  for (std::size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--topology") {
      std::string& path = args[i + 1];
      if (path == "dir")
        path = "/";
      else if (path == "missing")
        path = "/nonexistent/xshard-fuzz/devices.json";
      else
        path = topology_path, reads_file = true;
    }
  if (reads_file) {
    if (ftruncate(topology_fd, 0) != 0 ||
        pwrite(topology_fd, file.data(), file.size(), 0) != static_cast<ssize_t>(file.size()))
      std::abort();
  }
  std::vector<std::string_view> views(args.begin(), args.end());

  xshard_plan::cli_result r;
  try {
    r = xshard_plan::run_cli(views);
  } catch (...) {
    fuzz::property_failed("run_cli lets no exception escape");
  }
  fuzz::check(r.status == 0 || r.status == 2, "exit status 0 or 2");
  if (r.status == 2) {
    fuzz::check(r.out.empty(), "nothing on stdout on error");
    fuzz::check(!r.err.empty() && r.err.back() == '\n' && r.err.find('\n') == r.err.size() - 1,
                "exactly one line on stderr", r.err);
    fuzz::check(r.err.substr(0, 6) == "xshard", "the error is an xshard error, not another exception", r.err);
    return 0;
  }
  fuzz::check(r.err.empty(), "nothing on stderr on success");
  fuzz::check(!r.out.empty(), "something on stdout on success");
  auto some_arg_starts = [&](std::string_view prefix) {
    return std::any_of(views.begin(), views.end(),
                       [&](std::string_view a) { return a.substr(0, prefix.size()) == prefix; });
  };
  if (r.out.rfind(xshard_plan::detail::help_banner, 0) == 0) {
    fuzz::check(some_arg_starts("-h") || some_arg_starts("--help"), "the usage only for -h/--help", r.out);
    return 0;
  }
  if (r.out.rfind("shape [", 0) == 0) {
    fuzz::check(some_arg_starts("--visualize"), "a picture only for --visualize", r.out);
    return 0;
  }

  std::vector<std::pair<std::string, std::string>> top;
  fuzz::check(json_checker(r.out).document(top), "stdout is one JSON object", r.out);
  std::string hlo, hlo_v2;
  std::vector<std::string> keys;
  for (const auto& [k, v] : top) {
    keys.push_back(k);
    if (k == "hlo") hlo = v;
    if (k == "hlo_v2") hlo_v2 = v;
  }
  for (const char* k : {"sharding_type", "tile_assignment", "group_assignment", "replication_groups", "hlo", "hlo_v2",
                        "sdy", "mesh", "device_ids"})
    fuzz::check(std::find(keys.begin(), keys.end(), k) != keys.end(), "the JSON has DESIGN.md's keys", k);
  const auto x1 = xshard::parse_hlo(hlo), x2 = xshard::parse_hlo(hlo_v2);
  fuzz::check(x1.ok() && x2.ok() && x1.value == x2.value, "\"hlo\" and \"hlo_v2\" parse to the same sharding",
              hlo + " / " + hlo_v2);

  // "sdy": Shardy's mesh line and sharding read back (parse_sdy) to the
  // printed mesh and a spec with the same HLO text; replica ids of a
  // {replicated} layout are the device ids.
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const std::string sdy = j["sdy"]["mesh"].get<std::string>() + "\n" + j["sdy"]["sharding"].get<std::string>();
  const auto v = xshard::parse_sdy(sdy);
  fuzz::check(v.ok(), "\"sdy\" parses", sdy);
  fuzz::check(xshard::mesh_text(v.value.mesh.axes).str() == j["mesh"].get<std::string>() &&
                  v.value.mesh.device_ids == j["device_ids"].get<std::vector<int>>(),
              "\"sdy\" holds the mesh", sdy);
  const xshard::runtime_mesh m(xshard::mesh_text(v.value.mesh.axes).str(), v.value.mesh.device_ids);
  fuzz::check(xshard::hlo_sharding_text(m, xshard::spec_text(v.value.spec).str()) == hlo,
              "\"sdy\" is the sharding \"hlo\" is", sdy + " / " + hlo);
  if (j.contains("shards") && !x1.value.is_tiled())
    for (const auto& s : j["shards"])
      fuzz::check(s["replica"] == s["device"], "under {replicated} a replica id is the device id", r.out);
  return 0;
}
