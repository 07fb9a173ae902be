// xshard/sharding/visualize.hpp - a text picture of a sharding, any rank.
//
// Like jax.debug.visualize_array_sharding, but for any rank: the last two
// dims are drawn as a grid of tiles, one panel per tile of the leading dims.
// Each cell lists the devices holding that tile (replicas comma separated).
//
//   visualize(mesh "data=2, model=2", spec "data, model", shape [4, 8]):
//
//   shape [4, 8]  {devices=[2,2]0,1,2,3}
//            0:4   4:8
//         +-----+-----+
//     0:2 | 0   | 1   |
//         +-----+-----+
//     2:4 | 2   | 3   |
//         +-----+-----+
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hlo.hpp"
#include "shards.hpp"

namespace xshard {

namespace detail {
inline std::string range_text(const shard_slice& s) { return std::to_string(s.start) + ":" + std::to_string(s.end); }

inline std::string devices_text(const std::vector<int>& devs, std::size_t max_listed = 8) {
  std::string t;
  if (devs.size() > max_listed) {
    for (std::size_t i = 0; i < max_listed - 2; ++i) t += std::to_string(devs[i]) + ",";
    return t + "...," + std::to_string(devs.back()) + " (" + std::to_string(devs.size()) + ")";
  }
  for (std::size_t i = 0; i < devs.size(); ++i) t += (i ? "," : "") + std::to_string(devs[i]);
  return t;
}
}  // namespace detail

/// Draws `layout` (from shard_slices). `title` is printed first if given.
inline std::string visualize(const shard_layout& layout, std::string_view title = {}) {
  std::string out;
  if (!title.empty()) out += std::string(title) + "\n";
  const std::size_t rank = layout.shape.size();
  // Group devices by the tile (its slices) they hold, keeping tile order.
  std::vector<std::pair<std::vector<shard_slice>, std::vector<int>>> tiles;
  std::map<std::vector<std::int64_t>, std::size_t> index;
  for (const shard& s : layout.shards) {
    std::vector<std::int64_t> key;
    for (const shard_slice& sl : s.slices) {
      key.push_back(sl.start);
      key.push_back(sl.end);
    }
    auto [it, fresh] = index.emplace(key, tiles.size());
    if (fresh) tiles.push_back({std::vector<shard_slice>(s.slices.begin(), s.slices.end()), {}});
    tiles[it->second].second.push_back(s.device);
  }
  // Distinct ranges per dim, in order.
  std::vector<std::vector<shard_slice>> ranges(rank);
  for (const auto& t : tiles)
    for (std::size_t d = 0; d < rank; ++d)
      if (std::find(ranges[d].begin(), ranges[d].end(), t.first[d]) == ranges[d].end()) ranges[d].push_back(t.first[d]);
  for (auto& r : ranges)
    std::sort(r.begin(), r.end(),
              [](auto a, auto b) { return a.start < b.start || (a.start == b.start && a.end < b.end); });

  const std::size_t rd = rank >= 2 ? rank - 2 : 0;  // grid row dim
  const std::size_t cd = rank >= 1 ? rank - 1 : 0;  // grid column dim
  const std::vector<shard_slice> none{shard_slice{0, 1}};
  const auto& rows = rank >= 2 ? ranges[rd] : none;
  const auto& cols = rank >= 1 ? ranges[cd] : none;

  auto cell = [&](const std::vector<shard_slice>& lead, const shard_slice& r, const shard_slice& c) {
    for (const auto& t : tiles) {
      bool match = true;
      for (std::size_t d = 0; d < lead.size(); ++d) match = match && t.first[d] == lead[d];
      if (rank >= 2) match = match && t.first[rd] == r;
      if (rank >= 1) match = match && t.first[cd] == c;
      if (match) return detail::devices_text(t.second);
    }
    return std::string("-");
  };
  // Panels: every combination of the leading dims' ranges.
  std::vector<std::size_t> lead_idx(rd, 0);
  while (true) {
    std::vector<shard_slice> lead;
    for (std::size_t d = 0; d < rd; ++d) lead.push_back(ranges[d][lead_idx[d]]);
    if (rd > 0) {
      out += "[";
      for (std::size_t d = 0; d < rd; ++d) out += detail::range_text(lead[d]) + ", ";
      out += ":, :]\n";
    }
    std::size_t width = 1;
    for (const auto& r : rows)
      for (const auto& c : cols) width = std::max(width, cell(lead, r, c).size());
    for (const auto& c : cols) width = std::max(width, detail::range_text(c).size());
    std::size_t label = 0;
    if (rank >= 2)
      for (const auto& r : rows) label = std::max(label, detail::range_text(r).size());
    const std::string pad(label + 1, ' ');
    std::string sep = pad + "+";
    for (std::size_t i = 0; i < cols.size(); ++i) sep += std::string(width + 2, '-') + "+";
    if (rank >= 1) {
      std::string head = pad + " ";
      for (const auto& c : cols) {
        std::string t = detail::range_text(c);
        head += " " + t + std::string(width + 2 - t.size(), ' ');
      }
      while (!head.empty() && head.back() == ' ') head.pop_back();
      out += head + "\n";
    }
    out += sep + "\n";
    for (const auto& r : rows) {
      std::string line = rank >= 2 ? detail::range_text(r) : std::string();
      line = std::string(label - line.size(), ' ') + line + " |";
      for (const auto& c : cols) {
        const std::string t = cell(lead, r, c);
        line += " " + t + std::string(width + 1 - t.size(), ' ') + "|";
      }
      out += line + "\n" + sep + "\n";
    }
    std::size_t d = rd;
    while (d-- > 0) {
      if (++lead_idx[d] < ranges[d].size()) break;
      lead_idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) break;
  }
  return out;
}

/// Run-time convenience: the picture of (mesh, spec) over `shape`, titled
/// with the shape and the HLO text.
inline std::string visualize(const runtime_mesh& m, std::string_view spec_text, std::span<const std::int64_t> shape) {
  const shard_layout layout = shard_slices(m, spec_text, shape);
  std::string title = "shape [";
  for (std::size_t d = 0; d < shape.size(); ++d) title += (d ? ", " : "") + std::to_string(shape[d]);
  title += "]  " + hlo_sharding_text(m, spec_text);
  return visualize(layout, title);
}

/// Typed convenience.
template <Mesh M, Spec S, std::size_t N>
std::string visualize(const std::array<std::int64_t, N>& shape) {
  return visualize(M::runtime(), S::text.view(), shape);
}

}  // namespace xshard
