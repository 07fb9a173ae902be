// xshard/spmd/sharded.hpp - tensors that live as shards on the devices of a
// mesh, inside an SPMD body (the function a thread_mesh or mpi_mesh runs
// once per device):
//
// Example (compiled in tests/compile/doc_spmd.cpp):
//   xshard::thread_mesh<M> devices;
//   devices.run([&](auto& dev) {
//     auto x = xshard::distribute<xshard::spec<"data, None">>(dev, global_x);  // no traffic
//     auto y = xshard::redistribute<xshard::spec<"None, model">>(x);          // one all-to-all
//     xt::xtensor<float, 2> back = xshard::gather(y);                          // all-gather
//   });
//
// `sharded<T, R, M, S, Partial>` carries its mesh and spec in its type, and
// the mesh axes over which it is a partial sum (Partial, a bitmask: what a
// contraction over a sharded dim leaves). Its `local()` is this device's
// block (uneven shapes exactly as the sharding engine's shard slices; the
// last blocks may be short or empty); `global_shape()` the whole tensor's.
// It refers to the device it lives on (type-erased: the same type for every
// backend), so collectives need no device argument.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>
#include <xtensor/xtensor.hpp>

#include "../core/diagnostics.hpp"
#include "../core/error.hpp"
#include "../core/tensor_traits.hpp"
#include "../core/workspace.hpp"
#include "../mesh/mesh.hpp"
#include "../sharding/spec.hpp"
#include "../sharding/visualize.hpp"
#include "collectives.hpp"
#include "layout.hpp"

namespace xshard {

/// A device's collectives on element type T, type-erased.
template <class T>
struct device_ref {
  void* device = nullptr;
  std::int64_t position = 0;
  int id = 0;
  void (*all_reduce)(void*, std::span<T>, reduce_op, axis_set) = nullptr;
  void (*all_reduce_many)(void*, std::span<const std::span<T>>, reduce_op, axis_set) = nullptr;
  void (*all_gather)(void*, std::span<const T>, std::span<T>, axis_set) = nullptr;
  void (*reduce_scatter)(void*, std::span<const T>, std::span<T>, reduce_op, axis_set) = nullptr;
  void (*all_to_all)(void*, std::span<const T>, std::span<T>, axis_set) = nullptr;
};

template <class T, class Device>
device_ref<T> make_device_ref(Device& d) {
  device_ref<T> r;
  r.device = &d;
  r.position = d.position();
  r.id = d.id();
  r.all_reduce = [](void* p, std::span<T> x, reduce_op op, axis_set a) {
    static_cast<Device*>(p)->all_reduce(x, op, a);
  };
  r.all_reduce_many = [](void* p, std::span<const std::span<T>> parts, reduce_op op, axis_set a) {
    static_cast<Device*>(p)->all_reduce_many(parts, op, a);
  };
  r.all_gather = [](void* p, std::span<const T> in, std::span<T> out, axis_set a) {
    static_cast<Device*>(p)->all_gather(in, out, a);
  };
  r.reduce_scatter = [](void* p, std::span<const T> in, std::span<T> out, reduce_op op, axis_set a) {
    static_cast<Device*>(p)->reduce_scatter(in, out, op, a);
  };
  r.all_to_all = [](void* p, std::span<const T> in, std::span<T> out, axis_set a) {
    static_cast<Device*>(p)->all_to_all(in, out, a);
  };
  return r;
}

namespace detail {

/// An all-reduce asked for and not run yet (deferred_all_reduces).
template <class T>
struct deferred_all_reduce {
  device_ref<T> dev;
  std::span<T> data;
  reduce_op op = reduce_op::sum;
  axis_set axes = 0;
};
/// Where the all-reduces of partial sums go while a caller gathers them to
/// run as one collective (graph::program's backward, for a layer's
/// parameter gradients): set on this thread only around a computation
/// whose one collective is that all-reduce, run last on the buffer it
/// returns (so no device waits, or switches fibers, while it is set).
template <class T>
struct deferred_all_reduces {
  deferred_all_reduce<T>* items = nullptr;
  std::size_t capacity = 0;
  std::size_t count = 0;
};
template <class T>
inline thread_local deferred_all_reduces<T>* deferring_all_reduces = nullptr;

/// dev.all_reduce(data, op, axes), or recorded for later while a caller
/// defers them (deferred_all_reduces) and has room.
template <class T>
void all_reduce_or_defer(const device_ref<T>& dev, std::span<T> data, reduce_op op, axis_set axes) {
  if (deferred_all_reduces<T>* d = deferring_all_reduces<T>; d && d->count < d->capacity) {
    d->items[d->count++] = {dev, data, op, axes};
    return;
  }
  dev.all_reduce(dev.device, data, op, axes);
}

/// A mesh's shape as a static_vector (axis sizes).
template <Mesh M>
constexpr mesh_shape_t mesh_shape_of() {
  return M::mesh_shape();
}

/// The spec S resolved against mesh M; a compile error names the offender.
template <Mesh M, Spec S>
inline constexpr checked<resolved_spec> resolved_v = resolve_spec(S::value, M::axes);

template <Mesh M, Spec S>
consteval resolved_spec typed_resolved() {
  static_assert(raise<resolved_v<M, S>.diag>());
  return resolved_v<M, S>.value;
}

template <Spec S, std::size_t R>
consteval bool spec_rank_matches() {
  constexpr diagnostic d = [] {
    diagnostic x;
    if (S::rank() != R) {
      x.code = errc::spec_rank_mismatch;
      x.a = static_cast<std::int64_t>(S::rank());
      x.b = static_cast<std::int64_t>(R);
    }
    return x;
  }();
  static_assert(raise<d>());
  return d.ok();
}

using box = static_vector<std::int64_t, max_spec_rank>;

/// Copies the box of `extent` at `src_off` in a row-major tensor of
/// `src_shape` to `dst_off` in one of `dst_shape` (same rank).
template <class T>
void copy_box(const T* src, std::span<const std::int64_t> src_shape, const box& src_off, T* dst,
              std::span<const std::int64_t> dst_shape, const box& dst_off, const box& extent) {
  const std::size_t r = extent.size();
  for (std::int64_t e : extent)
    if (e <= 0) return;
  if (r == 0) {
    dst[0] = src[0];
    return;
  }
  std::int64_t ss[max_spec_rank], ds[max_spec_rank], idx[max_spec_rank]{};
  ss[r - 1] = ds[r - 1] = 1;
  for (std::size_t d = r - 1; d > 0; --d) {
    ss[d - 1] = ss[d] * src_shape[d];
    ds[d - 1] = ds[d] * dst_shape[d];
  }
  std::int64_t so = 0, dof = 0;
  for (std::size_t d = 0; d < r; ++d) {
    so += src_off[d] * ss[d];
    dof += dst_off[d] * ds[d];
  }
  const std::int64_t row = extent[r - 1];
  while (true) {
    std::int64_t s = so, t = dof;
    for (std::size_t d = 0; d + 1 < r; ++d) {
      s += idx[d] * ss[d];
      t += idx[d] * ds[d];
    }
    std::copy(src + s, src + s + row, dst + t);
    std::size_t d = r - 1;
    while (d-- > 0) {
      if (++idx[d] < extent[d]) break;
      idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

}  // namespace detail

template <class T, std::size_t R, Mesh M, Spec S>
class sharded_view;

/// A tensor sharded over mesh M by spec S (rank R), partial over the mesh
/// axes in Partial. Lives inside an SPMD body.
template <class T, std::size_t R, Mesh M, Spec S, axis_set Partial = 0>
class sharded {
  static_assert(detail::spec_rank_matches<S, R>());

 public:
  using value_type = T;
  using mesh_type = M;
  using spec_type = S;
  static constexpr std::size_t rank = R;
  static constexpr axis_set partial_axes = Partial;
  static constexpr resolved_spec resolved = detail::typed_resolved<M, S>();
  static constexpr sharded_layout layout = {resolved, Partial};
  static constexpr mesh_shape_t mesh_shape = M::mesh_shape();

  sharded(device_ref<T> dev, std::array<std::int64_t, R> global_shape, xt::xtensor<T, R> local)
      : dev_(dev), global_(global_shape), local_(std::move(local)) {
    const auto sl = slices();
    for (std::size_t d = 0; d < R; ++d)
      if (static_cast<std::int64_t>(local_.shape()[d]) != sl[d].size())
        throw error("xshard: a shard of dim " + std::to_string(d) + " has extent " + std::to_string(local_.shape()[d]) +
                    " but device " + std::to_string(dev_.id) + " holds " + std::to_string(sl[d].size()) + " of " +
                    std::to_string(global_[d]));
  }

  /// A copy of a view's block (Partial is 0, as a view's), in a buffer of
  /// the current workspace if any (core/workspace.hpp), as every copy of a
  /// sharded value is: a training step's copies (a layer's saved input, a
  /// gradient handed to two operands) then allocate nothing.
  template <axis_set P = Partial>
  requires(P == 0) explicit sharded(const sharded_view<T, R, M, S>& v)
      : dev_(v.device()), global_(v.global_shape()), local_(detail::fresh_copy<T, R>(v.local())) {}
  sharded(const sharded& o) : dev_(o.dev_), global_(o.global_), local_(detail::fresh_copy<T, R>(o.local_)) {}
  sharded(sharded&&) noexcept = default;
  sharded& operator=(const sharded&) = default;
  sharded& operator=(sharded&&) noexcept = default;
  ~sharded() = default;

  /// This device's block.
  const xt::xtensor<T, R>& local() const { return local_; }
  xt::xtensor<T, R>& local() { return local_; }
  const std::array<std::int64_t, R>& global_shape() const { return global_; }
  const device_ref<T>& device() const { return dev_; }
  /// Where this device's block sits in the global tensor.
  static_vector<shard_slice, max_spec_rank> slices() const {
    return local_slices(mesh_shape, resolved, global_, dev_.position);
  }

 private:
  device_ref<T> dev_;
  std::array<std::int64_t, R> global_;
  xt::xtensor<T, R> local_;
};

/// A read-only sharded tensor whose block lives in another tensor (layer l
/// of a sharded stack, scan/scan_layers.hpp): the layout and interface of
/// sharded<T, R, M, S>, no copy. Valid while that tensor lives and keeps
/// its storage. `local()` is an xtensor adaptor over the block.
template <class T, std::size_t R, Mesh M, Spec S>
class sharded_view {
 public:
  using owning_type = sharded<T, R, M, S>;  // (checks S's rank against R)
  using value_type = T;
  using mesh_type = M;
  using spec_type = S;
  // (xbuffer_adaptor over a const pointer does not compile; local() is
  // only ever handed out const.)
  using block_type = xt::xtensor_adaptor<xt::xbuffer_adaptor<T*, xt::no_ownership>, R>;
  static constexpr std::size_t rank = R;
  static constexpr axis_set partial_axes = 0;
  static constexpr resolved_spec resolved = owning_type::resolved;
  static constexpr sharded_layout layout = owning_type::layout;
  static constexpr mesh_shape_t mesh_shape = owning_type::mesh_shape;

  /// @pre `data` holds this device's block of extents `local_shape`, row-major.
  sharded_view(device_ref<T> dev, std::array<std::int64_t, R> global_shape, const T* data,
               std::array<std::size_t, R> local_shape)
      : dev_(dev),
        global_(global_shape),
        local_(xt::xbuffer_adaptor<T*, xt::no_ownership>(const_cast<T*>(data), element_count(local_shape)),
               local_shape) {}

  const block_type& local() const { return local_; }
  const std::array<std::int64_t, R>& global_shape() const { return global_; }
  const device_ref<T>& device() const { return dev_; }
  static_vector<shard_slice, max_spec_rank> slices() const {
    return local_slices(mesh_shape, resolved, global_, dev_.position);
  }

 private:
  static std::size_t element_count(const std::array<std::size_t, R>& shape) {
    std::size_t n = 1;
    for (std::size_t e : shape) n *= e;
    return n;
  }

  device_ref<T> dev_;
  std::array<std::int64_t, R> global_;
  block_type local_;
};

template <class X>
inline constexpr bool is_sharded_v = false;
template <class T, std::size_t R, Mesh M, Spec S, axis_set P>
inline constexpr bool is_sharded_v<sharded<T, R, M, S, P>> = true;
template <class T, std::size_t R, Mesh M, Spec S>
inline constexpr bool is_sharded_v<sharded_view<T, R, M, S>> = true;
template <class X>
concept Sharded = is_sharded_v<std::remove_cvref_t<X>>;

/// The sharded tensor that holds its own block with X's layout: X itself,
/// or a view's owning_type.
template <class X>
struct owning_sharded {
  using type = X;
};
template <class T, std::size_t R, Mesh M, Spec S>
struct owning_sharded<sharded_view<T, R, M, S>> {
  using type = sharded<T, R, M, S>;
};
template <class X>
using owning_sharded_t = typename owning_sharded<std::remove_cvref_t<X>>::type;

namespace detail {

template <class T, std::size_t R>
std::array<std::int64_t, R> shape_of(const xt::xtensor<T, R>& t) {
  std::array<std::int64_t, R> s{};
  for (std::size_t d = 0; d < R; ++d) s[d] = static_cast<std::int64_t>(t.shape()[d]);
  return s;
}

/// A block of `shape` (contents unspecified): the current workspace's, if any.
template <class T, std::size_t R, std::size_t N>
xt::xtensor<T, R> new_block(const static_vector<std::int64_t, N>& shape) {
  std::array<std::size_t, R> s{};
  for (std::size_t d = 0; d < R; ++d) s[d] = static_cast<std::size_t>(shape[d]);
  return fresh_tensor<T, R>(s);
}

/// Local block of `global` (row-major, shape `shape`) for `slices`.
template <class T, std::size_t R>
xt::xtensor<T, R> cut_block(const T* global, std::span<const std::int64_t> shape,
                            const static_vector<shard_slice, max_spec_rank>& slices) {
  box off, ext;
  for (std::size_t d = 0; d < R; ++d) {
    off.push_back(slices[d].start);
    ext.push_back(slices[d].size());
  }
  xt::xtensor<T, R> t = new_block<T, R>(ext);
  box zero;
  for (std::size_t d = 0; d < R; ++d) zero.push_back(0);
  detail::copy_box(global, shape, off, t.data(), std::span<const std::int64_t>(ext.begin(), ext.end()), zero, ext);
  return t;
}

/// One redistribution step's view of this device: the layout before the
/// step, its slices and block extents before and after the step, and the
/// size of the step's group.
template <std::size_t R>
struct step_frame {
  const resolved_spec& before;
  std::int64_t pos, group;
  std::array<shard_slice, R> before_sl, after_sl;
  box bshape, ashape, zero;
  std::span<const std::int64_t> bspan() const { return {bshape.begin(), bshape.end()}; }
  std::span<const std::int64_t> aspan() const { return {ashape.begin(), ashape.end()}; }
};

template <std::size_t R>
step_frame<R> make_step_frame(std::int64_t pos, const redist_step& s, std::span<const std::int64_t> mesh,
                              std::span<const std::int64_t> shape, const resolved_spec& before,
                              const resolved_spec& after) {
  step_frame<R> f{before, pos, group_size(mesh, s.axes), {}, {}, {}, {}, {}};
  const auto before_sl = local_slices(mesh, before, shape, pos);
  const auto after_sl = local_slices(mesh, after, shape, pos);
  for (std::size_t d = 0; d < R; ++d) {
    f.before_sl[d] = before_sl[d];
    f.after_sl[d] = after_sl[d];
    f.bshape.push_back(before_sl[d].size());
    f.ashape.push_back(after_sl[d].size());
    f.zero.push_back(0);
  }
  return f;
}

/// The padded shard extents of layout `before`.
inline box padded_box(const resolved_spec& before, std::span<const std::int64_t> mesh,
                      std::span<const std::int64_t> shape) {
  box b;
  for (std::int64_t e : padded_shard_shape(mesh, before, shape)) b.push_back(e);
  return b;
}

/// Copies what each member r of the step's group sent (chunk r of `recv`,
/// laid out as `src`) into `out`: along dim `dim` where member r's slice
/// before the step lies; every other dim whole (`all_dims`: every dim at
/// the member's slice).
template <class T, std::size_t R>
void place_members(const step_frame<R>& f, const redist_step& s, std::span<const std::int64_t> mesh,
                   std::span<const std::int64_t> shape, const T* recv, std::int64_t chunk,
                   std::span<const std::int64_t> src, std::size_t dim, bool all_dims, T* out) {
  for (std::int64_t r = 0; r < f.group; ++r) {
    const std::int64_t member = group_member(mesh, s.axes, f.pos, r);
    const auto msl = local_slices(mesh, f.before, shape, member);
    box ext, dst;
    for (std::size_t d = 0; d < R; ++d) {
      const bool placed = all_dims || d == dim;
      ext.push_back(placed ? msl[d].size() : f.ashape[d]);
      dst.push_back(placed ? msl[d].start - f.after_sl[d].start : 0);
    }
    copy_box(recv + r * chunk, src, f.zero, out, f.aspan(), dst, ext);
  }
}

/// Reduce-scatter and all-to-all: the block cut along the scattered dim into
/// one padded tile per member; an all-to-all places what comes back along
/// s.dim.
template <class T, std::size_t R>
void run_scatter_step(const device_ref<T>& dev, const redist_step& s, const step_frame<R>& f,
                      std::span<const std::int64_t> mesh, std::span<const std::int64_t> shape, const T* block, T* out) {
  const std::int64_t G = f.group;
  const std::size_t cut = static_cast<std::size_t>(s.kind == step_kind::reduce_scatter ? s.dim : s.dim2);
  const box padded = padded_box(f.before, mesh, shape);
  box cshape;
  for (std::size_t d = 0; d < R; ++d) cshape.push_back(d == cut ? (shape[d] + G - 1) / G : padded[d]);
  const std::span<const std::int64_t> cspan(cshape.begin(), cshape.end());
  const std::int64_t chunk = step_input_elements(s, f.before, mesh, shape) / G;
  std::vector<T> send(static_cast<std::size_t>(chunk * G), T(0));
  for (std::int64_t j = 0; j < G; ++j) {
    const shard_slice t = tile_slice(shape[cut], G, j);
    box off, ext;
    for (std::size_t d = 0; d < R; ++d) {
      off.push_back(d == cut ? t.start - f.before_sl[d].start : 0);
      ext.push_back(d == cut ? t.size() : f.bshape[d]);
    }
    copy_box(block, f.bspan(), off, send.data() + j * chunk, cspan, f.zero, ext);
  }
  if (s.kind == step_kind::reduce_scatter) {
    std::vector<T> recv(static_cast<std::size_t>(chunk));
    dev.reduce_scatter(dev.device, std::span<const T>(send), std::span<T>(recv), reduce_op::sum, s.axes);
    copy_box(recv.data(), cspan, f.zero, out, f.aspan(), f.zero, f.ashape);
    return;
  }
  std::vector<T> recv(static_cast<std::size_t>(chunk * G));
  dev.all_to_all(dev.device, std::span<const T>(send), std::span<T>(recv), s.axes);
  place_members(f, s, mesh, shape, recv.data(), chunk, cspan, static_cast<std::size_t>(s.dim), false, out);
}

/// Runs one redistribution step on this device's block (see layout.hpp).
/// `block` has the extents of layout `before` for this device; returns the
/// block of layout `after`.
template <class T, std::size_t R>
xt::xtensor<T, R> run_step(const device_ref<T>& dev, const redist_step& s, std::span<const std::int64_t> mesh,
                           std::span<const std::int64_t> shape, const resolved_spec& before, const resolved_spec& after,
                           xt::xtensor<T, R> block) {
  const step_frame<R> f = make_step_frame<R>(dev.position, s, mesh, shape, before, after);
  if (s.kind == step_kind::all_reduce) {
    // A block every member holds at the same extents (no padding: the
    // layout's tiles divide the dims; an all-reduce keeps the tiles) is
    // reduced where it lies. The graph defers these reductions by the same
    // rule (graph.hpp).
    if (evenly_split(mesh, before, shape)) {
      all_reduce_or_defer(dev, std::span<T>(block.data(), block.size()), reduce_op::sum, s.axes);
      return block;
    }
  }
  // Any other collective waits for its group; a device waiting on a thread
  // mesh lets another device's fiber run on this thread, which would find
  // this thread's deferral window open (deferring_all_reduces is per thread).
  if (is_collective(s.kind) && deferring_all_reduces<T> != nullptr)
    throw error(std::string("xshard: internal error: an ") + std::string(collective_name(collective_of(s.kind))) +
                " would wait while all-reduces are being deferred");
  xt::xtensor<T, R> out = new_block<T, R>(f.ashape);
  switch (s.kind) {
    case step_kind::slice: {
      box off;
      for (std::size_t d = 0; d < R; ++d) off.push_back(f.after_sl[d].start - f.before_sl[d].start);
      copy_box(block.data(), f.bspan(), off, out.data(), f.aspan(), f.zero, f.ashape);
      break;
    }
    case step_kind::all_reduce: {
      const box padded = padded_box(before, mesh, shape);
      const std::span<const std::int64_t> pspan(padded.begin(), padded.end());
      std::vector<T> buf(static_cast<std::size_t>(step_input_elements(s, before, mesh, shape)), T(0));
      copy_box(block.data(), f.bspan(), f.zero, buf.data(), pspan, f.zero, f.bshape);
      dev.all_reduce(dev.device, std::span<T>(buf), reduce_op::sum, s.axes);
      copy_box(buf.data(), pspan, f.zero, out.data(), f.aspan(), f.zero, f.ashape);
      break;
    }
    case step_kind::all_gather: {
      // Send the padded block; place each member's piece along dim s.dim.
      const box padded = padded_box(before, mesh, shape);
      const std::span<const std::int64_t> pspan(padded.begin(), padded.end());
      const std::int64_t piece = step_input_elements(s, before, mesh, shape);
      std::vector<T> send(static_cast<std::size_t>(piece), T(0)), recv(static_cast<std::size_t>(piece * f.group));
      copy_box(block.data(), f.bspan(), f.zero, send.data(), pspan, f.zero, f.bshape);
      dev.all_gather(dev.device, std::span<const T>(send), std::span<T>(recv), s.axes);
      place_members(f, s, mesh, shape, recv.data(), piece, pspan, 0, true, out.data());
      break;
    }
    case step_kind::reduce_scatter:
    case step_kind::all_to_all:
      run_scatter_step(dev, s, f, mesh, shape, block.data(), out.data());
      break;
  }
  return out;
}

/// Runs a whole plan; returns the block of plan.result.
template <class T, std::size_t R>
xt::xtensor<T, R> run_plan(const device_ref<T>& dev, const redist_plan& plan, std::span<const std::int64_t> mesh,
                           std::span<const std::int64_t> shape, xt::xtensor<T, R> block) {
  sharded_layout cur = plan.from;
  for (const redist_step& s : plan.steps) {
    sharded_layout next = cur;
    apply_step(next, s, plan.result.spec);
    block = run_step<T, R>(dev, s, mesh, shape, cur.spec, next.spec, std::move(block));
    cur = next;
  }
  return block;
}

}  // namespace detail

/// Places this device's block of `global` under spec S: a local slice, no
/// communication (every device is handed the same global tensor).
template <Spec S, class Device, class E>
auto distribute(Device& dev, const E& global) {
  using T = typename std::remove_cvref_t<E>::value_type;
  constexpr std::size_t R = S::rank();
  using M = typename Device::mesh_type;
  using E0 = std::remove_cvref_t<E>;
  if constexpr (tensor_rank_v<E0> >= 0) {
    static_assert(detail::spec_rank_matches<S, static_cast<std::size_t>(tensor_rank_v<E0>)>());
  } else if (global.dimension() != R) {
    diagnostic d;
    d.code = errc::spec_rank_mismatch;
    d.a = static_cast<std::int64_t>(R);
    d.b = static_cast<std::int64_t>(global.dimension());
    throw error("xshard: distribute<spec<\"" + std::string(S::text.view()) + "\">>: " + describe_text(d, {}).str());
  }
  using result = sharded<T, R, M, S>;
  const auto place = [&](const xt::xtensor<T, R>& g) {
    const auto shape = detail::shape_of(g);
    const auto sl = local_slices(result::mesh_shape, result::resolved, shape, dev.position());
    return result(make_device_ref<T>(dev), shape, detail::cut_block<T, R>(g.data(), shape, sl));
  };
  if constexpr (std::is_same_v<E0, xt::xtensor<T, R>>)
    return place(global);  // read where it is
  else
    return place(xt::xtensor<T, R>(global));  // an expression (or another container), evaluated once
}

/// Wraps blocks computed in a manual region: `local` must be this device's
/// block of a tensor of `global_shape` under S (checked).
template <Spec S, axis_set Partial = 0, class Device, class T, std::size_t R>
auto from_local(Device& dev, std::array<std::int64_t, R> global_shape, xt::xtensor<T, R> local) {
  return sharded<T, R, typename Device::mesh_type, S, Partial>(make_device_ref<T>(dev), global_shape, std::move(local));
}

/// A manual region (torch_xla's enable/disable_manual_sharding, JAX's
/// shard_map): `body(blocks...)` sees this device's blocks of `xs` (and may
/// call the device's collectives itself) and returns this device's block of
/// a tensor of `global_shape` laid out by spec Out, partial over Partial;
/// the block's extents are checked against the layout.
template <Spec Out, axis_set Partial = 0, std::size_t R, class F, Sharded X0, Sharded... X>
auto manual(std::array<std::int64_t, R> global_shape, F&& body, const X0& x0, const X&... xs) {
  using T = typename X0::value_type;
  static_assert((std::is_same_v<typename X::mesh_type, typename X0::mesh_type> && ...),
                "xshard::manual: the operands must live on the same mesh");
  xt::xtensor<T, R> block = body(x0.local(), xs.local()...);
  return sharded<T, R, typename X0::mesh_type, Out, Partial>(x0.device(), global_shape, std::move(block));
}

/// The redistribution plan from X's layout to spec S2 (constexpr).
template <Sharded X, Spec S2>
constexpr redist_plan redistribute_plan() {
  using D = std::remove_cvref_t<X>;
  static_assert(detail::spec_rank_matches<S2, D::rank>());
  return plan_redistribute(D::layout, detail::typed_resolved<typename D::mesh_type, S2>(), D::mesh_shape);
}

/// x under spec S2 (no longer partial): the cheapest plan of the rule table
/// (layout.hpp). A sharded rvalue hands its block to the plan, so a plan of
/// no steps (x already laid out so) moves the block instead of copying it.
template <Spec S2, Sharded X>
auto redistribute(X&& x) {
  using D = std::remove_cvref_t<X>;
  using T = typename D::value_type;
  static constexpr redist_plan plan = redistribute_plan<D, S2>();
  const std::array<std::int64_t, D::rank> shape = x.global_shape();
  xt::xtensor<T, D::rank> block = [&] {
    if constexpr (std::is_lvalue_reference_v<X> || std::is_const_v<std::remove_reference_t<X>> ||
                  !std::is_same_v<std::remove_cvref_t<decltype(x.local())>, xt::xtensor<T, D::rank>>)
      return detail::run_plan<T, D::rank>(x.device(), plan, D::mesh_shape, shape, x.local());
    else
      return detail::run_plan<T, D::rank>(x.device(), plan, D::mesh_shape, shape, std::move(x.local()));
  }();
  return sharded<T, D::rank, typename D::mesh_type, S2>(x.device(), shape, std::move(block));
}

/// A sharding constraint (torch_xla's mark_sharding inside a computation):
/// the same as redistribute.
template <Spec S2, Sharded X>
auto constrain(X&& x) {
  return redistribute<S2>(std::forward<X>(x));
}

/// An elementwise f applied to this device's block: the result keeps x's
/// layout (f(block) must have the block's shape, checked). A partial tensor
/// is refused at compile time, since f(a + b) != f(a) + f(b) in general.
template <Sharded X, class F>
auto local_map(const X& x, F&& f) {
  using D = std::remove_cvref_t<X>;
  static_assert(D::partial_axes == 0,
                "xshard::local_map: x holds partial sums; redistribute or gather it before an elementwise op");
  using T = typename D::value_type;
  return sharded<T, D::rank, typename D::mesh_type, typename D::spec_type>(
      x.device(), x.global_shape(), detail::owned_or_fresh<T, D::rank>(f(x.local())));
}

namespace detail {
/// Whether sharded types D and E are laid out alike: same mesh, rank and
/// resolved spec, so their blocks pair element for element once neither
/// holds partial sums (local_zip's rule; the graph's elementwise ops test it
/// to take their fast path).
template <class D, class E>
consteval bool one_layout() {
  if constexpr (std::is_same_v<typename D::mesh_type, typename E::mesh_type> && D::rank == E::rank)
    return D::resolved == E::resolved;
  else
    return false;
}
}  // namespace detail

/// An elementwise f of two tensors of one layout (same mesh, spec and global
/// shape; the shape is checked) on this device's blocks.
template <Sharded X, Sharded Y, class F>
auto local_zip(const X& x, const Y& y, F&& f) {
  using D = std::remove_cvref_t<X>;
  using E = std::remove_cvref_t<Y>;
  static_assert(detail::one_layout<D, E>(), "xshard::local_zip: both tensors need the same mesh and the same sharding");
  static_assert(D::partial_axes == 0 && E::partial_axes == 0,
                "xshard::local_zip: an operand holds partial sums; redistribute it first");
  if (x.global_shape() != y.global_shape()) throw error("xshard: local_zip: the tensors' global shapes differ");
  using T = typename D::value_type;
  return sharded<T, D::rank, typename D::mesh_type, typename D::spec_type>(
      x.device(), x.global_shape(), detail::owned_or_fresh<T, D::rank>(f(x.local(), y.local())));
}

/// The whole tensor on every device (partial sums reduced).
template <Sharded X>
auto gather(const X& x) {
  using D = std::remove_cvref_t<X>;
  using T = typename D::value_type;
  constexpr std::size_t R = D::rank;
  constexpr resolved_spec replicated = [] {
    resolved_spec r;
    for (std::size_t d = 0; d < R; ++d) r.dims.push_back({});
    return r;
  }();
  static constexpr redist_plan plan = plan_redistribute(D::layout, replicated, D::mesh_shape);
  return detail::run_plan<T, R>(x.device(), plan, D::mesh_shape, x.global_shape(), x.local());
}

/// Where every device's block of x lives: one entry per device, as the
/// sharding engine computes them (device, replica, slices).
template <Sharded X>
shard_layout shards(const X& x) {
  using D = std::remove_cvref_t<X>;
  return shard_slices<typename D::mesh_type, typename D::spec_type>(x.global_shape());
}

/// A text picture of which device holds which block of x (a partial tensor
/// says so in its title line).
template <Sharded X>
std::string visualize(const X& x) {
  using D = std::remove_cvref_t<X>;
  std::string pic = visualize<typename D::mesh_type, typename D::spec_type>(x.global_shape());
  if constexpr (D::partial_axes != 0) {
    std::string axes;
    for (std::size_t a = 0; a < D::mesh_type::rank(); ++a)
      if (D::partial_axes & axis_bit(a))
        axes += (axes.empty() ? "" : ", ") + std::string(D::mesh_type::axes[a].name.view());
    pic = "partial sums over {" + axes + "}\n" + pic;
  }
  return pic;
}

}  // namespace xshard
