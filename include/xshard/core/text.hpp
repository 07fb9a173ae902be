// xshard/core/text.hpp - building text in constant expressions.
//
// libstdc++ 12's std::string is not usable in Clang 14's constant evaluator, so
// the engine writes text into a std::vector<char> (transient constexpr
// allocation works on both compilers) and copies it out: into a std::string at
// run time, into a fixed_string of the exact length at compile time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "fixed_string.hpp"

namespace xshard {

class text_builder {
 public:
  constexpr text_builder& operator<<(std::string_view s) {
    // Grow geometrically, then copy char by char: vector::insert of a range
    // draws a false -Wstringop-overflow from GCC 12 at -O3.
    if (buf_.capacity() < buf_.size() + s.size()) buf_.reserve(2 * (buf_.size() + s.size()));
    for (char c : s) buf_.push_back(c);
    return *this;
  }
  constexpr text_builder& operator<<(char c) {
    buf_.push_back(c);
    return *this;
  }
  constexpr text_builder& operator<<(std::int64_t v) {
    char tmp[24]{};
    int n = 0;
    const bool neg = v < 0;
    // Work in unsigned so that INT64_MIN is printed correctly.
    std::uint64_t u = neg ? ~static_cast<std::uint64_t>(v) + 1 : static_cast<std::uint64_t>(v);
    do {
      tmp[n++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0);
    if (neg) buf_.push_back('-');
    while (n > 0) buf_.push_back(tmp[--n]);
    return *this;
  }
  template <class I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, char> && !std::is_same_v<I, bool> &&
           !std::is_same_v<I, std::int64_t>) constexpr text_builder&
  operator<<(I v) {
    return *this << static_cast<std::int64_t>(v);
  }

  /// Appends the items of `r` separated by `sep`.
  template <class Range>
  constexpr text_builder& join(const Range& r, std::string_view sep) {
    bool first = true;
    for (const auto& v : r) {
      if (!first) *this << sep;
      *this << v;
      first = false;
    }
    return *this;
  }

  constexpr std::size_t size() const { return buf_.size(); }
  constexpr std::string_view view() const { return {buf_.data(), buf_.size()}; }
  std::string str() const { return std::string(buf_.begin(), buf_.end()); }

 private:
  std::vector<char> buf_;
};

/// Copies text produced by a constexpr generator `F` (returning a
/// text_builder) into a fixed_string of exactly its length. `F` is a
/// structural lambda or function object; it runs twice at compile time.
template <auto F>
consteval auto to_fixed_string() {
  constexpr std::size_t n = F().size();
  fixed_string<n> out{};
  const text_builder t = F();
  for (std::size_t i = 0; i < n; ++i) out.data_[i] = t.view()[i];
  return out;
}

namespace detail {

/// A shape (or any list of extents) as "[2,3]": the one spelling of shapes
/// in xshard's messages.
template <class S>
std::string shape_text(const S& shape) {
  std::string t = "[";
  bool first = true;
  for (const auto e : shape) {
    if (!first) t += ',';
    first = false;
    t += std::to_string(e);
  }
  return t + "]";
}

}  // namespace detail

}  // namespace xshard
