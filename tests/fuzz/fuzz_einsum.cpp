// fuzz_einsum: run-time einsum equations, parsed and executed, against a
// naive reference written here from PyTorch's rules.
//
// Input: the equation, optionally '\0' and bytes that choose the operands
// (when they run out, a generator seeded from the input continues):
//   flags: bits 0-1 a deliberate fault (0 none, 1 one operand too many or
//          too few, 2 one operand's rank off by one, 3 one extent changed),
//          bits 2-4 which operands are column-major xt::xarrays;
//   then per operand the ellipsis dims (0..2), per label an extent (0..3, 0
//   rarely), per dim whether it is 1 (size-1 broadcasting), then the values.
//
// Properties:
//  - parse_einsum accepts exactly what the reference parser accepts (letters,
//    whitespace, one "..." per term, ',' and one "->"; at most 16 terms of 24
//    labels; output letters from the inputs, each once; "..." in the output
//    only if an input has one) and, without "->", gives the reference's
//    implicit output ("..." first, then the letters used once, A-Z before a-z);
//    einsum_text prints an equation that parses back equal;
//  - a rejected equation makes xshard::einsum throw xshard::error only;
//  - with up to 3 operands of rank <= 4: xshard::einsum throws xshard::error
//    exactly when the reference finds a fault (operand count, rank, a
//    repeated letter's extents, extents that are neither equal nor 1);
//    otherwise its shape and every value equal the reference's, which loops
//    over every assignment of the labels (at most 50000) with integer-valued
//    doubles, so equality is exact.
// xshard::set_num_threads(1) keeps the run single-threaded.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <xshard/core/thread_pool.hpp>
#include <xshard/einsum/einsum.hpp>
#include <xshard/einsum/parse.hpp>
#include <xtensor/xarray.hpp>

#include "fuzz_common.hpp"

namespace {

constexpr int ellipsis = -1;  // a term label that stands for the ellipsis

struct ref_equation {
  std::vector<std::vector<int>> inputs;  // letters as 0..51 (A-Z, a-z), ellipsis as -1
  std::vector<int> output;
  bool explicit_output = false;
};

int letter_id(char c) { return c >= 'a' ? 26 + (c - 'a') : c - 'A'; }
bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool has(const std::vector<int>& t, int l) {
  for (int x : t)
    if (x == l) return true;
  return false;
}

/// The reference parser: nullopt when the equation is invalid.
std::optional<ref_equation> ref_parse(std::string_view s) {
  ref_equation eq;
  eq.inputs.emplace_back();
  std::vector<int>* term = &eq.inputs.back();
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    if (is_letter(c) || c == '.') {
      int label = 0;
      if (c == '.') {
        if (s.substr(i, 3) != "..." || has(*term, ellipsis)) return std::nullopt;
        label = ellipsis;
        i += 2;
      } else {
        label = letter_id(c);
      }
      if (term->size() == 24) return std::nullopt;
      term->push_back(label);
    } else if (c == ',' && !eq.explicit_output) {
      if (eq.inputs.size() == 16) return std::nullopt;
      eq.inputs.emplace_back();
      term = &eq.inputs.back();
    } else if (c == '-' && i + 1 < s.size() && s[i + 1] == '>' && !eq.explicit_output) {
      eq.explicit_output = true;
      term = &eq.output;
      ++i;
    } else {
      return std::nullopt;
    }
  }
  auto uses = [&](int l) {
    int n = 0;
    for (const auto& t : eq.inputs)
      for (int x : t) n += x == l ? 1 : 0;
    return n;
  };
  if (eq.explicit_output) {
    for (std::size_t i = 0; i < eq.output.size(); ++i) {
      if (uses(eq.output[i]) == 0) return std::nullopt;
      for (std::size_t j = 0; j < i; ++j)
        if (eq.output[j] == eq.output[i]) return std::nullopt;
    }
    return eq;
  }
  if (uses(ellipsis) > 0) eq.output.push_back(ellipsis);
  for (int l = 0; l < 52; ++l)
    if (uses(l) == 1) eq.output.push_back(l);
  return eq;
}

std::vector<int> lib_term(const xshard::einsum_term& t) {
  std::vector<int> out;
  for (char c : t.labels) out.push_back(c == xshard::ellipsis_label ? ellipsis : letter_id(c));
  return out;
}

/// Bytes of the input tail, then a generator seeded from the whole input.
class chooser {
 public:
  chooser(std::string_view tail, std::string_view all) : tail_(tail) {
    for (char c : all) state_ = (state_ ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  }
  unsigned next() {
    if (pos_ < tail_.size()) return static_cast<unsigned char>(tail_[pos_++]);
    state_ ^= state_ >> 33;
    state_ *= 0xff51afd7ed558ccdULL;
    state_ ^= state_ >> 29;
    return static_cast<unsigned>(state_ & 0xff);
  }

 private:
  std::string_view tail_;
  std::size_t pos_ = 0;
  std::uint64_t state_ = 0xcbf29ce484222325ULL;
};

struct operand {
  std::vector<std::size_t> shape;
  std::vector<double> values;  // row-major
};

using row_major = xt::xarray<double>;
using col_major = xt::xarray<double, xt::layout_type::column_major>;

template <class A>
A to_array(const operand& op) {
  A a = A::from_shape(op.shape);
  std::size_t i = 0;
  // Fill in row-major index order whatever the storage order.
  std::vector<std::size_t> idx(op.shape.size(), 0);
  for (; i < op.values.size(); ++i) {
    a.element(idx.begin(), idx.end()) = op.values[i];
    for (std::size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < op.shape[d]) break;
      idx[d] = 0;
    }
  }
  return a;
}

/// xshard::einsum(eq, operands...) with each operand row- or column-major.
template <class... A>
xt::xarray<double> call(std::string_view eq, const std::vector<operand>& ops, unsigned col_mask, const A&... done) {
  constexpr std::size_t k = sizeof...(A);
  if constexpr (k < 3) {
    if (k < ops.size()) {
      if (col_mask & (1u << k)) return call(eq, ops, col_mask, done..., to_array<col_major>(ops[k]));
      return call(eq, ops, col_mask, done..., to_array<row_major>(ops[k]));
    }
  }
  if constexpr (k == 0) {
    return xshard::einsum(eq, row_major(0.0));  // never reached: ops is never empty
  } else {
    return xshard::einsum(eq, done...);
  }
}

/// The reference result, or nullopt when the operands do not fit.
struct ref_result {
  std::vector<std::size_t> shape;
  std::vector<double> values;
  bool computed = false;  // false when there were too many assignments to loop over
};

std::optional<ref_result> reference(const ref_equation& eq, const std::vector<operand>& ops) {
  if (ops.size() != eq.inputs.size()) return std::nullopt;
  // Ellipsis dims: the most any operand has; right-aligned. Label ids:
  // 0..51 letters, 52 + k the k-th ellipsis dim.
  std::size_t E = 0;
  std::vector<std::size_t> letters(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const auto& t = eq.inputs[i];
    letters[i] = t.size() - (has(t, ellipsis) ? 1 : 0);
    if (has(t, ellipsis) ? ops[i].shape.size() < letters[i] : ops[i].shape.size() != letters[i]) return std::nullopt;
    if (has(t, ellipsis)) E = std::max(E, ops[i].shape.size() - letters[i]);
  }
  auto dim_labels = [&](const std::vector<int>& t, std::size_t edims) {
    std::vector<int> ids;
    for (int l : t) {
      if (l != ellipsis) {
        ids.push_back(l);
        continue;
      }
      for (std::size_t k = E - edims; k < E; ++k) ids.push_back(52 + static_cast<int>(k));
    }
    return ids;
  };
  std::vector<std::vector<int>> ids(ops.size());
  std::array<std::int64_t, 52 + 24> extent{};
  std::array<bool, 52 + 24> seen{}, fixed{};  // fixed: an extent other than 1 was seen
  for (std::size_t i = 0; i < ops.size(); ++i) {
    ids[i] = dim_labels(eq.inputs[i], ops[i].shape.size() - letters[i]);
    for (std::size_t d = 0; d < ids[i].size(); ++d) {
      const auto l = static_cast<std::size_t>(ids[i][d]);
      const auto n = static_cast<std::int64_t>(ops[i].shape[d]);
      for (std::size_t d2 = 0; d2 < d; ++d2)
        if (ids[i][d2] == ids[i][d] && ops[i].shape[d2] != ops[i].shape[d]) return std::nullopt;  // diagonal
      if (!seen[l]) extent[l] = 1;
      seen[l] = true;
      if (n == 1) continue;
      if (fixed[l] && extent[l] != n) return std::nullopt;
      fixed[l] = true;
      extent[l] = n;
    }
  }
  ref_result r;
  const std::vector<int> out = dim_labels(eq.output, E);
  for (int l : out) r.shape.push_back(static_cast<std::size_t>(extent[static_cast<std::size_t>(l)]));
  std::size_t out_size = 1;
  for (std::size_t n : r.shape) out_size *= n;
  r.values.assign(out_size, 0.0);
  std::vector<int> all;  // every label in use
  for (std::size_t l = 0; l < seen.size(); ++l)
    if (seen[l]) all.push_back(static_cast<int>(l));
  std::int64_t total = 1;
  for (int l : all) {
    total *= extent[static_cast<std::size_t>(l)];
    if (total > 50000) return r;  // shape only
  }
  r.computed = true;
  std::array<std::int64_t, 52 + 24> at{};
  for (std::int64_t step = 0; step < total; ++step) {
    std::int64_t rest = step;
    for (std::size_t j = all.size(); j-- > 0;) {
      const auto l = static_cast<std::size_t>(all[j]);
      at[l] = rest % extent[l];
      rest /= extent[l];
    }
    double product = 1;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      std::size_t flat = 0;
      for (std::size_t d = 0; d < ids[i].size(); ++d) {
        const std::size_t n = ops[i].shape[d];
        const auto idx = n == 1 ? 0 : static_cast<std::size_t>(at[static_cast<std::size_t>(ids[i][d])]);
        flat = flat * n + idx;
      }
      product *= ops[i].values[flat];
    }
    std::size_t o = 0;
    for (std::size_t d = 0; d < out.size(); ++d)
      o = o * r.shape[d] + static_cast<std::size_t>(at[static_cast<std::size_t>(out[d])]);
    r.values[o] += product;
  }
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  xshard::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view all = fuzz::as_text(data, size);
  const auto text_and_tail = fuzz::split_once(all, '\0');
  const std::string_view text = text_and_tail.first, tail = text_and_tail.second;

  const xshard::checked<xshard::einsum_equation> parsed = xshard::parse_einsum(text);
  const std::optional<ref_equation> ref = ref_parse(text);
  fuzz::check(parsed.ok() == ref.has_value(), "parse_einsum accepts exactly what the reference parser accepts");
  if (!parsed.ok()) {
    fuzz::check(!fuzz::accepts([&] { xshard::einsum(text, row_major(1.0)); }), "einsum rejects a bad equation");
    return 0;
  }
  const xshard::einsum_equation& eq = parsed.value;
  fuzz::check(eq.inputs.size() == ref->inputs.size(), "the number of terms");
  for (std::size_t i = 0; i < eq.inputs.size(); ++i)
    fuzz::check(lib_term(eq.inputs[i]) == ref->inputs[i], "the labels of a term");
  fuzz::check(lib_term(eq.output) == ref->output, "the output (implicit: '...', then letters used once, sorted)");
  const std::string canonical = xshard::einsum_text(eq).str();
  const auto again = xshard::parse_einsum(canonical);
  fuzz::check(again.ok(), "the canonical text parses", canonical);
  for (std::size_t i = 0; i < eq.inputs.size(); ++i)
    fuzz::check(again.value.inputs[i] == eq.inputs[i], "the canonical text has the same terms", canonical);
  fuzz::check(again.value.output == eq.output && again.value.explicit_output, "the canonical output", canonical);

  // Operands.
  chooser pick(tail, all);
  const unsigned flags = pick.next();
  const unsigned fault = flags & 3u;
  const unsigned col_mask = (flags >> 2) & 7u;
  std::size_t count = eq.inputs.size();
  if (fault == 1) count = (pick.next() & 1) || count == 1 ? count + 1 : count - 1;
  if (count == 0 || count > 3) return 0;
  std::vector<std::size_t> ranks(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t t = std::min(i, eq.inputs.size() - 1);
    ranks[i] = eq.inputs[t].letter_count() + (eq.inputs[t].has_ellipsis() ? pick.next() % 3 : 0);
  }
  if (fault == 2) {
    std::size_t& r = ranks[pick.next() % count];
    r = (pick.next() & 1) || r == 0 ? r + 1 : r - 1;
  }
  for (std::size_t r : ranks)
    if (r > 4) return 0;
  constexpr std::int64_t extents[8] = {1, 2, 3, 2, 3, 1, 0, 3};
  std::array<std::int64_t, 52 + 4> base{};
  for (auto& e : base) e = -1;
  std::vector<operand> ops(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t t = std::min(i, eq.inputs.size() - 1);
    const std::vector<int> labels = lib_term(eq.inputs[t]);
    const std::size_t edims = ranks[i] >= eq.inputs[t].letter_count() ? ranks[i] - eq.inputs[t].letter_count() : 0;
    std::vector<int> dims;  // label per dim (52 + k for the k-th ellipsis dim from the right)
    for (int l : labels) {
      if (l != ellipsis) {
        dims.push_back(l);
        continue;
      }
      for (std::size_t k = edims; k-- > 0;) dims.push_back(52 + static_cast<int>(k));
    }
    dims.resize(ranks[i], 0);  // a rank fault: pad or cut
    for (int l : dims) {
      auto& e = base[static_cast<std::size_t>(l)];
      if (e < 0) e = extents[pick.next() % 8];
      ops[i].shape.push_back(static_cast<std::size_t>((pick.next() & 7) == 0 ? 1 : e));
    }
  }
  if (fault == 3) {
    operand& op = ops[pick.next() % count];
    if (!op.shape.empty()) op.shape[pick.next() % op.shape.size()] = pick.next() % 4;
  }
  for (operand& op : ops) {
    std::size_t n = 1;
    for (std::size_t e : op.shape) n *= e;
    for (std::size_t k = 0; k < n; ++k) op.values.push_back(static_cast<double>(static_cast<int>(pick.next() % 5) - 2));
  }

  const std::optional<ref_result> want = reference(*ref, ops);
  xt::xarray<double> got;
  const bool ran = fuzz::accepts([&] { got = call(text, ops, col_mask); });
  fuzz::check(ran == want.has_value(),
              want ? "einsum runs operands that fit" : "einsum rejects operands that do not fit");
  if (!ran) return 0;
  fuzz::check(got.dimension() == want->shape.size(), "the output rank");
  for (std::size_t d = 0; d < want->shape.size(); ++d)
    fuzz::check(got.shape()[d] == want->shape[d], "the output shape");
  if (!want->computed) return 0;
  std::size_t i = 0;
  std::vector<std::size_t> idx(want->shape.size(), 0);
  for (; i < want->values.size(); ++i) {
    const double v = got.element(idx.begin(), idx.end());
    if (v != want->values[i])
      fuzz::property_failed(
          "einsum's value equals the reference's",
          "element " + std::to_string(i) + ": " + std::to_string(v) + " != " + std::to_string(want->values[i]));
    for (std::size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < want->shape[d]) break;
      idx[d] = 0;
    }
  }
  return 0;
}
