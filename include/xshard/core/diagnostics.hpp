// xshard/core/diagnostics.hpp - turning a failed `diagnostic` into a compile
// error that names the offender, on GCC 12 and Clang 14 alike.
//
// Each kind of error is a class template whose arguments carry the offender
// (a name as a pack of chars, a column and character, numbers). `raise<D>()`
// instantiates the one matching `D.code` inside a static_assert, so the
// compiler prints, e.g.
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

// clang-format off
template <int Column, char Char> struct mesh_syntax_error { static constexpr bool value = false; };
template <class Name> struct axis_name_too_long { static constexpr bool value = false; };
template <class Name> struct invalid_axis_name { static constexpr bool value = false; };
template <std::int64_t Names, std::int64_t Axes> struct axis_names_count_mismatch { static constexpr bool value = false; };
template <std::int64_t Count, std::int64_t Max> struct too_many_mesh_axes { static constexpr bool value = false; };
template <class Name, std::int64_t Size> struct bad_axis_size { static constexpr bool value = false; };
template <class Name> struct duplicate_axis_name { static constexpr bool value = false; };
template <std::int64_t Devices, std::int64_t AxisProduct> struct device_count_mismatch { static constexpr bool value = false; };
template <std::int64_t Id> struct duplicate_device_id { static constexpr bool value = false; };
template <std::int64_t Id, std::int64_t MeshSize> struct device_id_out_of_range { static constexpr bool value = false; };
template <int Column, char Char> struct spec_syntax_error { static constexpr bool value = false; };
template <int Column> struct nested_tuple_in_spec { static constexpr bool value = false; };
template <int Column> struct empty_tuple_in_spec { static constexpr bool value = false; };
template <std::int64_t Entries, std::int64_t Max> struct spec_too_long { static constexpr bool value = false; };
template <class Name, class MeshAxes> struct unknown_axis_name { static constexpr bool value = false; };
template <std::int64_t Index, std::int64_t MeshRank> struct axis_index_out_of_range { static constexpr bool value = false; };
template <class Name> struct axis_used_twice { static constexpr bool value = false; };
template <std::int64_t SpecRank, std::int64_t TensorRank> struct spec_rank_mismatch { static constexpr bool value = false; };
template <std::int64_t Dim, std::int64_t Extent, int Tiles> struct uneven_shard { static constexpr bool value = false; };
template <int Column, char Char> struct hlo_syntax_error { static constexpr bool value = false; };
template <int Column, char Char> struct sdy_syntax_error { static constexpr bool value = false; };
template <int Column, char Char> struct sdy_unsupported_construct { static constexpr bool value = false; };
template <int Column> struct sdy_invalid_at_column { static constexpr bool value = false; };
template <errc Code> struct invalid_input { static constexpr bool value = false; };
template <int Column, char Char> struct einsum_syntax_error { static constexpr bool value = false; };
template <int Column> struct einsum_dot_outside_ellipsis { static constexpr bool value = false; };
template <int Column> struct einsum_second_ellipsis_in_term { static constexpr bool value = false; };
template <int Column, char Letter> struct einsum_output_letter_not_in_inputs { static constexpr bool value = false; };
template <int Column, char Letter> struct einsum_output_letter_twice { static constexpr bool value = false; };
template <int Column> struct einsum_output_ellipsis_not_in_inputs { static constexpr bool value = false; };
template <std::int64_t Count, std::int64_t Max> struct einsum_too_many_terms { static constexpr bool value = false; };
template <std::int64_t Subscripts, std::int64_t Operands> struct einsum_operand_count_mismatch { static constexpr bool value = false; };
template <int Operand, std::int64_t SubscriptRank, std::int64_t TensorRank> struct einsum_rank_mismatch { static constexpr bool value = false; };
template <char Letter, std::int64_t Extent, std::int64_t OtherExtent> struct einsum_extent_mismatch { static constexpr bool value = false; };
template <int Operand, char Letter, std::int64_t Extent, std::int64_t OtherExtent> struct einsum_diagonal_extent_mismatch { static constexpr bool value = false; };
// clang-format on

namespace detail {

template <auto S, template <char...> class T, std::size_t... I>
auto spell(std::index_sequence<I...>) -> T<S.chars[I]...>;

/// axis<'d','a','t','a'> for a static_string S.
template <auto S, template <char...> class T = axis>
using spelled = decltype(spell<S, T>(std::make_index_sequence<S.len>{}));

}  // namespace detail

/// Compile-time face of a diagnostic: a static_assert naming the offender
/// when `D` is not ok. Returns true so `static_assert(raise<D>())` adds no
/// second, anonymous error of its own.
template <diagnostic D>
constexpr bool raise() {
  using enum errc;
  if constexpr (D.code == ok) {
  } else if constexpr (D.code == mesh_syntax) {
    static_assert(mesh_syntax_error<D.column, D.ch>::value, "xshard: malformed mesh text");
  } else if constexpr (D.code == mesh_empty) {
    static_assert(invalid_input<D.code>::value, "xshard: a mesh needs at least one axis");
  } else if constexpr (D.code == errc::axis_name_too_long) {
    static_assert(xshard::axis_name_too_long<detail::spelled<D.name>>::value, "xshard: axis name too long");
  } else if constexpr (D.code == bad_axis_name) {
    static_assert(invalid_axis_name<detail::spelled<D.name>>::value, "xshard: invalid axis name");
  } else if constexpr (D.code == axis_names_mismatch) {
    static_assert(axis_names_count_mismatch<D.a, D.b>::value, "xshard: axis names do not match the axes");
  } else if constexpr (D.code == too_many_axes) {
    static_assert(too_many_mesh_axes<D.a, D.b>::value, "xshard: too many mesh axes");
  } else if constexpr (D.code == errc::bad_axis_size) {
    static_assert(xshard::bad_axis_size<detail::spelled<D.name>, D.a>::value, "xshard: mesh axis size must be >= 1");
  } else if constexpr (D.code == errc::duplicate_axis_name) {
    static_assert(xshard::duplicate_axis_name<detail::spelled<D.name>>::value, "xshard: duplicate axis name in mesh");
  } else if constexpr (D.code == errc::device_count_mismatch) {
    static_assert(xshard::device_count_mismatch<D.a, D.b>::value,
                  "xshard: device count does not equal the product of the axis sizes");
  } else if constexpr (D.code == errc::duplicate_device_id) {
    static_assert(xshard::duplicate_device_id<D.a>::value, "xshard: duplicate device id in mesh");
  } else if constexpr (D.code == errc::device_id_out_of_range) {
    static_assert(xshard::device_id_out_of_range<D.a, D.b>::value, "xshard: device id out of range");
  } else if constexpr (D.code == spec_syntax) {
    static_assert(spec_syntax_error<D.column, D.ch>::value, "xshard: malformed partition spec");
  } else if constexpr (D.code == nested_tuple) {
    static_assert(nested_tuple_in_spec<D.column>::value, "xshard: partition spec cannot contain nested tuples");
  } else if constexpr (D.code == empty_tuple) {
    static_assert(empty_tuple_in_spec<D.column>::value, "xshard: empty tuple in partition spec");
  } else if constexpr (D.code == errc::spec_too_long) {
    static_assert(xshard::spec_too_long<D.a, D.b>::value, "xshard: partition spec too long");
  } else if constexpr (D.code == errc::unknown_axis_name) {
    static_assert(xshard::unknown_axis_name<detail::spelled<D.name>, detail::spelled<D.detail, mesh_axes_are>>::value,
                  "xshard: unknown axis name in partition spec");
  } else if constexpr (D.code == errc::axis_index_out_of_range) {
    static_assert(xshard::axis_index_out_of_range<D.a, D.b>::value, "xshard: axis index out of range");
  } else if constexpr (D.code == errc::axis_used_twice) {
    static_assert(xshard::axis_used_twice<detail::spelled<D.name>>::value,
                  "xshard: mesh axis used more than once in partition spec");
  } else if constexpr (D.code == errc::spec_rank_mismatch) {
    static_assert(xshard::spec_rank_mismatch<D.a, D.b>::value,
                  "xshard: partition spec length does not equal the tensor rank");
  } else if constexpr (D.code == errc::uneven_shard) {
    static_assert(xshard::uneven_shard<D.a, D.b, D.column>::value, "xshard: dim does not divide evenly");
  } else if constexpr (D.code == hlo_syntax) {
    static_assert(hlo_syntax_error<D.column, D.ch>::value, "xshard: malformed HLO sharding");
  } else if constexpr (D.code == sdy_syntax) {
    static_assert(sdy_syntax_error<D.column, D.ch>::value, "xshard: malformed Shardy text");
  } else if constexpr (D.code == sdy_unsupported) {
    static_assert(sdy_unsupported_construct<D.column, D.ch>::value, "xshard: unsupported Shardy construct");
  } else if constexpr (D.code == sdy_invalid) {
    static_assert(sdy_invalid_at_column<D.column>::value, "xshard: invalid Shardy text");
  } else if constexpr (D.code == einsum_syntax) {
    static_assert(einsum_syntax_error<D.column, D.ch>::value, "xshard: malformed einsum equation");
  } else if constexpr (D.code == einsum_ellipsis) {
    static_assert(einsum_dot_outside_ellipsis<D.column>::value, "xshard: einsum '.' outside an ellipsis");
  } else if constexpr (D.code == einsum_two_ellipses) {
    static_assert(einsum_second_ellipsis_in_term<D.column>::value, "xshard: two ellipses in one einsum term");
  } else if constexpr (D.code == einsum_output_unknown) {
    static_assert(einsum_output_letter_not_in_inputs<D.column, D.ch>::value,
                  "xshard: einsum output subscript appears in no input");
  } else if constexpr (D.code == einsum_output_twice) {
    static_assert(einsum_output_letter_twice<D.column, D.ch>::value, "xshard: einsum output subscript appears twice");
  } else if constexpr (D.code == einsum_output_ellipsis) {
    static_assert(einsum_output_ellipsis_not_in_inputs<D.column>::value,
                  "xshard: einsum output has an ellipsis but no input has one");
  } else if constexpr (D.code == einsum_too_many) {
    static_assert(einsum_too_many_terms<D.a, D.b>::value, "xshard: too many einsum terms or subscripts");
  } else if constexpr (D.code == einsum_operand_count) {
    static_assert(einsum_operand_count_mismatch<D.a, D.b>::value,
                  "xshard: einsum operand count does not match the subscripts");
  } else if constexpr (D.code == einsum_rank) {
    static_assert(einsum_rank_mismatch<D.column, D.a, D.b>::value,
                  "xshard: einsum subscripts do not match the operand's rank");
  } else if constexpr (D.code == einsum_extent) {
    static_assert(einsum_extent_mismatch<D.ch, D.a, D.b>::value, "xshard: einsum extents do not match");
  } else if constexpr (D.code == einsum_diagonal) {
    static_assert(einsum_diagonal_extent_mismatch<D.column, D.ch, D.a, D.b>::value,
                  "xshard: einsum repeated subscript with different extents");
  } else {
    static_assert(invalid_input<D.code>::value, "xshard: invalid input");
  }
  return true;
}

}  // namespace xshard
