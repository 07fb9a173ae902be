// xshard/spmd/mpi_mesh.hpp - the MPI backend: one MPI rank per device of a
// typed mesh (device position = rank in MPI_COMM_WORLD).
//
// Example (compiled in tests/compile/doc_spmd.cpp):
//   using M = xshard::mesh<"data=2, model=2">;
//   int main() {                               // mpiexec -n 4 ./program
//     xshard::mpi_mesh<M> devices;             // initialises MPI if needed
//     devices.run([&](auto& dev) {             // once, on this rank's device
//       dev.all_reduce(grad, xshard::reduce_op::sum, dev.axes("data"));
//     });
//   }
//
// The device has the same interface as thread_mesh's (collectives.hpp). Each
// axis subset gets a communicator at construction (MPI_Comm_split of a
// duplicate of MPI_COMM_WORLD, color = group index, key = group rank), so
// group ranks are communicator ranks. A collective first all-gathers the
// members' call descriptions over that communicator and checks them
// (check_collective_calls: the same errors, with the same words, as the
// thread backend; a barrier is that exchange alone), then calls MPI:
// MPI_Allreduce (in place), MPI_Allgather, MPI_Reduce_scatter_block,
// MPI_Alltoall, MPI_Isend/MPI_Irecv for permute. Numbers travel as their MPI
// type; other trivially copyable types as MPI_BYTE.
//
// Only usable where MPI is: link the CMake target xshard::mpi (which also
// defines XSHARD_WITH_MPI, so xshard/xshard.hpp includes this header).
//
// Failure: a world whose size is not M::size() is an xshard::error from the
// constructor on every rank. A body that throws prints
// "xshard: device <id> (rank <r>) failed: <what>" to stderr and calls
// MPI_Abort, so no other rank waits forever in a collective.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../mesh/mesh.hpp"
#include "collectives.hpp"

namespace xshard {

namespace detail {

/// Initialises MPI on first use (MPI_Init_thread, MPI_THREAD_FUNNELED) unless
/// the program already did, and then finalises it at exit.
class mpi_environment {
 public:
  static void ensure() { static mpi_environment env; }
  mpi_environment(const mpi_environment&) = delete;
  mpi_environment& operator=(const mpi_environment&) = delete;

 private:
  mpi_environment() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      ours_ = true;
    }
  }
  ~mpi_environment() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (ours_ && !finalized) MPI_Finalize();
  }
  bool ours_ = false;
};

inline bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

/// How a buffer of T travels: an MPI type, and how many of it one T is.
struct mpi_element {
  MPI_Datatype type;
  std::int64_t per_element;
};

template <class T>
mpi_element mpi_element_of() {
  if constexpr (std::is_same_v<T, float>)
    return {MPI_FLOAT, 1};
  else if constexpr (std::is_same_v<T, double>)
    return {MPI_DOUBLE, 1};
  else if constexpr (std::is_same_v<T, long double>)
    return {MPI_LONG_DOUBLE, 1};
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 1)
    return {MPI_INT8_T, 1};
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 2)
    return {MPI_INT16_T, 1};
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 4)
    return {MPI_INT32_T, 1};
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 8)
    return {MPI_INT64_T, 1};
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && sizeof(T) == 1)
    return {MPI_UINT8_T, 1};
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && sizeof(T) == 2)
    return {MPI_UINT16_T, 1};
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && sizeof(T) == 4)
    return {MPI_UINT32_T, 1};
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && sizeof(T) == 8)
    return {MPI_UINT64_T, 1};
  else {
    static_assert(!reducible_v<T>, "xshard: no MPI type for this arithmetic type");
    return {MPI_BYTE, static_cast<std::int64_t>(sizeof(T))};
  }
}

inline MPI_Op mpi_op_of(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
      return MPI_SUM;
    case reduce_op::max:
      return MPI_MAX;
    case reduce_op::min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

/// The communicators of one mesh: a duplicate of MPI_COMM_WORLD and one per
/// axis subset (MPI_COMM_NULL where the groups have one device).
class mpi_communicators {
 public:
  /// Collective over MPI_COMM_WORLD. @pre the world has one rank per device.
  mpi_communicators(std::span<const std::int64_t> shape, std::int64_t position) {
    MPI_Comm_dup(MPI_COMM_WORLD, &world_);
    const axis_set subsets = axis_set{1} << shape.size();
    by_axes_.assign(subsets, MPI_COMM_NULL);
    for (axis_set axes = 0; axes < subsets; ++axes) {
      if (group_size(shape, axes) == 1) continue;  // the same on every rank
      MPI_Comm_split(world_, static_cast<int>(group_index(shape, axes, position)),
                     static_cast<int>(group_rank(shape, axes, position)), &by_axes_[axes]);
    }
  }
  mpi_communicators(const mpi_communicators&) = delete;
  mpi_communicators& operator=(const mpi_communicators&) = delete;
  ~mpi_communicators() {
    if (mpi_finalized()) return;
    for (MPI_Comm& c : by_axes_)
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
    MPI_Comm_free(&world_);
  }
  MPI_Comm of(axis_set axes) const { return by_axes_[axes]; }

 private:
  MPI_Comm world_ = MPI_COMM_NULL;
  std::vector<MPI_Comm> by_axes_;
};

/// An MPI count: the elements of `n` items of T, or -1 past INT_MAX.
template <class T>
int mpi_count(std::size_t n) {
  const std::int64_t c = static_cast<std::int64_t>(n) * mpi_element_of<T>().per_element;
  return c > INT_MAX ? -1 : static_cast<int>(c);
}

/// The device of an mpi_mesh, shape-generic.
class mpi_device_core : public basic_device<mpi_device_core> {
  friend class basic_device<mpi_device_core>;

 public:
  mpi_device_core(const mpi_device_core&) = delete;
  mpi_device_core& operator=(const mpi_device_core&) = delete;

 protected:
  mpi_device_core(const mesh_axes& axes, std::span<const int> ids, std::int64_t position,
                  const mpi_communicators& comms)
      : basic_device(axes, ids, position), comms_(&comms) {}
  ~mpi_device_core() = default;

 private:
  /// All-gathers the members' calls over the group's communicator and
  /// checks them: every member sees the same calls, so all throw or none.
  MPI_Comm meet(axis_set axes, const group_info& g, const collective_call& c, std::span<const rank_pair> pairs = {}) {
    const MPI_Comm comm = comms_->of(axes);
    calls_.resize(static_cast<std::size_t>(g.size));
    MPI_Allgather(&c, collective_call_fields, MPI_INT64_T, calls_.data(), collective_call_fields, MPI_INT64_T, comm);
    const std::string msg = check_calls(calls_, axes, pairs);
    if (!msg.empty()) throw error(msg);
    return comm;
  }
  template <class T>
  static collective_call sized(collective_call c, std::size_t in, std::size_t out) {
    if (mpi_count<T>(in) < 0 || mpi_count<T>(out) < 0) c.flags |= call_count_too_big;
    return c;
  }

  template <class T>
  void all_reduce_impl(std::span<T> data, reduce_op op, axis_set axes, group_info g, const collective_call& c) {
    const MPI_Comm comm = meet(axes, g, sized<T>(c, data.size(), data.size()));
    MPI_Allreduce(MPI_IN_PLACE, data.data(), mpi_count<T>(data.size()), mpi_element_of<T>().type, mpi_op_of(op), comm);
  }

  /// One check exchange for all the parts (check_calls compares their
  /// sizes), then each part reduced in place: the same bits as one
  /// all_reduce per part, without packing them into a buffer.
  template <class T>
  void all_reduce_many_impl(std::span<const std::span<T>> parts, reduce_op op, axis_set axes, group_info g,
                            const collective_call& c) {
    collective_call sc = c;
    for (const std::span<T>& p : parts) sc = sized<T>(sc, p.size(), p.size());
    const MPI_Comm comm = meet(axes, g, sc);
    for (const std::span<T>& p : parts)
      if (!p.empty())
        MPI_Allreduce(MPI_IN_PLACE, p.data(), mpi_count<T>(p.size()), mpi_element_of<T>().type, mpi_op_of(op), comm);
  }

  template <class T>
  void all_gather_impl(std::span<const T> in, std::span<T> out, axis_set axes, group_info g, const collective_call& c) {
    const MPI_Comm comm = meet(axes, g, sized<T>(c, in.size(), out.size()));
    const int n = mpi_count<T>(in.size());
    const MPI_Datatype type = mpi_element_of<T>().type;
    const bool in_place = at_offset(in.data(), out.data(), static_cast<std::size_t>(g.rank) * in.size_bytes());
    MPI_Allgather(in_place ? MPI_IN_PLACE : in.data(), n, type, out.data(), n, type, comm);
  }

  template <class T>
  void reduce_scatter_impl(std::span<const T> in, std::span<T> out, reduce_op op, axis_set axes, group_info g,
                           const collective_call& c) {
    const MPI_Comm comm = meet(axes, g, sized<T>(c, in.size(), out.size()));
    const MPI_Datatype type = mpi_element_of<T>().type;
    const int n = mpi_count<T>(out.size());
    if (overlaps(in.data(), in.size_bytes(), out.data(), out.size_bytes())) {
      // out is this device's own chunk of in: MPI's in-place form puts the
      // result at the start of the buffer instead, so go through a copy.
      std::vector<T> tmp(out.size());
      MPI_Reduce_scatter_block(in.data(), tmp.data(), n, type, mpi_op_of(op), comm);
      if (!tmp.empty()) std::memcpy(out.data(), tmp.data(), out.size_bytes());
    } else {
      MPI_Reduce_scatter_block(in.data(), out.data(), n, type, mpi_op_of(op), comm);
    }
  }

  template <class T>
  void all_to_all_impl(std::span<const T> in, std::span<T> out, axis_set axes, group_info g, const collective_call& c) {
    const MPI_Comm comm = meet(axes, g, sized<T>(c, in.size(), out.size()));
    const int chunk = mpi_count<T>(in.size() / static_cast<std::size_t>(g.size));
    const MPI_Datatype type = mpi_element_of<T>().type;
    MPI_Alltoall(in.data(), chunk, type, out.data(), chunk, type, comm);
  }

  template <class T>
  void permute_impl(std::span<const T> in, std::span<T> out, std::span<const rank_pair> pairs, axis_set axes,
                    group_info g, const collective_call& c) {
    const MPI_Comm comm = meet(axes, g, sized<T>(c, in.size(), out.size()), pairs);
    const int n = mpi_count<T>(in.size());
    const MPI_Datatype type = mpi_element_of<T>().type;
    MPI_Request requests[2];
    int count = 0;
    bool received = false;
    for (const rank_pair& p : pairs) {
      if (p.first == g.rank && p.second == g.rank) {
        if (!out.empty()) std::memcpy(out.data(), in.data(), out.size_bytes());
        received = true;
      } else if (p.second == g.rank) {
        MPI_Irecv(out.data(), n, type, static_cast<int>(p.first), permute_tag, comm, &requests[count++]);
        received = true;
      } else if (p.first == g.rank) {
        MPI_Isend(in.data(), n, type, static_cast<int>(p.second), permute_tag, comm, &requests[count++]);
      }
    }
    if (!received && !out.empty()) std::memset(static_cast<void*>(out.data()), 0, out.size_bytes());
    MPI_Waitall(count, requests, MPI_STATUSES_IGNORE);
  }

  void barrier_impl(axis_set axes, group_info g, const collective_call& c) { meet(axes, g, c); }

  static constexpr int permute_tag = 0x5850;  // "XP"
  const mpi_communicators* comms_;
  std::vector<collective_call> calls_;  // scratch for meet()
};

}  // namespace detail

/// This rank's device of an mpi_mesh<M>: what an SPMD body gets.
template <Mesh M>
class mpi_device : public detail::mpi_device_core {
 public:
  using mesh_type = M;
  /// The axis set named by `names` ("data" or "data, model"); constexpr.
  static constexpr axis_set axes(std::string_view names) { return parse_axis_set(M::axes, names); }

  mpi_device(std::int64_t position, const detail::mpi_communicators& comms)
      : mpi_device_core(M::axes, std::span<const int>(M::device_ids), position, comms) {}
};

/// The mesh M over MPI: this process drives the device at position = its
/// rank in MPI_COMM_WORLD, which must have M::size() ranks.
template <Mesh M>
class mpi_mesh {
 public:
  using mesh_type = M;
  using device = mpi_device<M>;

  /// Initialises MPI if the program has not; collective over MPI_COMM_WORLD.
  /// A world of the wrong size is an xshard::error on every rank.
  mpi_mesh() : mpi_mesh(world_position()) {}
  mpi_mesh(const mpi_mesh&) = delete;
  mpi_mesh& operator=(const mpi_mesh&) = delete;

  static constexpr std::int64_t size() { return M::size(); }
  /// The axis set named by `names` ("data" or "data, model"); constexpr.
  static constexpr axis_set axes(std::string_view names) { return parse_axis_set(M::axes, names); }

  /// Runs body(device&) once, for this rank's device. If the body throws,
  /// prints "xshard: device <id> (rank <r>) failed: <what>" and aborts
  /// every rank (MPI_Abort).
  template <class F>
  void run(F&& body) {
    try {
      body(device_);
    } catch (const std::exception& e) {
      fail_and_abort(e.what());
    } catch (...) {
      fail_and_abort("unknown exception");
    }
  }

  /// This rank's device.
  device& local() { return device_; }

 private:
  explicit mpi_mesh(std::int64_t position) : comms_(shape_span(), position), device_(position, comms_) {}

  static std::int64_t world_position() {
    detail::mpi_environment::ensure();
    int world = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (world != M::size())
      throw error("xshard: mpi_mesh<\"" + std::string(M::text.view()) + "\"> needs " + std::to_string(M::size()) +
                  " MPI ranks, the world has " + std::to_string(world));
    return rank;
  }
  static std::span<const std::int64_t> shape_span() { return {shape_.begin(), shape_.size()}; }

  [[noreturn]] void fail_and_abort(std::string_view what) {
    if (what.starts_with("xshard: ")) what.remove_prefix(8);
    std::fprintf(stderr, "xshard: device %d (rank %lld) failed: %.*s\n", device_.id(),
                 static_cast<long long>(device_.position()), static_cast<int>(what.size()), what.data());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

  static constexpr static_vector<std::int64_t, max_mesh_axes> shape_ = M::mesh_shape();
  detail::mpi_communicators comms_;
  device device_;
};

}  // namespace xshard
