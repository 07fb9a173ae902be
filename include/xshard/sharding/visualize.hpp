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
/// Cells are tiles (by tile index, so distinct empty tiles stay distinct);
/// row and column labels are the [start:end) ranges of the tiles.
inline std::string visualize(const shard_layout& layout, std::string_view title = {}) {
  std::string out;
  if (!title.empty()) out += std::string(title) + "\n";
  const std::size_t rank = layout.shape.size();
  std::int64_t tiles = 1;
  for (std::int64_t t : layout.tile_dims) tiles *= t;
  std::vector<std::vector<int>> holders(static_cast<std::size_t>(tiles));
  for (const shard& s : layout.shards) holders[static_cast<std::size_t>(s.tile)].push_back(s.device);
  auto range = [&](std::size_t d, std::int64_t j) {
    const std::int64_t n = layout.shape[d], w = layout.shard_shape[d];
    return detail::range_text({std::min(j * w, n), std::min((j + 1) * w, n)});
  };
  const std::size_t rd = rank >= 2 ? rank - 2 : 0;  // grid row dim
  const std::size_t cd = rank >= 1 ? rank - 1 : 0;  // grid column dim
  const std::int64_t rows = rank >= 2 ? layout.tile_dims[rd] : 1;
  const std::int64_t cols = rank >= 1 ? layout.tile_dims[cd] : 1;
  const std::int64_t panel = rows * cols;  // tiles per panel of the leading dims
  for (std::int64_t p = 0; p * panel < tiles; ++p) {
    if (rd > 0) {  // "[0:2, 3:6, :, :]" from the panel's leading tile coordinates
      std::vector<std::string> lead(rd);
      std::int64_t rest = p;
      for (std::size_t d = rd; d-- > 0;) {
        lead[d] = range(d, rest % layout.tile_dims[d]);
        rest /= layout.tile_dims[d];
      }
      out += "[";
      for (const std::string& l : lead) out += l + ", ";
      out += ":, :]\n";
    }
    auto cell = [&](std::int64_t r, std::int64_t c) {
      const auto& h = holders[static_cast<std::size_t>(p * panel + r * cols + c)];
      return h.empty() ? std::string("-") : detail::devices_text(h);
    };
    std::size_t width = 1, label = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      if (rank >= 2) label = std::max(label, range(rd, r).size());
      for (std::int64_t c = 0; c < cols; ++c) width = std::max(width, cell(r, c).size());
    }
    for (std::int64_t c = 0; c < cols && rank >= 1; ++c) width = std::max(width, range(cd, c).size());
    const std::string pad(label + 1, ' ');
    std::string sep = pad + "+";
    for (std::int64_t c = 0; c < cols; ++c) sep += std::string(width + 2, '-') + "+";
    if (rank >= 1) {
      std::string head = pad + " ";
      for (std::int64_t c = 0; c < cols; ++c) {
        const std::string t = range(cd, c);
        head += " " + t + std::string(width + 2 - t.size(), ' ');
      }
      while (!head.empty() && head.back() == ' ') head.pop_back();
      out += head + "\n";
    }
    out += sep + "\n";
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::string l = rank >= 2 ? range(rd, r) : std::string();
      std::string line = std::string(label - l.size(), ' ') + l + " |";
      for (std::int64_t c = 0; c < cols; ++c) {
        const std::string t = cell(r, c);
        line += " " + t + std::string(width + 1 - t.size(), ' ') + "|";
      }
      out += line + "\n" + sep + "\n";
    }
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
