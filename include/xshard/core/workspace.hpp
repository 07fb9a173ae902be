// xshard/core/workspace.hpp - the buffers of a training step, kept for the
// next one: activations, residuals, gradients and cotangents come from a
// workspace and go back to it, so a step in its steady state allocates
// nothing.
//
// A workspace is a cache of float and double tensor buffers, keyed by their
// element count. While a workspace::scope is open on a thread, the library's
// training path takes every result it makes there (einsum, the composites,
// the graph's nodes and their vjps, scan_layers' residuals and gradients)
// from that workspace, and gives back what it is done with: each layer's
// residuals once its backward ran, each cotangent once it was pulled back,
// each parameter gradient once the optimizer took it. A step's shapes repeat,
// so from the second step on every buffer it asks for is one an earlier
// layer or step gave back. Without an open scope nothing is cached and every
// result is allocated as before.
//
// What a step hands the caller (scan_layers' output, the input gradient)
// goes back with recycle() when the caller is done with it; tensor() gives
// the caller a buffer of the workspace (the next batch, the loss gradient).
//
// A workspace belongs to the thread (or thread_mesh device) whose scope is
// open; it is not shared between threads. Scopes nest (the inner one wins
// until it closes). Tensors taken from a workspace are ordinary
// xt::xtensor containers: one that is never given back is freed as usual.
//
// Example (compiled in tests/compile/doc_core.cpp):
//   xshard::workspace ws;
//   const xshard::workspace::scope use(ws);      // this thread's, until the scope ends
//   auto t = ws.tensor<float, 2>({64, 128});     // from the cache (or new); contents unspecified
//   ws.recycle(std::move(t));                    // back to the cache
//   const auto s = ws.stats();                   // s.reuses, s.allocations, s.allocated_bytes, ...
#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xtensor.hpp>

#include "tensor_traits.hpp"  // is_tuple_like
#include "thread_pool.hpp"    // parallel_ranges: large copies split over the pool

namespace xshard {

class workspace;

namespace detail {

/// Set while a fiber runs (a thread_mesh worker running several devices):
/// that fiber's current workspace, so each device keeps its own.
inline thread_local workspace** workspace_fiber_slot = nullptr;

/// The calling thread's (or fiber's) current workspace: nullptr outside a
/// scope.
inline workspace*& current_workspace_ref() {
  static thread_local workspace* current = nullptr;
  return workspace_fiber_slot ? *workspace_fiber_slot : current;
}

template <class T>
inline constexpr bool workspace_value = std::is_same_v<T, float> || std::is_same_v<T, double>;

template <class V>
struct is_pooled_tensor : std::false_type {};
template <class T, std::size_t N>
struct is_pooled_tensor<xt::xtensor<T, N>> : std::bool_constant<workspace_value<T> && (N > 0)> {};

template <class V>
void recycle(V&& v);

}  // namespace detail

/// A cache of tensor buffers for one thread's training loop (see the header
/// comment).
class workspace {
 public:
  /// What a workspace did since it was made.
  struct statistics {
    std::size_t reuses = 0;           ///< buffers handed out from the cache
    std::size_t allocations = 0;      ///< buffers it had to allocate (cache misses)
    std::size_t allocated_bytes = 0;  ///< bytes of those: its size, once a step's shapes have all been seen
    std::size_t recycled = 0;         ///< buffers given back
    std::size_t dropped = 0;          ///< of those, freed: more of their size than the loop ever had out at once
    std::size_t held_bytes = 0;       ///< bytes of the buffers in the cache now
    std::size_t peak_held_bytes = 0;  ///< the most it held at once
  };

  /// Makes a workspace the calling thread's (or thread_mesh device's) until
  /// the scope ends; the previous one (or none) is current again after.
  class scope {
   public:
    explicit scope(workspace& w) : prev_(std::exchange(detail::current_workspace_ref(), &w)) {}
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
    ~scope() { detail::current_workspace_ref() = prev_; }

   private:
    workspace* prev_;
  };

  workspace() = default;
  workspace(const workspace&) = delete;
  workspace& operator=(const workspace&) = delete;

  /// The workspace of the innermost open scope on this thread, or nullptr.
  static workspace* current() noexcept { return detail::current_workspace_ref(); }

  /// A row-major tensor of `shape` whose buffer comes from the cache when
  /// one of that many elements is there (else it is allocated). Its
  /// contents are unspecified.
  template <class T, std::size_t N, class S = std::array<std::size_t, N>>
  xt::xtensor<T, N> tensor(const S& shape) {
    static_assert(detail::workspace_value<T>, "xshard::workspace holds float and double tensors");
    std::array<std::size_t, N> sh{};
    std::copy_n(std::begin(shape), N, sh.begin());
    std::size_t n = 1;
    for (const std::size_t e : sh) n *= e;
    xt::uvector<T> storage = take<T>(n);
    std::array<std::ptrdiff_t, N> strides{};
    std::ptrdiff_t s = 1;
    for (std::size_t d = N; d-- > 0;) {
      strides[d] = sh[d] == 1 ? 0 : s;  // xtensor's convention: no stride along a dim of extent 1
      s *= static_cast<std::ptrdiff_t>(sh[d]);
    }
    return xt::xtensor<T, N>(std::move(storage), std::move(sh), std::move(strides));
  }
  template <class T, std::size_t N>
  xt::xtensor<T, N> tensor(const std::size_t (&shape)[N]) {
    std::array<std::size_t, N> s{};
    std::copy_n(shape, N, s.begin());
    return tensor<T, N>(s);
  }

  /// Gives a tensor's buffer to the cache (the tensor is left empty).
  template <class T, std::size_t N>
  void recycle(xt::xtensor<T, N>&& t) {
    static_assert(detail::workspace_value<T>, "xshard::workspace holds float and double tensors");
    xt::uvector<T> storage = std::move(t.storage());
    t = xt::xtensor<T, N>();  // a valid empty tensor, not one whose shape outlived its storage
    put(std::move(storage));
  }

  /// Gives back every float and double tensor v holds, as the library does
  /// with what it is done with: in an optional, a tuple or pair (a layer's
  /// gradients), a sharded value's block; anything else is left as it is.
  template <class V>
  requires(!std::is_lvalue_reference_v<V>) void recycle(V&& v) {
    const scope use(*this);
    detail::recycle(std::move(v));
  }

  /// An object of type V given back earlier (give_object), or a new one:
  /// e.g. a std::vector that keeps its capacity from step to step.
  template <class V>
  V take_object() {
    auto& h = holder_of<V>();
    if (h.items.empty()) return V();
    V v = std::move(h.items.back());
    h.items.pop_back();
    return v;
  }
  /// Keeps v for a later take_object<V>().
  template <class V>
  void give_object(V&& v) {
    holder_of<std::remove_cvref_t<V>>().items.push_back(std::forward<V>(v));
  }

  statistics stats() const noexcept { return stats_; }

  /// Frees every buffer the cache holds (the statistics but held_bytes stay).
  void clear() noexcept {
    floats_.buckets.clear();
    doubles_.buckets.clear();
    objects_.clear();
    stats_.held_bytes = 0;
  }

  ~workspace() {
    // A scope must not outlive its workspace; if it would, forget it here
    // rather than leave the thread pointing at freed memory.
    if (detail::current_workspace_ref() == this) detail::current_workspace_ref() = nullptr;
  }

 private:
  // A buffer given back is kept only while its bucket holds fewer than the
  // most buffers of its size ever out at once: what the loop can ask for
  // again. A size never asked for (a tensor made elsewhere, given back) is
  // freed, so the cache cannot grow from step to step.
  template <class T>
  struct bucket {
    std::size_t elements;
    std::vector<xt::uvector<T>> free;
    std::size_t out = 0;       // handed out and not given back (as far as the count can tell)
    std::size_t peak_out = 0;  // the most at once
  };
  template <class T>
  struct pool {
    std::vector<bucket<T>> buckets;  // few sizes per step: a linear search
    bucket<T>& of(std::size_t n) {
      for (auto& b : buckets)
        if (b.elements == n) return b;
      return buckets.emplace_back(bucket<T>{n, {}});
    }
  };
  template <class T>
  pool<T>& pool_of() {
    if constexpr (std::is_same_v<T, float>)
      return floats_;
    else
      return doubles_;
  }

  template <class T>
  xt::uvector<T> take(std::size_t n) {
    if (n > 0) {
      auto& b = pool_of<T>().of(n);
      b.peak_out = std::max(b.peak_out, ++b.out);
      if (!b.free.empty()) {
        xt::uvector<T> v = std::move(b.free.back());
        b.free.pop_back();
        ++stats_.reuses;
        stats_.held_bytes -= n * sizeof(T);
        return v;
      }
    }
    ++stats_.allocations;
    stats_.allocated_bytes += n * sizeof(T);
    return xt::uvector<T>(n);
  }
  template <class T>
  void put(xt::uvector<T>&& v) {
    const std::size_t n = v.size();
    if (n == 0) return;
    auto& b = pool_of<T>().of(n);
    if (b.out > 0) --b.out;
    ++stats_.recycled;
    if (b.free.size() >= b.peak_out) {
      ++stats_.dropped;
      return;  // v is freed
    }
    b.free.push_back(std::move(v));
    stats_.held_bytes += n * sizeof(T);
    stats_.peak_held_bytes = std::max(stats_.peak_held_bytes, stats_.held_bytes);
  }

  struct holder_base {
    virtual ~holder_base() = default;
  };
  template <class V>
  struct holder : holder_base {
    std::vector<V> items;
  };
  template <class V>
  static inline const char type_tag = 0;  // one address per V
  template <class V>
  holder<V>& holder_of() {
    for (auto& [tag, h] : objects_)
      if (tag == &type_tag<V>) return static_cast<holder<V>&>(*h);
    return static_cast<holder<V>&>(*objects_.emplace_back(&type_tag<V>, std::make_unique<holder<V>>()).second);
  }

  pool<float> floats_;
  pool<double> doubles_;
  std::vector<std::pair<const void*, std::unique_ptr<holder_base>>> objects_;  // take_object / give_object
  statistics stats_;
};

namespace detail {

/// A fresh row-major tensor of `shape` for a result: from the current
/// workspace when a scope is open (contents unspecified), else allocated
/// (xtensor's from_shape).
template <class T, std::size_t N, class S>
xt::xtensor<T, N> fresh_tensor(const S& shape) {
  if constexpr (workspace_value<T> && N > 0) {
    if (workspace* w = current_workspace_ref()) return w->template tensor<T, N>(shape);
  }
  std::array<std::size_t, N> s{};
  std::copy_n(std::begin(shape), N, s.begin());
  return xt::xtensor<T, N>::from_shape(s);
}

/// out[i] = in[i] for i < n (no overlap): memcpy over the thread pool's
/// shares for a copy of more than one grain (a cotangent handed to two
/// operands, a residual kept for the backward).
template <class T>
void copy_elements(T* out, const T* in, std::size_t n) {
  static_assert(std::is_trivially_copyable_v<T>);
  parallel_ranges(
      n, parallel_grain, [&](std::size_t lo, std::size_t hi) { std::memcpy(out + lo, in + lo, (hi - lo) * sizeof(T)); },
      parallel_unit);
}

/// A copy of e (a plain tensor or an expression of static rank N) in a
/// fresh tensor.
template <class T, std::size_t N, class E>
xt::xtensor<T, N> fresh_copy(const E& e) {
  if constexpr (workspace_value<T> && N > 0) {
    if (current_workspace_ref()) {
      xt::xtensor<T, N> out = fresh_tensor<T, N>(e.shape());
      if constexpr (std::is_same_v<E, xt::xtensor<T, N>>)
        copy_elements(out.data(), e.data(), out.size());  // row-major both: the same element order
      else
        xt::noalias(out) = e;
      return out;
    }
  }
  return xt::xtensor<T, N>(e);
}

/// e as a tensor of its own: e itself when it is one (an rvalue
/// xt::xtensor<T, N>: moved), else evaluated into a fresh tensor
/// (fresh_copy: the current workspace's, if any).
template <class T, std::size_t N, class E>
xt::xtensor<T, N> owned_or_fresh(E&& e) {
  if constexpr (std::is_same_v<std::remove_cvref_t<E>, xt::xtensor<T, N>> && !std::is_lvalue_reference_v<E>)
    return std::move(e);
  else
    return fresh_copy<T, N>(e);
}

/// A copy of v: in a fresh tensor (fresh_copy) when V is a float or double
/// xt::xtensor, else V's copy.
template <class V>
V fresh_copy_of(const V& v) {
  if constexpr (is_pooled_tensor<V>::value)
    return fresh_copy<typename V::value_type, std::tuple_size_v<typename V::shape_type>>(v);
  else
    return V(v);
}

template <class V>
struct is_optional : std::false_type {};
template <class V>
struct is_optional<std::optional<V>> : std::true_type {};

/// A value with a block of its own (a sharded value's local()).
template <class V>
concept has_local_block = requires(V& v) {
  { v.local() } -> std::same_as<std::remove_cvref_t<decltype(v.local())>&>;
};

/// Gives what v holds to the current workspace: a float or double tensor,
/// the tensors in an optional, a tuple or a pair, a sharded value's block
/// (anything with local()), or what a type's recycle_parts(v&&) (found by
/// ADL) hands on. Without a current workspace, or for anything else, v is
/// left as it is (and freed by its owner as usual).
template <class V>
void recycle(V&& v) {
  static_assert(!std::is_lvalue_reference_v<V>, "xshard::detail::recycle takes what it consumes: std::move it");
  using D = std::remove_cvref_t<V>;
  workspace* const w = current_workspace_ref();
  if (!w) return;
  if constexpr (is_pooled_tensor<D>::value) {
    w->recycle(std::move(v));
  } else if constexpr (is_optional<D>::value) {
    if (v) recycle(std::move(*v));
    v.reset();
  } else if constexpr (is_tuple_like<D>::value) {
    std::apply([](auto&... e) { (recycle(std::move(e)), ...); }, v);
  } else if constexpr (requires { recycle_parts(std::move(v)); }) {
    recycle_parts(std::move(v));
  } else if constexpr (has_local_block<D>) {
    recycle(std::move(v.local()));
  }
}

}  // namespace detail
}  // namespace xshard
