// Randomised einsum against an independent reference.
//
// The reference in this file has its own equation parser (whitespace,
// "...", "->", implicit output: ellipsis first, then the letters used exactly
// once sorted A-Z before a-z) and computes the result by a naive
// double-precision loop over every value of every label (letters and ellipsis
// dims), with PyTorch's rules: ellipsis dims right-aligned and broadcast, a
// letter repeated in one operand takes the diagonal, labels absent from the
// output (ellipsis dims included) are summed, size-1 dims broadcast. It shares
// no code with include/xshard/einsum.
//
// Random equations cover 1-4 operands, ranks 0-4, repeated letters, ellipses
// of different ranks per operand (summed when the output omits them),
// size-1 broadcasting of letters and of ellipsis dims, extents 0 and 1,
// implicit and explicit outputs and stray whitespace, in float and double, with
// operands as xt::xarray and as strided views read in place (xt::transpose of
// a permuted copy; xt::strided_view with steps, negative steps and an integer
// index into a NaN-filled base, so a stray read shows up as NaN).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>
#include <xshard/xshard.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xview.hpp>

namespace {

using shape_t = std::vector<std::size_t>;

// ---------------------------------------------------------------------------
// The reference.

struct ref_equation {
  std::vector<std::string> inputs;  ///< one string per term; '.' stands for "..."
  std::string output;
};

/// Parses an equation (valid input assumed; returns nullopt otherwise).
std::optional<ref_equation> ref_parse(std::string_view text) {
  std::string s;
  for (char c : text)
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') s += c;
  std::string lhs = s, rhs;
  bool has_arrow = false;
  if (const auto p = s.find("->"); p != std::string::npos) {
    has_arrow = true;
    lhs = s.substr(0, p);
    rhs = s.substr(p + 2);
  }
  auto term = [](const std::string& t) -> std::optional<std::string> {
    std::string out;
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (std::isalpha(static_cast<unsigned char>(t[i]))) {
        out += t[i];
      } else if (t.compare(i, 3, "...") == 0 && out.find('.') == std::string::npos) {
        out += '.';
        i += 2;
      } else {
        return std::nullopt;
      }
    }
    return out;
  };
  ref_equation eq;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = lhs.find(',', start);
    const auto t = term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (!t) return std::nullopt;
    eq.inputs.push_back(*t);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (has_arrow) {
    const auto t = term(rhs);
    if (!t) return std::nullopt;
    eq.output = *t;
    return eq;
  }
  bool ellipsis = false;
  int count[128] = {};
  for (const std::string& t : eq.inputs)
    for (char c : t) {
      if (c == '.')
        ellipsis = true;
      else
        ++count[static_cast<unsigned char>(c)];
    }
  if (ellipsis) eq.output += '.';
  for (const char* p = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"; *p; ++p)
    if (count[static_cast<unsigned char>(*p)] == 1) eq.output += *p;
  return eq;
}

struct ref_result {
  shape_t shape;
  std::vector<double> value;    ///< row-major
  std::vector<double> abs_sum;  ///< sum of |term| per element (error scale)
  double terms_per_element = 0;
};

/// The naive loop. `data[i]` holds operand i row-major with `shapes[i]`.
std::optional<ref_result> ref_einsum(const ref_equation& eq, const std::vector<shape_t>& shapes,
                                     const std::vector<std::vector<double>>& data) {
  if (shapes.size() != eq.inputs.size()) return std::nullopt;
  // Ellipsis dims of the broadcast ellipsis: the most any operand has.
  std::size_t ell = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::string& t = eq.inputs[i];
    const std::size_t letters = t.size() - (t.find('.') != std::string::npos ? 1 : 0);
    if (t.find('.') == std::string::npos ? shapes[i].size() != letters : shapes[i].size() < letters)
      return std::nullopt;
    if (t.find('.') != std::string::npos) ell = std::max(ell, shapes[i].size() - letters);
  }
  // Labels: a letter is its char; ellipsis dim k (of `ell`, right-aligned) is 128 + k.
  auto expand = [&](const std::string& t, std::size_t dims) {
    std::vector<int> ids;
    for (char c : t) {
      if (c != '.') {
        ids.push_back(c);
        continue;
      }
      for (std::size_t k = ell - dims; k < ell; ++k) ids.push_back(128 + static_cast<int>(k));
    }
    return ids;
  };
  std::vector<std::vector<int>> op_ids;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::string& t = eq.inputs[i];
    const std::size_t letters = t.size() - (t.find('.') != std::string::npos ? 1 : 0);
    op_ids.push_back(expand(t, shapes[i].size() - letters));
  }
  const std::vector<int> out_ids = expand(eq.output, ell);
  // Broadcast extent of every label: all 1 -> 1, else the one non-1 extent.
  std::vector<long> extent(128 + ell, -1);  // -1: unused
  std::vector<bool> non1(128 + ell, false);
  for (std::size_t i = 0; i < shapes.size(); ++i)
    for (std::size_t d = 0; d < shapes[i].size(); ++d) {
      const int id = op_ids[i][d];
      const long n = static_cast<long>(shapes[i][d]);
      for (std::size_t d2 = 0; d2 < d; ++d2)
        if (op_ids[i][d2] == id && shapes[i][d2] != shapes[i][d]) return std::nullopt;  // diagonal
      if (n == 1) {
        if (extent[id] < 0) extent[id] = 1;
      } else if (!non1[id]) {
        non1[id] = true;
        extent[id] = n;
      } else if (extent[id] != n) {
        return std::nullopt;
      }
    }
  std::vector<int> labels;
  for (std::size_t id = 0; id < extent.size(); ++id)
    if (extent[id] >= 0) labels.push_back(static_cast<int>(id));
  for (int id : out_ids)
    if (extent[id] < 0) return std::nullopt;  // an output label in no input
  ref_result r;
  for (int id : out_ids) r.shape.push_back(static_cast<std::size_t>(extent[id]));
  std::size_t out_size = 1;
  for (std::size_t n : r.shape) out_size *= n;
  r.value.assign(out_size, 0.0);
  r.abs_sum.assign(out_size, 0.0);
  // Per loop position: the stride of each label in each operand (row-major,
  // summed over a diagonal, 0 where an extent-1 dim broadcasts).
  const std::size_t nl = labels.size(), nops = shapes.size();
  std::vector<std::vector<long>> stride(nops + 1, std::vector<long>(nl, 0));
  for (std::size_t i = 0; i <= nops; ++i) {
    const std::vector<int>& ids = i < nops ? op_ids[i] : out_ids;
    shape_t shp = i < nops ? shapes[i] : r.shape;
    long s = 1;
    for (std::size_t d = ids.size(); d-- > 0;) {
      const std::size_t l = static_cast<std::size_t>(std::find(labels.begin(), labels.end(), ids[d]) - labels.begin());
      if (static_cast<long>(shp[d]) == extent[ids[d]]) stride[i][l] += s;
      s *= static_cast<long>(shp[d]);
    }
  }
  double total = 1, summed = 1;
  for (int id : labels) {
    total *= static_cast<double>(extent[id]);
    if (std::find(out_ids.begin(), out_ids.end(), id) == out_ids.end()) summed *= static_cast<double>(extent[id]);
  }
  r.terms_per_element = summed;
  if (total == 0) return r;
  std::vector<long> idx(nl, 0);
  while (true) {
    double term = 1;
    for (std::size_t i = 0; i < nops; ++i) {
      long off = 0;
      for (std::size_t l = 0; l < nl; ++l) off += idx[l] * stride[i][l];
      term *= data[i][static_cast<std::size_t>(off)];
    }
    long o = 0;
    for (std::size_t l = 0; l < nl; ++l) o += idx[l] * stride[nops][l];
    r.value[static_cast<std::size_t>(o)] += term;
    r.abs_sum[static_cast<std::size_t>(o)] += std::abs(term);
    std::size_t l = nl;
    while (l-- > 0) {
      if (++idx[l] < extent[labels[l]]) break;
      idx[l] = 0;
    }
    if (l == static_cast<std::size_t>(-1)) break;
  }
  return r;
}

// ---------------------------------------------------------------------------
// The reference checks itself on a few hand-computed cases before it is trusted.

TEST(EinsumReference, HandComputed) {
  auto run = [](std::string_view eq, std::vector<shape_t> shapes, std::vector<std::vector<double>> data) {
    const auto p = ref_parse(eq);
    EXPECT_TRUE(p.has_value()) << eq;
    const auto r = ref_einsum(*p, shapes, data);
    EXPECT_TRUE(r.has_value()) << eq;
    return *r;
  };
  EXPECT_EQ(ref_parse("ij,jk")->output, "ik");
  EXPECT_EQ(ref_parse(" b A ")->output, "Ab");
  EXPECT_EQ(ref_parse("...ij,j")->output, ".i");
  EXPECT_EQ(ref_parse("ii")->output, "");
  EXPECT_EQ(ref_parse("i...,...j->j...")->inputs[1], ".j");
  EXPECT_FALSE(ref_parse("i.j").has_value());
  EXPECT_EQ(run("ij,jk->ik", {{2, 2}, {2, 2}}, {{1, 2, 3, 4}, {5, 6, 7, 8}}).value,
            (std::vector<double>{19, 22, 43, 50}));
  EXPECT_EQ(run("ii->i", {{2, 2}}, {{1, 2, 3, 4}}).value, (std::vector<double>{1, 4}));
  EXPECT_EQ(run("ij,j->ij", {{2, 1}, {3}}, {{2, 3}, {1, 10, 100}}).value,
            (std::vector<double>{2, 20, 200, 3, 30, 300}));
  EXPECT_EQ(run("...m,...n->mn", {{2, 2}, {2, 1}}, {{1, 2, 3, 4}, {10, 100}}).value, (std::vector<double>{310, 420}));
  EXPECT_EQ(run("i,i->i", {{1}, {0}}, {{5}, {}}).shape, (shape_t{0}));
  EXPECT_EQ(run("...,...", {{2, 1}, {3}}, {{1, 2}, {1, 10, 100}}).shape, (shape_t{2, 3}));
  EXPECT_FALSE(ref_einsum(*ref_parse("ij,jk"), {{2, 3}, {4, 5}}, {{}, {}}).has_value());
}

// ---------------------------------------------------------------------------
// Random cases.

struct gen_options {
  int operands = 2;
  int max_rank = 4;
  std::vector<int> ranks{};  ///< operand i has rank ranks[i] (random when empty)
  bool ellipsis = true;
  bool zero_extents = true;
  double max_loop = 3000;  ///< product of all label extents
  double min_loop = 0;
  int big_extents = 0;  ///< when > 0: letters get extents in [big_extents / 4, big_extents]
};

struct random_case {
  std::string equation;
  std::vector<shape_t> shapes;
};

std::string describe(const random_case& c) {
  std::ostringstream s;
  s << '"' << c.equation << "\" shapes";
  for (const shape_t& sh : c.shapes) {
    s << " (";
    for (std::size_t d = 0; d < sh.size(); ++d) s << (d ? "," : "") << sh[d];
    s << ')';
  }
  return s.str();
}

template <class T>
T pick(std::mt19937_64& rng, const std::vector<T>& v) {
  return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
}
bool chance(std::mt19937_64& rng, double p) { return std::bernoulli_distribution(p)(rng); }
int uniform(std::mt19937_64& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

std::size_t random_extent(std::mt19937_64& rng, bool zero) {
  // 0: 4%, 1: 14%, 2: 36%, 3: 30%, 4: 16%
  const int r = uniform(rng, 0, 99);
  if (r < 4) return zero ? 0 : 2;
  if (r < 18) return 1;
  if (r < 54) return 2;
  if (r < 84) return 3;
  return 4;
}

random_case make_case(std::mt19937_64& rng, const gen_options& o) {
  static const std::string pool = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  while (true) {
    std::string letters = pool;
    std::shuffle(letters.begin(), letters.end(), rng);
    letters.resize(static_cast<std::size_t>(uniform(rng, 1, 5)));
    std::vector<std::size_t> ext(128, 0);
    for (char c : letters)
      ext[static_cast<unsigned char>(c)] =
          o.big_extents > 0 ? static_cast<std::size_t>(uniform(rng, o.big_extents / 4, o.big_extents))
                            : random_extent(rng, o.zero_extents);
    const int ell_dims = o.ellipsis ? uniform(rng, 0, 3) : 0;
    shape_t ell_shape;  // the broadcast ellipsis
    for (int k = 0; k < ell_dims; ++k)
      ell_shape.push_back(std::min<std::size_t>(3, random_extent(rng, o.zero_extents)));

    random_case c;
    std::vector<std::string> terms;
    std::string used;
    bool any_ellipsis = false;
    std::size_t max_ell = 0;
    for (int i = 0; i < o.operands; ++i) {
      const int rank = o.ranks.empty() ? uniform(rng, 0, o.max_rank) : o.ranks[static_cast<std::size_t>(i)];
      const bool has_ell = o.ellipsis && chance(rng, 0.45);
      const int e_max = has_ell ? std::min(rank, ell_dims) : 0;  // ellipsis dims of this operand
      const int e = e_max == 0 || chance(rng, 0.2) ? 0 : uniform(rng, 1, e_max);
      std::string t;
      for (int k = 0; k < rank - e; ++k)
        t += letters[static_cast<std::size_t>(uniform(rng, 0, static_cast<int>(letters.size()) - 1))];
      const std::size_t at = static_cast<std::size_t>(uniform(rng, 0, static_cast<int>(t.size())));
      if (has_ell) {
        any_ellipsis = true;
        max_ell = std::max(max_ell, static_cast<std::size_t>(e));
      }
      // Size-1 broadcasting: the same choice for every occurrence of a letter
      // in this operand; only against extents >= 2.
      std::vector<bool> one(128, false);
      for (char ch : t)
        one[static_cast<unsigned char>(ch)] = ext[static_cast<unsigned char>(ch)] >= 2 && chance(rng, 0.12);
      shape_t shape;
      for (std::size_t k = 0; k <= t.size(); ++k) {
        if (has_ell && k == at)
          for (std::size_t d = ell_shape.size() - static_cast<std::size_t>(e); d < ell_shape.size(); ++d)
            shape.push_back(ell_shape[d] >= 2 && chance(rng, 0.3) ? 1 : ell_shape[d]);
        if (k < t.size()) {
          const auto ch = static_cast<unsigned char>(t[k]);
          shape.push_back(one[ch] ? 1 : ext[ch]);
        }
      }
      for (char ch : t)
        if (used.find(ch) == std::string::npos) used += ch;
      std::string text = t;
      if (has_ell) text.insert(at, "...");
      terms.push_back(text);
      c.shapes.push_back(shape);
    }
    // Loop budget of the reference.
    double loop = 1;
    for (char ch : used) loop *= static_cast<double>(ext[static_cast<unsigned char>(ch)]);
    for (std::size_t d = ell_shape.size() - max_ell; d < ell_shape.size(); ++d)
      loop *= static_cast<double>(ell_shape[d]);
    if (loop > o.max_loop || loop < o.min_loop) continue;

    std::string eq;
    for (std::size_t i = 0; i < terms.size(); ++i) eq += (i ? "," : "") + terms[i];
    if (!chance(rng, 0.35)) {  // explicit output
      std::string out;
      std::shuffle(used.begin(), used.end(), rng);
      for (char ch : used)
        if (chance(rng, 0.55)) out += ch;
      if (any_ellipsis && chance(rng, 0.65))
        out.insert(static_cast<std::size_t>(uniform(rng, 0, static_cast<int>(out.size()))), "...");
      eq += "->" + out;
    }
    if (chance(rng, 0.12)) {  // stray whitespace between tokens
      std::string spaced;
      for (std::size_t i = 0; i < eq.size(); ++i) {
        const bool inside = (eq[i] == '.' && i > 0 && eq[i - 1] == '.') || (eq[i] == '>' && eq[i - 1] == '-');
        if (!inside && chance(rng, 0.25)) spaced += pick(rng, std::vector<char>{' ', ' ', '\t'});
        spaced += eq[i];
      }
      eq = spaced + (chance(rng, 0.5) ? " " : "");
    }
    c.equation = eq;
    return c;
  }
}

// ---------------------------------------------------------------------------
// Operands in several layouts.

template <class T>
using strided_t = decltype(xt::strided_view(std::declval<xt::xarray<T>&>(), std::declval<xt::xstrided_slice_vector>()));

static_assert(std::is_same_v<strided_t<float>, decltype(xt::transpose(std::declval<xt::xarray<float>&>(),
                                                                      std::declval<std::vector<std::size_t>>()))>,
              "transposed and sliced views share one type");

enum class layout { dense, strided, mixed };  // mixed: operand 0 dense, the others strided

template <class T>
struct operands {
  std::vector<xt::xarray<T>> dense;  ///< the logical operands
  std::vector<xt::xarray<T>> base;   ///< storage of the views
  std::vector<strided_t<T>> views;   ///< equal to `dense`, read through strides
  std::vector<std::vector<double>> values;
  std::vector<std::string> how;  ///< per operand: how the view was made
};

template <class T>
operands<T> make_operands(std::mt19937_64& rng, const std::vector<shape_t>& shapes, bool views) {
  operands<T> ops;
  ops.base.reserve(shapes.size());  // views refer to these: no reallocation
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  for (const shape_t& s : shapes) {
    xt::xarray<T> a = xt::xarray<T>::from_shape(s);
    for (T& x : a) x = static_cast<T>(value(rng));
    ops.values.emplace_back(a.begin(), a.end());
    ops.dense.push_back(std::move(a));
  }
  if (!views) return ops;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const shape_t& s = shapes[i];
    const std::size_t rank = s.size();
    std::ostringstream how;
    if (rank >= 2 && chance(rng, 0.45)) {
      // A transposed view of a permuted copy: transpose(base, inv) == dense.
      std::vector<std::size_t> perm(rank), inv(rank);
      for (std::size_t d = 0; d < rank; ++d) perm[d] = d;
      std::shuffle(perm.begin(), perm.end(), rng);
      for (std::size_t d = 0; d < rank; ++d) inv[perm[d]] = d;
      ops.base.push_back(xt::xarray<T>(xt::transpose(ops.dense[i], perm)));
      ops.views.push_back(xt::transpose(ops.base.back(), inv));
      how << "transpose(perm";
      for (std::size_t d : inv) how << ' ' << d;
      how << ')';
    } else {
      // A strided slice of a NaN-filled base: steps 1-3, some negative, an
      // offset, sometimes behind an integer index.
      shape_t bshape;
      xt::xstrided_slice_vector sv;
      how << "strided_view[";
      if (chance(rng, 0.3)) {
        bshape.push_back(2);
        const long k = uniform(rng, 0, 1);
        sv.push_back(k);
        how << k << ' ';
      }
      for (std::size_t d = 0; d < rank; ++d) {
        const long n = static_cast<long>(s[d]), step = uniform(rng, 1, 3), off = uniform(rng, 0, 1);
        bshape.push_back(static_cast<std::size_t>(off + step * n + 1));
        if (chance(rng, 0.3)) {
          sv.push_back(xt::range(off + step * n, off, -step));
          how << off + step * n << ':' << off << ':' << -step << ' ';
        } else {
          sv.push_back(xt::range(off, off + step * n, step));
          how << off << ':' << off + step * n << ':' << step << ' ';
        }
      }
      how << ']';
      ops.base.push_back(xt::xarray<T>::from_shape(bshape));
      ops.base.back().fill(std::numeric_limits<T>::quiet_NaN());
      ops.views.push_back(xt::strided_view(ops.base.back(), sv));
      // (element by element: xstrided_view's operator= from an xarray builds a
      // temporary of the wrong rank in xtensor 0.24)
      std::copy(ops.dense[i].begin(), ops.dense[i].end(), ops.views.back().begin());
    }
    ops.how.push_back(how.str());
    // The view shows exactly the logical operand (a check of the test itself).
    EXPECT_TRUE(shape_t(ops.views.back().shape().begin(), ops.views.back().shape().end()) == s &&
                std::equal(ops.dense[i].begin(), ops.dense[i].end(), ops.views.back().begin()))
        << how.str();
  }
  return ops;
}

template <class A, class B, class C, class D>
auto call(const std::string& eq, std::size_t n, const A& a, const B& b, const C& c, const D& d) {
  switch (n) {
    case 1:
      return xshard::einsum(eq, a);
    case 2:
      return xshard::einsum(eq, a, b);
    case 3:
      return xshard::einsum(eq, a, b, c);
    default:
      return xshard::einsum(eq, a, b, c, d);
  }
}

template <class T>
xt::xarray<T> run(const std::string& eq, operands<T>& ops, layout how) {
  const std::size_t n = ops.dense.size();
  auto at = [n](auto& v, std::size_t i) -> auto& { return v[std::min(i, n - 1)]; };
  switch (how) {
    case layout::dense:
      return call(eq, n, at(ops.dense, 0), at(ops.dense, 1), at(ops.dense, 2), at(ops.dense, 3));
    case layout::strided:
      return call(eq, n, at(ops.views, 0), at(ops.views, 1), at(ops.views, 2), at(ops.views, 3));
    default:
      return call(eq, n, at(ops.dense, 0), at(ops.views, 1), at(ops.views, 2), at(ops.views, 3));
  }
}

/// Compares one result with the reference; returns false (with a message) on the first difference.
template <class T>
::testing::AssertionResult agrees(const xt::xarray<T>& got, const ref_result& ref) {
  const shape_t shape(got.shape().begin(), got.shape().end());
  if (shape != ref.shape) {
    std::ostringstream s;
    s << "shape [";
    for (std::size_t d = 0; d < shape.size(); ++d) s << (d ? "," : "") << shape[d];
    s << "], expected [";
    for (std::size_t d = 0; d < ref.shape.size(); ++d) s << (d ? "," : "") << ref.shape[d];
    s << ']';
    return ::testing::AssertionFailure() << s.str();
  }
  // Any evaluation order of a sum of products of `ops` factors has an error
  // below (terms + factors) * eps * sum|term| (with room to spare).
  const double eps = std::numeric_limits<T>::epsilon();
  std::size_t i = 0;
  for (auto it = got.begin(); it != got.end(); ++it, ++i) {
    const double tol = 2.0 * (ref.terms_per_element + 8.0) * eps * ref.abs_sum[i];
    const double diff = std::abs(static_cast<double>(*it) - ref.value[i]);
    if (!(diff <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": got " << static_cast<double>(*it) << ", expected "
                                           << ref.value[i] << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

/// What a random case exercises (to prove the generator covers every semantic).
struct coverage {
  int implicit = 0, ellipsis = 0, summed_ellipsis = 0, ellipsis_ranks_differ = 0, diagonal = 0, broadcast_letter = 0,
      broadcast_ellipsis = 0, zero_extent = 0, scalar_output = 0, rank0_operand = 0, summed_in_one = 0, uppercase = 0,
      whitespace = 0;
  void add(const random_case& c, const ref_equation& eq) {
    const bool has_arrow = c.equation.find("->") != std::string::npos;
    implicit += has_arrow ? 0 : 1;
    whitespace += c.equation.find_first_of(" \t") != std::string::npos ? 1 : 0;
    uppercase += std::any_of(c.equation.begin(), c.equation.end(), [](char ch) { return ch >= 'A' && ch <= 'Z'; });
    scalar_output += eq.output.empty() ? 1 : 0;
    bool ell = false, diag = false, zero = false, r0 = false, summed1 = false, bl = false, be = false;
    std::vector<std::size_t> ell_ranks;
    std::vector<std::size_t> letter_max(128, 0);
    for (std::size_t i = 0; i < eq.inputs.size(); ++i)
      for (std::size_t d = 0, k = 0; d < eq.inputs[i].size(); ++d) {
        const char ch = eq.inputs[i][d];
        const std::size_t letters = eq.inputs[i].size() - (eq.inputs[i].find('.') != std::string::npos ? 1 : 0);
        const std::size_t e = c.shapes[i].size() - letters;
        if (ch == '.') {
          k += e;
          continue;
        }
        letter_max[static_cast<unsigned char>(ch)] =
            std::max(letter_max[static_cast<unsigned char>(ch)], c.shapes[i][k]);
        ++k;
      }
    std::vector<std::size_t> ell_max(4, 0);
    for (std::size_t i = 0; i < eq.inputs.size(); ++i) {
      const std::string& t = eq.inputs[i];
      const shape_t& s = c.shapes[i];
      r0 = r0 || s.empty();
      for (std::size_t n : s) zero = zero || n == 0;
      const std::size_t letters = t.size() - (t.find('.') != std::string::npos ? 1 : 0);
      if (t.find('.') != std::string::npos) {
        ell = true;
        ell_ranks.push_back(s.size() - letters);
      }
      for (char ch : t) {
        if (ch == '.') continue;
        diag = diag || std::count(t.begin(), t.end(), ch) > 1;
        int elsewhere = 0;
        for (const std::string& u : eq.inputs) elsewhere += u.find(ch) != std::string::npos ? 1 : 0;
        summed1 = summed1 || (elsewhere == 1 && eq.output.find(ch) == std::string::npos);
      }
      for (std::size_t d = 0, k = 0; d < t.size(); ++d) {
        if (t[d] == '.') {
          const std::size_t e = s.size() - letters;
          for (std::size_t j = 0; j < e; ++j, ++k) {
            // compare against the other operands' same right-aligned dim
            for (std::size_t i2 = 0; i2 < eq.inputs.size(); ++i2) {
              const std::string& t2 = eq.inputs[i2];
              const auto p2 = t2.find('.');
              if (p2 == std::string::npos) continue;
              const std::size_t e2 = c.shapes[i2].size() - (t2.size() - 1);
              const std::size_t from_right = e - j;
              if (from_right <= e2 && s[k] == 1 && c.shapes[i2][p2 + e2 - from_right] > 1) be = true;
            }
          }
          continue;
        }
        bl = bl || (s[k] == 1 && letter_max[static_cast<unsigned char>(t[d])] > 1);
        ++k;
      }
    }
    ellipsis += ell;
    summed_ellipsis += ell && has_arrow && eq.output.find('.') == std::string::npos;
    ellipsis_ranks_differ += ell_ranks.size() > 1 && *std::min_element(ell_ranks.begin(), ell_ranks.end()) !=
                                                         *std::max_element(ell_ranks.begin(), ell_ranks.end());
    diagonal += diag;
    zero_extent += zero;
    rank0_operand += r0;
    summed_in_one += summed1;
    broadcast_letter += bl;
    broadcast_ellipsis += be;
  }
};

struct tally {
  int equations = 0;
  int calls = 0;
  coverage seen;
};

/// Runs `count` random equations: each in float and double, dense and through views.
tally check_random(std::uint64_t seed, int count, const gen_options& o) {
  std::mt19937_64 rng(seed);
  tally t;
  for (int n = 0; n < count; ++n) {
    const random_case c = make_case(rng, o);
    const auto parsed = ref_parse(c.equation);
    if (!parsed) {
      ADD_FAILURE() << "generator made an equation the reference cannot parse: " << describe(c);
      continue;
    }
    ++t.equations;
    t.seen.add(c, *parsed);
    auto one = [&]<class T>(T, layout how) {
      operands<T> ops = make_operands<T>(rng, c.shapes, how != layout::dense);
      const auto ref = ref_einsum(*parsed, c.shapes, ops.values);
      if (!ref) {
        ADD_FAILURE() << "generator made an invalid case: " << describe(c);
        return;
      }
      std::string views;
      for (std::size_t i = 0; i < ops.how.size(); ++i)
        if (how == layout::strided || i > 0) views += " op" + std::to_string(i) + "=" + ops.how[i];
      try {
        ++t.calls;
        const xt::xarray<T> got = run<T>(c.equation, ops, how);
        EXPECT_TRUE(agrees(got, *ref)) << describe(c) << " as " << (sizeof(T) == 4 ? "float" : "double") << views;
      } catch (const std::exception& e) {
        ADD_FAILURE() << describe(c) << " threw: " << e.what() << views;
      }
    };
    const layout view_layout = n % 3 == 2 ? layout::mixed : layout::strided;
    if (o.big_extents > 0) {  // large: one call per type
      one(double{}, n % 2 ? layout::dense : view_layout);
      one(float{}, n % 2 ? view_layout : layout::dense);
      continue;
    }
    one(double{}, layout::dense);
    one(float{}, layout::dense);
    one(double{}, view_layout);
    one(float{}, n % 2 ? layout::strided : layout::mixed);
  }
  return t;
}

void report(const char* what, const tally& t) {
  const coverage& v = t.seen;
  std::cout << "[ einsum  ] " << what << ": " << t.equations << " random equations, " << t.calls
            << " einsum calls checked against the reference\n"
            << "[ einsum  ]   implicit " << v.implicit << ", ellipsis " << v.ellipsis << " (summed "
            << v.summed_ellipsis << ", ranks differ " << v.ellipsis_ranks_differ << ", size-1 broadcast "
            << v.broadcast_ellipsis << "), diagonal " << v.diagonal << ", size-1 letter " << v.broadcast_letter
            << ", extent 0 " << v.zero_extent << ", scalar out " << v.scalar_output << ", rank-0 operand "
            << v.rank0_operand << ", summed in one operand " << v.summed_in_one << ", A-Z " << v.uppercase
            << ", whitespace " << v.whitespace << "\n";
  // Every semantic is exercised by several cases.
  EXPECT_GE(v.implicit, 10);
  EXPECT_GE(v.ellipsis, 10);
  EXPECT_GE(v.summed_ellipsis, 3);
  EXPECT_GE(v.ellipsis_ranks_differ, t.equations >= 100 && std::string(what) != "1 operand" ? 3 : 0);
  EXPECT_GE(v.broadcast_ellipsis, std::string(what) != "1 operand" ? 3 : 0);
  EXPECT_GE(v.diagonal, 10);
  EXPECT_GE(v.broadcast_letter, std::string(what) != "1 operand" ? 10 : 0);
  EXPECT_GE(v.zero_extent, 5);
  EXPECT_GE(v.scalar_output, 5);
  EXPECT_GE(v.rank0_operand, 5);
  EXPECT_GE(v.summed_in_one, 10);
  EXPECT_GE(v.uppercase, 10);
  EXPECT_GE(v.whitespace, 5);
}

TEST(EinsumRandom, OneOperand) {
  gen_options o;
  o.operands = 1;
  const tally t = check_random(101, 200, o);
  report("1 operand", t);
  EXPECT_EQ(t.equations, 200);
}

TEST(EinsumRandom, TwoOperands) {
  gen_options o;
  o.operands = 2;
  const tally t = check_random(202, 400, o);
  report("2 operands", t);
  EXPECT_EQ(t.equations, 400);
}

TEST(EinsumRandom, ThreeOperands) {
  gen_options o;
  o.operands = 3;
  o.max_rank = 3;
  const tally t = check_random(303, 250, o);
  report("3 operands", t);
  EXPECT_EQ(t.equations, 250);
}

TEST(EinsumRandom, FourOperands) {
  gen_options o;
  o.operands = 4;
  o.max_rank = 3;
  o.max_loop = 2000;
  const tally t = check_random(404, 150, o);
  report("4 operands", t);
  EXPECT_EQ(t.equations, 150);
}

// Random equations big enough (>= 2^17 multiply-adds) that the kernel splits
// the work over the thread pool.
TEST(EinsumRandom, TwoOperandsOnThePool) {
  gen_options o;
  o.operands = 2;
  o.max_rank = 3;
  o.big_extents = 24;
  o.min_loop = 150000;
  o.max_loop = 400000;
  const tally t = check_random(808, 12, o);
  std::cout << "[ einsum  ] on the pool: " << t.equations << " random equations, " << t.calls << " calls\n";
  EXPECT_EQ(t.equations, 12);
}

// Larger extents, so contractions span several micro-kernel tiles (and the
// edges of the MR x NR register tile), still against the reference.
TEST(EinsumRandom, TwoOperandsLargerExtents) {
  std::mt19937_64 rng(505);
  int checked = 0;
  const std::vector<std::string> eqs = {"ij,jk->ik", "ji,jk->ki",  "bij,bkj->bik", "ijk,kj->i",     "...ij,...jk",
                                        "ij,kj",     "i...j,j->i", "ab,cb->ca",    "iij,jk->ik",    "ij,ik->jk",
                                        "Aa,aB",     "ij,j->ij",   "ij->ji",       "...i,...i->..."};
  for (const std::string& eq : eqs) {
    for (int rep = 0; rep < 2; ++rep) {
      // Extents 1..40 per letter; ellipsis of rank 1.
      std::vector<std::size_t> ext(128);
      for (char c = 'A'; c <= 'z'; ++c)
        ext[static_cast<unsigned char>(c)] = static_cast<std::size_t>(uniform(rng, 1, 40));
      ext['b'] = 3;
      const std::size_t e = static_cast<std::size_t>(uniform(rng, 2, 4));
      const auto parsed = ref_parse(eq);
      std::vector<shape_t> shapes;
      for (const std::string& t : parsed->inputs) {
        shape_t s;
        for (char c : t) {
          if (c == '.')
            s.push_back(e);
          else
            s.push_back(ext[static_cast<unsigned char>(c)]);
        }
        shapes.push_back(s);
      }
      const random_case c{eq, shapes};
      auto one = [&]<class T>(T, layout how) {
        operands<T> ops = make_operands<T>(rng, shapes, how != layout::dense);
        const auto ref = ref_einsum(*parsed, shapes, ops.values);
        ASSERT_TRUE(ref.has_value()) << describe(c);
        EXPECT_TRUE(agrees(run<T>(eq, ops, how), *ref)) << describe(c) << (sizeof(T) == 4 ? " float" : " double");
      };
      one(float{}, layout::dense);
      one(double{}, layout::dense);
      one(float{}, layout::strided);
      ++checked;
    }
  }
  std::cout << "[ einsum  ] larger extents: " << checked << " equation/shape pairs\n";
}

// Views made with xt::view (static slices: ranges with steps, negative steps)
// of rank-3 and rank-2 operands.
template <class T>
auto view3(xt::xarray<T>& base, const shape_t& s, const std::vector<long>& step) {
  auto r = [&](std::size_t d) {
    const long n = static_cast<long>(s[d]), st = step[d];
    return st > 0 ? xt::range(1, 1 + st * n, st) : xt::range(-st * n, 0, st);
  };
  return xt::view(base, r(0), r(1), r(2));
}
template <class T>
auto view2(xt::xarray<T>& base, const shape_t& s, const std::vector<long>& step) {
  auto r = [&](std::size_t d) {
    const long n = static_cast<long>(s[d]), st = step[d];
    return st > 0 ? xt::range(1, 1 + st * n, st) : xt::range(-st * n, 0, st);
  };
  return xt::view(base, r(0), r(1));
}

TEST(EinsumRandom, XtViewOperands) {
  std::mt19937_64 rng(606);
  gen_options o;
  o.operands = 2;
  o.ranks = {3, 2};
  int checked = 0;
  for (int n = 0; n < 60; ++n) {
    const random_case c = make_case(rng, o);
    const auto parsed = ref_parse(c.equation);
    ASSERT_TRUE(parsed.has_value()) << describe(c);
    auto one = [&]<class T>(T) {
      operands<T> ops = make_operands<T>(rng, c.shapes, false);
      std::vector<xt::xarray<T>> base;
      std::vector<std::vector<long>> steps;
      for (const shape_t& s : c.shapes) {
        shape_t bs;
        std::vector<long> st;
        for (std::size_t d : s) {
          st.push_back(uniform(rng, 0, 2) == 0 ? -uniform(rng, 1, 2) : uniform(rng, 1, 3));
          bs.push_back(static_cast<std::size_t>(std::abs(st.back())) * d + 2);
        }
        base.push_back(xt::xarray<T>::from_shape(bs));
        base.back().fill(std::numeric_limits<T>::quiet_NaN());
        steps.push_back(st);
      }
      auto v0 = view3<T>(base[0], c.shapes[0], steps[0]);
      auto v1 = view2<T>(base[1], c.shapes[1], steps[1]);
      v0 = ops.dense[0];
      v1 = ops.dense[1];
      const auto ref = ref_einsum(*parsed, c.shapes, ops.values);
      ASSERT_TRUE(ref.has_value());
      EXPECT_TRUE(agrees(xshard::einsum(c.equation, v0, v1), *ref))
          << describe(c) << (sizeof(T) == 4 ? " float" : " double");
    };
    one(float{});
    one(double{});
    ++checked;
  }
  std::cout << "[ einsum  ] xt::view operands: " << checked << " random equations\n";
  EXPECT_EQ(checked, 60);
}

// The pool's size is fixed per process, so thread-count independence is
// checked as far as one process can: the same call twice gives the same bits,
// and computing row blocks separately (a different split of the work into
// tiles) gives the same bits as the whole.
TEST(EinsumRandom, RepeatedCallsAreBitIdentical) {
  std::mt19937_64 rng(707);
  std::uniform_real_distribution<float> value(-1.f, 1.f);
  xt::xarray<float> a = xt::xarray<float>::from_shape({4, 64, 400});
  xt::xarray<float> b = xt::xarray<float>::from_shape({4, 400, 96});
  for (float& x : a) x = value(rng);
  for (float& x : b) x = value(rng);
  const xt::xarray<float> c1 = xshard::einsum("bij,bjk->bik", a, b);
  const xt::xarray<float> c2 = xshard::einsum("bij,bjk->bik", a, b);
  ASSERT_EQ(c1.shape(), c2.shape());
  EXPECT_EQ(std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)), 0);
  // Row blocks of 5 (and the remainder): bit-identical to the full result.
  for (std::size_t i0 = 0; i0 < 64; i0 += 5) {
    const std::size_t i1 = std::min<std::size_t>(64, i0 + 5);
    const xt::xarray<float> part =
        xshard::einsum("bij,bjk->bik", xt::view(a, xt::all(), xt::range(i0, i1), xt::all()), b);
    const xt::xarray<float> want = xt::view(c1, xt::all(), xt::range(i0, i1), xt::all());
    ASSERT_EQ(part.shape(), want.shape());
    EXPECT_EQ(std::memcmp(part.data(), want.data(), part.size() * sizeof(float)), 0) << "rows " << i0 << ".." << i1;
  }
  // Spot checks against a double-precision sum.
  for (int s = 0; s < 20; ++s) {
    const std::size_t bb = static_cast<std::size_t>(uniform(rng, 0, 3)),
                      i = static_cast<std::size_t>(uniform(rng, 0, 63)),
                      k = static_cast<std::size_t>(uniform(rng, 0, 95));
    double want = 0, mag = 0;
    for (std::size_t j = 0; j < 400; ++j) {
      want += static_cast<double>(a(bb, i, j)) * static_cast<double>(b(bb, j, k));
      mag += std::abs(static_cast<double>(a(bb, i, j)) * static_cast<double>(b(bb, j, k)));
    }
    EXPECT_NEAR(c1(bb, i, k), want, 1e-5 * mag);
  }
  // Three operands, two calls.
  xt::xarray<double> x = xt::xarray<double>::from_shape({48, 40}), y = xt::xarray<double>::from_shape({40, 56}),
                     z = xt::xarray<double>::from_shape({56, 44});
  for (double& v : x) v = value(rng);
  for (double& v : y) v = value(rng);
  for (double& v : z) v = value(rng);
  const xt::xarray<double> d1 = xshard::einsum("ij,jk,kl->il", x, y, z);
  const xt::xarray<double> d2 = xshard::einsum("ij,jk,kl->il", x, y, z);
  EXPECT_EQ(std::memcmp(d1.data(), d2.data(), d1.size() * sizeof(double)), 0);
}

}  // namespace
