// xshard/core/static_vector.hpp - a fixed-capacity vector for constexpr values
// (static_vector), and its run-time twin for per-call scratch (bounded_vector).
//
// Used for the small, bounded parts of the engine's values (mesh axes, spec
// entries, tensor dims). It is structural (public members), so values holding
// it can be template arguments. Exceeding the capacity is checked by callers,
// which report a named error; push_back itself never writes out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

namespace xshard {

namespace detail {
/// The narrowest unsigned type that counts to Cap: values nested in plans
/// (vectors of vectors) stay small.
template <std::size_t Cap>
using static_vector_count_t =
    std::conditional_t<(Cap < 256), std::uint8_t, std::conditional_t<(Cap < 65536), std::uint16_t, std::size_t>>;
}  // namespace detail

template <class T, std::size_t Cap>
struct static_vector {
  T items[Cap]{};
  detail::static_vector_count_t<Cap> count = 0;

  constexpr static_vector() = default;
  constexpr static_vector(std::initializer_list<T> init) {
    for (const T& v : init) push_back(v);
  }

  static constexpr std::size_t capacity() { return Cap; }
  constexpr std::size_t size() const { return count; }
  constexpr bool empty() const { return count == 0; }
  constexpr bool full() const { return count == Cap; }

  /// @pre !full(); when full the element is dropped (callers check first).
  constexpr void push_back(const T& v) {
    if (count < Cap) items[count++] = v;
  }
  constexpr void pop_back() {
    if (count > 0) --count;
  }
  constexpr void clear() { count = 0; }
  /// Removes element i, moving the later ones down by one. @pre i < size().
  constexpr void erase_at(std::size_t i) {
    for (; i + 1 < count; ++i) items[i] = items[i + 1];
    if (count > 0) --count;
  }

  constexpr T& operator[](std::size_t i) { return items[i]; }
  constexpr const T& operator[](std::size_t i) const { return items[i]; }
  constexpr T& back() { return items[count - 1]; }
  constexpr const T& back() const { return items[count - 1]; }

  constexpr T* begin() { return items; }
  constexpr T* end() { return items + count; }
  constexpr const T* begin() const { return items; }
  constexpr const T* end() const { return items + count; }

  friend constexpr bool operator==(const static_vector& a, const static_vector& b) {
    if (a.count != b.count) return false;
    for (std::size_t i = 0; i < a.count; ++i)
      if (!(a.items[i] == b.items[i])) return false;
    return true;
  }
};

/// static_vector's run-time twin, for per-call scratch on hot paths: the
/// same interface, but the unused items are left uninitialized and a copy
/// copies only the used ones. Constructing a static_vector writes all Cap
/// items (it must, to be a constant); an einsum call's sixteen operands of
/// three lists each came to 8 KB of stores per construction and per copy.
/// Not usable in constant evaluation. T must be default constructible.
template <class T, std::size_t Cap>
struct bounded_vector {
  T items[Cap];
  detail::static_vector_count_t<Cap> count = 0;

  bounded_vector() {}  // user-provided: value-initialization does not zero the items
  bounded_vector(const bounded_vector& o) : count(o.count) {
    for (std::size_t i = 0; i < count; ++i) items[i] = o.items[i];
  }
  bounded_vector& operator=(const bounded_vector& o) {
    count = o.count;
    for (std::size_t i = 0; i < count; ++i) items[i] = o.items[i];
    return *this;
  }

  static constexpr std::size_t capacity() { return Cap; }
  std::size_t size() const { return count; }
  bool empty() const { return count == 0; }
  bool full() const { return count == Cap; }

  /// @pre !full(); when full the element is dropped (callers check first).
  void push_back(const T& v) {
    if (count < Cap) items[count++] = v;
  }
  void pop_back() {
    if (count > 0) --count;
  }
  void clear() { count = 0; }
  /// Removes element i, moving the later ones down by one. @pre i < size().
  void erase_at(std::size_t i) {
    for (; i + 1 < count; ++i) items[i] = items[i + 1];
    if (count > 0) --count;
  }

  T& operator[](std::size_t i) { return items[i]; }
  const T& operator[](std::size_t i) const { return items[i]; }
  T& back() { return items[count - 1]; }
  const T& back() const { return items[count - 1]; }

  T* begin() { return items; }
  T* end() { return items + count; }
  const T* begin() const { return items; }
  const T* end() const { return items + count; }

  /// The used items compared (the unused ones are not read).
  friend bool operator==(const bounded_vector& a, const bounded_vector& b) {
    if (a.count != b.count) return false;
    for (std::size_t i = 0; i < a.count; ++i)
      if (!(a.items[i] == b.items[i])) return false;
    return true;
  }
};

}  // namespace xshard
