// xshard/einsum/parse.hpp - einsum equations: parsing, implicit output,
// binding to operand ranks and extents. constexpr: the typed API
// (einsum<"...">) and the run-time API (einsum("...", ...)) share it.
//
// Semantics are PyTorch's torch.einsum:
//   letters a-z A-Z; whitespace ignored; "..." at most once per term;
//   no "->": the output is "..." (if any input has one) then the letters that
//     appear exactly once, sorted (A-Z before a-z);
//   a letter repeated in one term takes the diagonal;
//   letters (and ellipsis dims) absent from the output are summed;
//   ellipsis dims are right-aligned across operands and broadcast;
//   a letter's extents must agree or be 1 (size-1 broadcasting).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "../core/error.hpp"
#include "../core/static_vector.hpp"
#include "../core/text.hpp"

namespace xshard {

inline constexpr std::size_t max_einsum_operands = 16;
inline constexpr std::size_t max_einsum_rank = 24;  ///< dims per term (ellipsis dims included)
inline constexpr char ellipsis_label = '.';         ///< marks the ellipsis inside a term

/// One term of an equation: its letters in order, with '.' where "..." sits.
struct einsum_term {
  static_vector<char, max_einsum_rank> labels{};
  static_vector<int, max_einsum_rank> columns{};  ///< 1-based column of each label
  constexpr bool has_ellipsis() const { return ellipsis_pos() >= 0; }
  constexpr int ellipsis_pos() const {
    for (std::size_t i = 0; i < labels.size(); ++i)
      if (labels[i] == ellipsis_label) return static_cast<int>(i);
    return -1;
  }
  constexpr std::size_t letter_count() const { return labels.size() - (has_ellipsis() ? 1 : 0); }
  constexpr int count(char c) const {
    int n = 0;
    for (char l : labels) n += l == c ? 1 : 0;
    return n;
  }
  friend constexpr bool operator==(const einsum_term& a, const einsum_term& b) { return a.labels == b.labels; }
};

/// How a subscript takes part in the contraction.
enum class index_class : std::uint8_t {
  absent,      ///< in no input
  batch,       ///< in two or more inputs and in the output
  free_left,   ///< in the first input only (of two), and in the output
  free_right,  ///< in the second input only (of two), and in the output
  free,        ///< in one input only and in the output (1 or 3+ operands)
  contracted,  ///< in two or more inputs, not in the output
  summed,      ///< in one input only, not in the output
};

struct einsum_equation {
  static_vector<einsum_term, max_einsum_operands> inputs{};
  einsum_term output{};
  bool explicit_output = false;

  constexpr std::size_t operands() const { return inputs.size(); }
  /// Number of inputs whose term contains `c` (a letter or '.').
  constexpr int inputs_with(char c) const {
    int n = 0;
    for (const einsum_term& t : inputs) n += t.count(c) > 0 ? 1 : 0;
    return n;
  }
  constexpr index_class classify(char c) const {
    const int n = inputs_with(c);
    const bool out = output.count(c) > 0;
    if (n == 0) return index_class::absent;
    if (n >= 2) return out ? index_class::batch : index_class::contracted;
    if (!out) return index_class::summed;
    if (inputs.size() != 2) return index_class::free;
    return inputs[0].count(c) > 0 ? index_class::free_left : index_class::free_right;
  }
  friend constexpr bool operator==(const einsum_equation&, const einsum_equation&) = default;
};

namespace detail {
constexpr bool is_label(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
constexpr diagnostic einsum_at(errc code, int column, char ch = 0) {
  diagnostic d;
  d.code = code;
  d.column = column;
  d.ch = ch;
  return d;
}
/// An explicit output's letters: each in some input, none twice.
constexpr diagnostic check_einsum_output(const einsum_equation& eq) {
  const einsum_term& o = eq.output;
  for (std::size_t i = 0; i < o.labels.size(); ++i) {
    const char c = o.labels[i];
    if (eq.inputs_with(c) == 0)
      return einsum_at(c == ellipsis_label ? errc::einsum_output_ellipsis : errc::einsum_output_unknown, o.columns[i],
                       c == ellipsis_label ? '\0' : c);
    if (c != ellipsis_label && o.count(c) > 1) return einsum_at(errc::einsum_output_twice, o.columns[i], c);
  }
  return {};
}
/// The implicit output: "..." first, then the letters used exactly once, sorted.
constexpr void fill_implicit_output(einsum_equation& eq) {
  bool any_ellipsis = false;
  for (const einsum_term& t : eq.inputs) any_ellipsis = any_ellipsis || t.has_ellipsis();
  if (any_ellipsis) {
    eq.output.labels.push_back(ellipsis_label);
    eq.output.columns.push_back(0);
  }
  for (char c = 'A'; c <= 'z'; ++c) {
    if (!is_label(c)) continue;
    int uses = 0;
    for (const einsum_term& t : eq.inputs) uses += t.count(c);
    if (uses == 1) {
      eq.output.labels.push_back(c);
      eq.output.columns.push_back(0);
    }
  }
}
}  // namespace detail

/// Parses an equation and fills in the implicit output.
constexpr checked<einsum_equation> parse_einsum(std::string_view text) {
  checked<einsum_equation> out;
  einsum_equation& eq = out.value;
  eq.inputs.push_back({});
  einsum_term* term = &eq.inputs.back();
  auto push = [&](char c, std::size_t pos) {
    if (term->labels.full()) {
      out.diag.code = errc::einsum_too_many;
      out.diag.a = static_cast<std::int64_t>(max_einsum_rank) + 1;
      out.diag.b = static_cast<std::int64_t>(max_einsum_rank);
      return false;
    }
    term->labels.push_back(c);
    term->columns.push_back(static_cast<int>(pos) + 1);
    return true;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const int col = static_cast<int>(i) + 1;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    if (detail::is_label(c)) {
      if (!push(c, i)) return out;
    } else if (c == '.') {
      if (i + 2 >= text.size() || text[i + 1] != '.' || text[i + 2] != '.') {
        out.diag = detail::einsum_at(errc::einsum_ellipsis, col, c);
        return out;
      }
      if (term->has_ellipsis()) {
        out.diag = detail::einsum_at(errc::einsum_two_ellipses, col, c);
        return out;
      }
      if (!push(ellipsis_label, i)) return out;
      i += 2;
    } else if (c == ',' && !eq.explicit_output) {
      if (eq.inputs.full()) {
        out.diag.code = errc::einsum_too_many;
        out.diag.a = static_cast<std::int64_t>(max_einsum_operands) + 1;
        out.diag.b = static_cast<std::int64_t>(max_einsum_operands);
        return out;
      }
      eq.inputs.push_back({});
      term = &eq.inputs.back();
    } else if (c == '-' && !eq.explicit_output && i + 1 < text.size() && text[i + 1] == '>') {
      eq.explicit_output = true;
      term = &eq.output;
      ++i;
    } else {
      out.diag = detail::einsum_at(errc::einsum_syntax, col, c);
      return out;
    }
  }
  if (eq.explicit_output)
    out.diag = detail::check_einsum_output(eq);
  else
    detail::fill_implicit_output(eq);
  return out;
}

/// The equation in canonical text ("ij,jk->ik"): explicit output always.
constexpr text_builder einsum_text(const einsum_equation& eq) {
  text_builder t;
  auto term = [&](const einsum_term& x) {
    for (char c : x.labels) {
      if (c == ellipsis_label)
        t << "...";
      else
        t << c;
    }
  };
  for (std::size_t i = 0; i < eq.inputs.size(); ++i) {
    if (i) t << ',';
    term(eq.inputs[i]);
  }
  t << "->";
  term(eq.output);
  return t;
}

// ---------------------------------------------------------------------------
// Binding to operand ranks: every dim gets a label id. Letters keep ids
// 0..51 ('A'..'Z', 'a'..'z'); the k-th ellipsis dim (of the broadcast
// ellipsis, right-aligned) is id 52 + k.

inline constexpr int einsum_letter_ids = 52;
inline constexpr std::size_t max_einsum_labels = einsum_letter_ids + max_einsum_rank;

constexpr int label_id(char c) { return c >= 'a' ? 26 + (c - 'a') : c - 'A'; }
constexpr char label_char(int id) {
  return id < 26 ? static_cast<char>('A' + id) : id < 52 ? static_cast<char>('a' + id - 26) : ellipsis_label;
}

struct einsum_binding {
  int ellipsis_dims = 0;  ///< dims of the broadcast ellipsis
  static_vector<static_vector<int, max_einsum_rank>, max_einsum_operands> operand_labels{};
  static_vector<int, max_einsum_rank> output_labels{};
  friend constexpr bool operator==(const einsum_binding&, const einsum_binding&) = default;
};

/// Checks operand count and ranks, and assigns label ids to every dim.
constexpr checked<einsum_binding> bind_einsum(const einsum_equation& eq, std::span<const std::int64_t> ranks) {
  checked<einsum_binding> out;
  einsum_binding& b = out.value;
  if (ranks.size() != eq.inputs.size()) {
    out.diag.code = errc::einsum_operand_count;
    out.diag.a = static_cast<std::int64_t>(eq.inputs.size());
    out.diag.b = static_cast<std::int64_t>(ranks.size());
    return out;
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const einsum_term& t = eq.inputs[i];
    const auto letters = static_cast<std::int64_t>(t.letter_count());
    if (t.has_ellipsis() ? ranks[i] < letters : ranks[i] != letters) {
      out.diag.code = errc::einsum_rank;
      out.diag.column = static_cast<int>(i);
      out.diag.a = letters;
      out.diag.b = ranks[i];
      return out;
    }
    if (ranks[i] > static_cast<std::int64_t>(max_einsum_rank)) {
      out.diag.code = errc::einsum_too_many;
      out.diag.a = ranks[i];
      out.diag.b = static_cast<std::int64_t>(max_einsum_rank);
      return out;
    }
    if (t.has_ellipsis()) b.ellipsis_dims = std::max(b.ellipsis_dims, static_cast<int>(ranks[i] - letters));
  }
  auto expand = [&](const einsum_term& t, int dims, static_vector<int, max_einsum_rank>& ids) {
    for (char c : t.labels) {
      if (c != ellipsis_label) {
        ids.push_back(label_id(c));
        continue;
      }
      for (int k = b.ellipsis_dims - dims; k < b.ellipsis_dims; ++k) ids.push_back(einsum_letter_ids + k);
    }
  };
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    static_vector<int, max_einsum_rank> ids;
    const einsum_term& t = eq.inputs[i];
    expand(t, static_cast<int>(ranks[i]) - static_cast<int>(t.letter_count()), ids);
    b.operand_labels.push_back(ids);
  }
  if (static_cast<std::size_t>(b.ellipsis_dims) + eq.output.letter_count() > max_einsum_rank) {
    out.diag.code = errc::einsum_too_many;
    out.diag.a = b.ellipsis_dims + static_cast<std::int64_t>(eq.output.letter_count());
    out.diag.b = static_cast<std::int64_t>(max_einsum_rank);
    return out;
  }
  expand(eq.output, b.ellipsis_dims, b.output_labels);
  return out;
}

/// The output rank for given operand ranks (-1 if they do not fit).
constexpr std::int64_t einsum_output_rank(const einsum_equation& eq, std::span<const std::int64_t> ranks) {
  const checked<einsum_binding> b = bind_einsum(eq, ranks);
  return b.ok() ? static_cast<std::int64_t>(b.value.output_labels.size()) : -1;
}

/// Extent of every label id (broadcast), checked.
struct einsum_extents {
  std::int64_t of[max_einsum_labels]{};  ///< 0 where a label is unused (-1 never)
  bool used[max_einsum_labels]{};
  int label_bound = 0;  ///< every label id of the binding (operands and output) is below this
};

/// Checks extents into `e` (as constructed: zeros; a run-time caller keeps
/// it, no copy): a letter repeated in one operand needs equal extents; a
/// label's extents across operands must agree or be 1.
constexpr diagnostic einsum_label_extents_into(const einsum_binding& b,
                                               std::span<const std::span<const std::int64_t>> shapes,
                                               einsum_extents& e) {
  diagnostic diag;
  for (const auto& ids : b.operand_labels)
    for (int id : ids) e.label_bound = id + 1 > e.label_bound ? id + 1 : e.label_bound;
  for (int id : b.output_labels) e.label_bound = id + 1 > e.label_bound ? id + 1 : e.label_bound;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const auto& ids = b.operand_labels[i];
    for (std::size_t d = 0; d < ids.size(); ++d) {
      const int id = ids[d];
      const std::int64_t n = shapes[i][d];
      // Repeated within this operand: must be equal (a diagonal).
      for (std::size_t d2 = 0; d2 < d; ++d2)
        if (ids[d2] == id && shapes[i][d2] != n) {
          diag.code = errc::einsum_diagonal;
          diag.column = static_cast<int>(i);
          diag.ch = label_char(id);
          diag.a = shapes[i][d2];
          diag.b = n;
          return diag;
        }
      if (!e.used[id] || e.of[id] == 1) {
        // First sight, or broadcasting from 1: 1 broadcasts to any extent, 0 included.
        e.of[id] = n;
        e.used[id] = true;
      } else if (n != e.of[id] && n != 1) {
        diag.code = errc::einsum_extent;
        diag.ch = label_char(id);
        diag.a = e.of[id];
        diag.b = n;
        return diag;
      }
    }
  }
  return diag;
}

/// The same as a checked value.
constexpr checked<einsum_extents> einsum_label_extents(const einsum_binding& b,
                                                       std::span<const std::span<const std::int64_t>> shapes) {
  checked<einsum_extents> out;
  out.diag = einsum_label_extents_into(b, shapes, out.value);
  return out;
}

}  // namespace xshard
