// xshard/core/fixed_string.hpp - string literals as template arguments.
//
// Example (compiled in tests/compile/doc_core.cpp):
//   template <xshard::fixed_string Text> struct mesh;     // mesh<"data=4, model=2">
//   static_assert(xshard::fixed_string("ab") == "ab");
//
// `fixed_string<N>` holds N characters plus a terminator. It is a structural
// type (all members public), so it can be a class-type template argument, and
// every member is constexpr. `static_string<Cap>` is the fixed-capacity,
// variable-length sibling used inside constexpr values (axis names, offenders).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace xshard {

template <std::size_t N>
struct fixed_string {
  char data_[N + 1]{};

  constexpr fixed_string() = default;
  constexpr fixed_string(const char (&s)[N + 1]) { std::copy_n(s, N + 1, data_); }  // NOLINT: implicit by design
  constexpr explicit fixed_string(std::string_view s) { std::copy_n(s.data(), std::min(N, s.size()), data_); }

  static constexpr std::size_t size() { return N; }
  constexpr const char* c_str() const { return data_; }
  constexpr std::string_view view() const { return {data_, N}; }
  constexpr operator std::string_view() const { return view(); }  // NOLINT: implicit by design
  std::string str() const { return std::string(view()); }

  friend constexpr bool operator==(const fixed_string& a, std::string_view b) { return a.view() == b; }
  template <std::size_t M>
  friend constexpr bool operator==(const fixed_string& a, const fixed_string<M>& b) {
    return a.view() == b.view();
  }
};

template <std::size_t N>
fixed_string(const char (&)[N]) -> fixed_string<N - 1>;

/// A string of at most `Cap` characters, usable in constant expressions and as
/// a template argument. Longer input is a precondition violation the callers
/// check first (they report "name too long").
template <std::size_t Cap>
struct static_string {
  char chars[Cap]{};
  std::size_t len = 0;

  constexpr static_string() = default;
  constexpr static_string(std::string_view s) { assign(s); }  // NOLINT: implicit by design

  static constexpr std::size_t capacity() { return Cap; }
  constexpr void assign(std::string_view s) {
    len = std::min(s.size(), Cap);
    for (std::size_t i = 0; i < Cap; ++i) chars[i] = i < len ? s[i] : '\0';
  }
  constexpr std::size_t size() const { return len; }
  constexpr bool empty() const { return len == 0; }
  constexpr std::string_view view() const { return {chars, len}; }
  constexpr operator std::string_view() const { return view(); }  // NOLINT: implicit by design
  std::string str() const { return std::string(view()); }

  friend constexpr bool operator==(const static_string& a, const static_string& b) { return a.view() == b.view(); }
  friend constexpr bool operator==(const static_string& a, std::string_view b) { return a.view() == b; }
};

}  // namespace xshard
