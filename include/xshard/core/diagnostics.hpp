// xshard/core/diagnostics.hpp - turning a failed `diagnostic` into a compile
// error that names the offender, on GCC 12 and Clang 14 alike.
//
// Each kind of error is a class template whose arguments carry the offender
// (a name as a pack of chars, a column and character, numbers), generated
// from its row of core/errors.def with the static_assert that uses it.
// `raise<D>()` instantiates the one matching `D.code` inside a static_assert,
// so the compiler prints, e.g.
//
//   static assertion failed: xshard: unknown axis name in partition spec
//   note: 'xshard::unknown_axis_name<xshard::axis<'f','o','o'>,
//          xshard::mesh_axes_are<'d','a','t','a',',',' ','m','o','d','e','l'>>::value'
//          evaluates to false
//
// Names are char packs rather than string class arguments because Clang 14
// prints the latter as lists of numbers.
#pragma once

#include <cstdint>
#include <utility>

#include "error.hpp"

namespace xshard {

/// A name spelled out in an error: axis<'f','o','o'>.
template <char... Name>
struct axis {};
/// The mesh's axis names, comma separated, in an error.
template <char... Names>
struct mesh_axes_are {};

/// A reason or a construct (a diagnostic's detail) spelled out in an error.
template <char... Text>
struct because {};

namespace detail {

template <auto S, template <char...> class T, std::size_t... I>
auto spell(std::index_sequence<I...>) -> T<S.chars[I]...>;

/// axis<'d','a','t','a'> for a static_string S.
template <auto S, template <char...> class T = axis>
using spelled = decltype(spell<S, T>(std::make_index_sequence<S.len>{}));

}  // namespace detail

#define XSHARD_UNPAREN(...) __VA_ARGS__  // (a, b) -> a, b

// The diagnostic templates, one per row of core/errors.def: e.g.
//   template <int Column, char Char> struct mesh_syntax_error { static constexpr bool value = false; };
#define XSHARD_ERROR(code, name, parameters, arguments, summary) \
  template <XSHARD_UNPAREN parameters>                           \
  struct name {                                                  \
    static constexpr bool value = false;                         \
  };
#include "errors.def"

namespace detail {

/// raise_as<code>::check<D>() is the static_assert of one row of
/// core/errors.def: one specialization per code, so `raise<D>()` picks its
/// check in one step (no chain of if constexpr).
template <errc Code>
struct raise_as;

template <>
struct raise_as<errc::ok> {
  template <diagnostic D>
  static constexpr void check() {}
};

#define XSHARD_ERROR(code, name, parameters, arguments, summary)                        \
  template <>                                                                           \
  struct raise_as<errc::code> {                                                         \
    template <diagnostic D>                                                             \
    static constexpr void check() {                                                     \
      static_assert(xshard::name<XSHARD_UNPAREN arguments>::value, "xshard: " summary); \
    }                                                                                   \
  };
#include "errors.def"

}  // namespace detail

#undef XSHARD_UNPAREN

/// Compile-time face of a diagnostic: a static_assert naming the offender
/// when `D` is not ok. Returns true so `static_assert(raise<D>())` adds no
/// second, anonymous error of its own.
template <diagnostic D>
constexpr bool raise() {
  detail::raise_as<D.code>::template check<D>();
  return true;
}

}  // namespace xshard
