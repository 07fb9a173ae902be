// xshard/spmd/thread_mesh.hpp - the embedded backend: the devices of a typed
// mesh on worker threads, collectives through shared memory.
//
// Example (compiled in tests/compile/doc_spmd.cpp):
//   using M = xshard::mesh<"data=4, model=2">;
//   xshard::thread_mesh<M> devices;          // up to 8 worker threads, kept for later runs
//   devices.run([&](auto& dev) {              // dev: xshard::thread_device<M>&, on a worker thread
//     std::vector<float> g = local_gradient(dev.position());
//     dev.all_reduce(g, xshard::reduce_op::sum, dev.axes("data"));   // over the 4 devices of a column
//   });
//
// Worker threads: one per device up to the hardware's thread count
// (XSHARD_MESH_THREADS or the constructor's argument choose another). With
// fewer threads than devices, each thread runs a block of consecutive
// devices (those of the mesh's last axes, so groups over those axes meet on
// one thread) as fibers (core/fiber.hpp): a device waiting for its group
// switches, in user space, to one of its thread's devices that can go on.
// train_mlp's 2x2 mesh on 2 cores, 300 steps: 61,935 kernel context
// switches on 4 threads, 284 on 2 with fibers, and 0.568 s against 0.521 s
// (medians of 5; bench/results/train_steps_2026-11-27.md).
//
// Collectives (see collectives.hpp for what each computes) meet in a
// rendezvous per group: every member posts its buffers and waits at the
// group's barrier, checks that the group's calls agree (a mismatch is the same
// xshard::error on every member), then reads its peers' inputs. An input of
// up to 32 KiB (staged_collective_bytes) is copied into the member's slot
// before the barrier and read from there, so the collective returns without
// a second barrier (latency: every wait is a switch to another device or a
// trip across cores). A larger one is read in place and the group meets again before
// anyone returns; its all_reduce is a reduce-scatter and all-gather in one
// pass over the members' own buffers: rank r reduces chunk r of every
// member's buffer (in rank order) and writes the result into chunk r of
// every member's buffer, so the work and the memory traffic are split across
// the group's threads and each buffer is read once and written once. An
// all_reduce whose members are all fibers of one worker thread (a model
// group of train_mlp's 2x2 mesh on 2 cores) stages nothing: the member
// whose arrival completes the group reduces every member's buffer once and
// writes the result into each before the others resume. All reduce in rank
// order: the same bits every way.
//
// Failure: when a body throws on one device, the mesh is poisoned: a member
// blocked in (or later entering) a collective whose group cannot complete
// any more throws xshard::error("xshard: device <id> failed: <what>"), so no
// device hangs; run() rethrows the first exception once every device has
// returned, and the next run() starts afresh. A member left alone because a
// peer returned from its body without joining the collective gets an
// xshard::error naming that peer. Calls that every member of a group has
// entered always complete, so no peer's buffer is released while another
// member reads it.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/fiber.hpp"
#include "../core/thread_pool.hpp"
#include "../core/workspace.hpp"
#include "../einsum/sums.hpp"
#include "../mesh/mesh.hpp"
#include "../trace/trace.hpp"
#include "collectives.hpp"

namespace xshard {

namespace detail {

class thread_mesh_state;

/// Inputs up to this many bytes are copied into the member's slot before
/// its group meets (see thread_device_core::meet).
inline constexpr std::size_t staged_collective_bytes = std::size_t(32) << 10;

/// What one member posts for a collective.
struct thread_slot {
  collective_call call{};
  const void* in = nullptr;
  void* out = nullptr;
  std::vector<std::byte> staged;  // the member's copy of a small input (grows, never shrinks)
};

/// Where the members of one group meet: double-buffered slots (a member may
/// post its next call while a slower one still reads this one's) and a
/// reusable barrier that breaks, with an xshard::error, when a member has
/// left run() without arriving.
class thread_rendezvous {
 public:
  inline thread_rendezvous(const thread_mesh_state& mesh, axis_set axes, std::vector<std::int64_t> members);

  std::int64_t size() const { return static_cast<std::int64_t>(members_.size()); }
  /// Whether every member runs on one worker thread (as its fibers): while
  /// one member runs, the others are suspended.
  bool one_thread() const { return one_thread_; }

  /// The slot rank `rank` writes for its next call (and advances its count).
  thread_slot& post(std::int64_t rank) {
    const auto r = static_cast<std::size_t>(rank);
    const std::size_t buffer = calls_[r]++ % 2;
    return slots_[buffer * members_.size() + r];
  }
  /// The slot of `rank` for the call that `me` posted last.
  const thread_slot& slot(std::int64_t me, std::int64_t rank) const {
    const std::size_t buffer = (calls_[static_cast<std::size_t>(me)] - 1) % 2;
    return slots_[buffer * members_.size() + static_cast<std::size_t>(rank)];
  }

  /// Waits until every member has arrived; true for the member whose
  /// arrival completed the group (it did not wait). Throws xshard::error if
  /// a member left run() before arriving. `kind` names the call in that
  /// message.
  inline bool arrive_and_wait(std::int64_t kind);

  /// Forgets a broken run (only while no device runs).
  void reset() {
    std::lock_guard lock(mu_);
    arrived_.store(0);
    std::fill(calls_.begin(), calls_.end(), 0);
  }
  /// Wakes the waiters so they look again at who has left.
  void wake() {
    { std::lock_guard lock(mu_); }
    cv_.notify_all();
  }

 private:
  inline bool member_left() const;
  [[noreturn]] inline void broken(std::int64_t kind) const;

  const thread_mesh_state& mesh_;
  axis_set axes_;
  std::vector<std::int64_t> members_;  // mesh positions by rank
  bool one_thread_ = false;
  std::vector<thread_slot> slots_;    // [2][members]
  std::vector<std::uint64_t> calls_;  // calls posted, per rank (touched by that rank only)
  std::mutex mu_;
  std::condition_variable cv_;
  // Arrivals are counted without the mutex; it only guards the sleep on
  // cv_ of a member with a thread of its own (sleepers_ of them).
  std::atomic<std::int64_t> arrived_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
};

/// The state the devices of one thread_mesh share: its groups' rendezvous
/// (made on first use), who has left the current run, and the poison.
class thread_mesh_state {
 public:
  thread_mesh_state(const mesh_axes& axes, std::span<const int> ids)
      : axes_(axes), ids_(ids), left_(std::make_unique<std::atomic<bool>[]>(ids.size())) {
    for (const mesh_axis& a : axes) shape_.push_back(a.size);
  }

  const mesh_axes& axes() const { return axes_; }
  std::span<const int> ids() const { return ids_; }

  /// The first position worker thread t of w runs, of n devices: thread t
  /// runs [block_start(n, w, t), block_start(n, w, t + 1)).
  static std::int64_t block_start(std::int64_t n, std::int64_t w, std::int64_t t) { return n * t / w; }
  /// The worker threads the devices run on; set before the first run.
  void set_workers(std::int64_t w) { workers_ = w; }
  bool workers_known() const { return workers_ > 0; }
  /// The worker thread that runs position p.
  std::int64_t worker_of(std::int64_t p) const {
    const auto n = static_cast<std::int64_t>(ids_.size());
    std::int64_t t = 0;
    while (t + 1 < workers_ && block_start(n, workers_, t + 1) <= p) ++t;
    return t;
  }
  std::span<const std::int64_t> shape() const { return {shape_.begin(), shape_.size()}; }

  /// The rendezvous of the group of `axes` that holds `position`.
  thread_rendezvous& rendezvous(axis_set axes, std::int64_t position) {
    const std::int64_t group = group_index(shape(), axes, position);
    std::lock_guard lock(mu_);
    std::unique_ptr<thread_rendezvous>* found = nullptr;
    for (group_entry& e : groups_)
      if (e.axes == axes && e.group == group) found = &e.rendezvous;
    if (!found) found = &groups_.emplace_back(group_entry{axes, group, nullptr}).rendezvous;
    std::unique_ptr<thread_rendezvous>& slot = *found;
    if (!slot) {
      std::vector<std::int64_t> members;
      const std::int64_t n = group_size(shape(), axes);
      for (std::int64_t r = 0; r < n; ++r) members.push_back(group_member(shape(), axes, position, r));
      slot = std::make_unique<thread_rendezvous>(*this, axes, std::move(members));
    }
    return *slot;
  }

  /// Before a run: nobody has left, nothing is poisoned, no barrier is half
  /// full. @pre no device is running.
  void begin_run() {
    std::lock_guard lock(mu_);
    for (std::size_t p = 0; p < ids_.size(); ++p) left_[p].store(false);
    poisoned_.store(false);
    poison_message_.clear();
    for (group_entry& e : groups_) e.rendezvous->reset();
  }
  /// Device `position` failed with `what`: later collectives throw. The
  /// first failure names the poison.
  void poison(std::int64_t position, std::string_view what) {
    std::lock_guard lock(mu_);
    if (poisoned_.load()) return;
    if (what.starts_with("xshard: ")) what.remove_prefix(8);
    poison_message_ = "xshard: device " + std::to_string(ids_[static_cast<std::size_t>(position)]) + " failed: ";
    poison_message_ += what;
    poisoned_.store(true);
  }
  bool poisoned() const { return poisoned_.load(); }
  /// @pre poisoned()
  const std::string& poison_message() const { return poison_message_; }
  [[noreturn]] void throw_poison() const { throw error(poison_message_); }

  /// Device `position` has returned from its body: wake every waiter.
  void leave(std::int64_t position) {
    left_[static_cast<std::size_t>(position)].store(true);
    {
      std::lock_guard lock(mu_);
      for (group_entry& e : groups_) e.rendezvous->wake();
    }
    progress_.bump();
  }
  bool left(std::int64_t position) const { return left_[static_cast<std::size_t>(position)].load(); }

  /// Bumped when a group completes or a device leaves: what a worker
  /// thread whose fibers all wait sleeps on.
  progress_signal& progress() const { return progress_; }

 private:
  const mesh_axes& axes_;
  std::span<const int> ids_;
  static_vector<std::int64_t, max_mesh_axes> shape_{};
  std::mutex mu_;  // groups_, poison_message_
  // The groups met so far, in the order first met (a list, not a std::map:
  // a run meets a few, and every including TU paid for the map).
  struct group_entry {
    axis_set axes;
    std::int64_t group;
    std::unique_ptr<thread_rendezvous> rendezvous;
  };
  std::vector<group_entry> groups_;
  std::int64_t workers_ = 0;  // 0: not known (no group is then one thread's)
  std::unique_ptr<std::atomic<bool>[]> left_;
  std::atomic<bool> poisoned_{false};
  std::string poison_message_;
  mutable progress_signal progress_;
};

inline thread_rendezvous::thread_rendezvous(const thread_mesh_state& mesh, axis_set axes,
                                            std::vector<std::int64_t> members)
    : mesh_(mesh), axes_(axes), members_(std::move(members)), slots_(2 * members_.size()), calls_(members_.size(), 0) {
  one_thread_ = mesh_.workers_known() && members_.size() > 1;
  for (std::int64_t p : members_) one_thread_ = one_thread_ && mesh_.worker_of(p) == mesh_.worker_of(members_[0]);
}

inline bool thread_rendezvous::member_left() const {
  for (std::int64_t p : members_)
    if (mesh_.left(p)) return true;
  return false;
}

inline void thread_rendezvous::broken(std::int64_t kind) const {
  if (mesh_.poisoned()) mesh_.throw_poison();
  std::int64_t gone = members_[0];
  for (std::int64_t p : members_)
    if (mesh_.left(p)) gone = p;
  throw error("xshard: " + std::string(call_name(kind)) + " over " + axis_set_text(mesh_.axes(), axes_).str() +
              ": device " + std::to_string(mesh_.ids()[static_cast<std::size_t>(gone)]) +
              " returned from its body without joining it");
}

inline bool thread_rendezvous::arrive_and_wait(std::int64_t kind) {
  // No member can advance the generation before this one has arrived.
  const std::uint64_t gen = generation_.load(std::memory_order_seq_cst);
  if (arrived_.fetch_add(1, std::memory_order_seq_cst) + 1 == size()) {
    // The last to arrive: the count is back at 0 before anyone sees the
    // new generation (and so before anyone can arrive at the next call).
    arrived_.store(0, std::memory_order_relaxed);
    generation_.store(gen + 1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard lock(mu_); }  // a sleeper is in cv_.wait or has seen the generation
      cv_.notify_all();
    }
    mesh_.progress().bump();
    return true;
  }
  const auto done = [&] { return generation_.load(std::memory_order_seq_cst) != gen; };
  if (fiber_host* host = fiber_host::current()) {
    // This device shares its thread with others (more devices than worker
    // threads): run them while the group gathers.
    host->wait_until([&] { return done() || member_left(); });
    if (done()) return false;
    broken(kind);
  }
  // Yield a while before sleeping: with a core each, the group is usually
  // complete within a few yields; with more devices than cores, a yield
  // hands the core to a member that has yet to arrive (on train_mlp's 2x2
  // mesh on 2 cores, sleeping at once made the run 1.4x slower: a futex
  // wake and a switch for every waiter at every collective).
  for (int i = 0; i < 64; ++i) {
    if (done()) return false;
    std::this_thread::yield();
  }
  std::unique_lock lock(mu_);
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  cv_.wait(lock, [&] { return done() || member_left(); });
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  if (done()) return false;
  broken(kind);
}

/// out[i] = op(acc[i], x[i]); signed integers wrap instead of overflowing.
/// out may be acc.
template <class T>
void reduce_to(T* out, const T* acc, const T* x, std::size_t n, reduce_op op) {
  switch (op) {
    case reduce_op::sum:
      if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
        using U = std::make_unsigned_t<T>;
        for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<T>(static_cast<U>(acc[i]) + static_cast<U>(x[i]));
      } else {
        add_elements(out, acc, x, n);  // floats and doubles on the CPU's widest vectors (einsum/sums.hpp)
      }
      break;
    case reduce_op::max:
      for (std::size_t i = 0; i < n; ++i) out[i] = acc[i] < x[i] ? x[i] : acc[i];
      break;
    case reduce_op::min:
      for (std::size_t i = 0; i < n; ++i) out[i] = x[i] < acc[i] ? x[i] : acc[i];
      break;
  }
}

/// acc[i] = op(acc[i], x[i]).
template <class T>
void reduce_into(T* acc, const T* x, std::size_t n, reduce_op op) {
  reduce_to(acc, acc, x, n, op);
}

/// op over the members' src(j)[0, n), in rank order, written to dst[0, n);
/// computed block by block in a scratch that stays in L1, so dst may also
/// be a source (each block is read from every source before it is written).
template <class T, class Source>
void reduce_members(std::int64_t members, Source&& src, T* dst, std::size_t n, reduce_op op) {
  constexpr std::size_t block = 16384 / sizeof(T) > 0 ? 16384 / sizeof(T) : 1;
  alignas(64) T scratch[block];
  for (std::size_t k = 0; k < n; k += block) {
    const std::size_t len = std::min(block, n - k);
    std::memcpy(scratch, src(0) + k, len * sizeof(T));
    for (std::int64_t j = 1; j < members; ++j) reduce_into(scratch, src(j) + k, len, op);
    std::memcpy(dst + k, scratch, len * sizeof(T));
  }
}

/// The devices of a thread_mesh, shape-generic: the collectives over shared memory.
class thread_device_core : public basic_device<thread_device_core> {
  friend class basic_device<thread_device_core>;

 public:
  thread_device_core(const thread_device_core&) = delete;
  thread_device_core& operator=(const thread_device_core&) = delete;

 protected:
  thread_device_core(thread_mesh_state& mesh, std::int64_t position)
      : basic_device(mesh.axes(), mesh.ids(), position),
        mesh_(&mesh),
        groups_(std::size_t{1} << mesh.axes().size(), nullptr) {}
  ~thread_device_core() = default;

 private:
  thread_rendezvous& group(axis_set axes) {
    thread_rendezvous*& g = groups_[axes];
    if (!g) g = &mesh_->rendezvous(axes, position());
    return *g;
  }

  struct met {
    thread_rendezvous& rv;
    bool staged;  // the inputs are the members' copies: no barrier after reading them
    bool last;    // this member's arrival completed the group
  };

  /// Posts this member's call, waits for the group and checks the calls:
  /// on a mismatch every member throws the same error.
  ///
  /// An input of in_bytes <= staged_collective_bytes is first copied into
  /// the member's slot, and the members read those copies. Nobody then reads
  /// a member's own buffers once it has met its group, so the collective
  /// needs no second barrier before returning: one wait per collective
  /// instead of two (on 4 devices over 2 cores each wait is a switch). The
  /// slots are double-buffered: a member rewrites this call's copy two calls
  /// later, after every member has arrived at the call between, i.e. has
  /// finished reading this one.
  met meet(axis_set axes, const group_info& g, const collective_call& c, const void* in, void* out,
           std::size_t in_bytes, std::span<const rank_pair> pairs = {}, bool may_stage = true) {
    return meet_staging(
        axes, g, c, in, out, in_bytes, [&](std::byte* to) { std::memcpy(to, in, in_bytes); }, pairs, may_stage);
  }
  /// meet, with `stage(to)` writing the in_bytes a staged input holds.
  template <class Stage>
  met meet_staging(axis_set axes, const group_info& g, const collective_call& c, const void* in, void* out,
                   std::size_t in_bytes, Stage&& stage, std::span<const rank_pair> pairs = {}, bool may_stage = true) {
    if (mesh_->poisoned()) mesh_->throw_poison();
    thread_rendezvous& rv = group(axes);
    thread_slot& mine = rv.post(g.rank);
    mine.call = c;
    mine.in = in;
    mine.out = out;
    const bool staged = may_stage && in_bytes != 0 && in_bytes <= staged_collective_bytes;
    if (staged) {
      if (mine.staged.size() < in_bytes) mine.staged.resize(in_bytes);
      stage(mine.staged.data());
      mine.in = mine.staged.data();
    }
    const bool last = rv.arrive_and_wait(c.kind);
    calls_.resize(static_cast<std::size_t>(g.size));
    for (std::int64_t r = 0; r < g.size; ++r) calls_[static_cast<std::size_t>(r)] = rv.slot(g.rank, r).call;
    const std::string msg = check_calls(calls_, axes, pairs);
    // Every member reads the same slots, so all throw (or none); the
    // double-buffered slots keep them valid until all have read them.
    if (!msg.empty()) throw error(msg);
    return {rv, staged, last};
  }

  template <class T>
  static const T* in_of(const thread_rendezvous& rv, std::int64_t me, std::int64_t rank) {
    return static_cast<const T*>(rv.slot(me, rank).in);
  }
  template <class T>
  static void copy(T* out, const T* in, std::size_t n) {
    if (n != 0 && out != in) std::memcpy(out, in, n * sizeof(T));
  }

  /// Where chunk k of n elements split over `ranks` begins (chunk `ranks`
  /// ends at n): the in-place reductions' chunk k is [chunk_bound(k),
  /// chunk_bound(k + 1)), each start a 64-byte multiple so that no two
  /// ranks write one cache line.
  template <class T>
  static std::size_t chunk_bound(std::size_t n, std::int64_t k, std::int64_t ranks) {
    if (k >= ranks) return n;
    constexpr std::size_t align = sizeof(T) >= 64 ? 1 : 64 / sizeof(T);
    return n * static_cast<std::size_t>(k) / static_cast<std::size_t>(ranks) / align * align;
  }

  /// Elements [b, b + len) of every member's buffer (each member's input
  /// and output) reduced in rank order into rank 0's buffer, element by
  /// element (it still holds rank 0's input at each element until that
  /// element is written), then copied into the others'. A block of
  /// `reduce_block_bytes` at a time, so that the copies read the sums from
  /// L1 instead of a second pass over the whole range (a layer's weight
  /// gradient is 256 KiB on train_mlp's mesh).
  static constexpr std::size_t reduce_block_bytes = 8192;
  template <class T>
  static void reduce_into_members(const thread_rendezvous& rv, const group_info& g, std::size_t b, std::size_t len,
                                  reduce_op op) {
    reduce_in_place<T>(
        g.size, [&](std::int64_t j) { return static_cast<T*>(rv.slot(g.rank, j).out) + b; }, len, op);
  }
  /// reduce_into_members on the members' buffers buffer(j)[0, len), each
  /// both an input and an output.
  template <class T, class Buffer>
  static void reduce_in_place(std::int64_t members, Buffer&& buffer, std::size_t len, reduce_op op) {
    constexpr std::size_t block = reduce_block_bytes / sizeof(T);
    for (std::size_t at = 0; at < len; at += block) {
      const std::size_t n = std::min(block, len - at);
      T* const first = buffer(0) + at;
      reduce_to(first, first, static_cast<const T*>(buffer(1) + at), n, op);
      for (std::int64_t j = 2; j < members; ++j) reduce_into(first, static_cast<const T*>(buffer(j) + at), n, op);
      for (std::int64_t j = 1; j < members; ++j) copy(buffer(j) + at, first, n);
    }
  }

  template <class T>
  void all_reduce_impl(std::span<T> data, reduce_op op, axis_set axes, group_info g, const collective_call& c) {
    if (group(axes).one_thread()) {
      // Every member is a fiber of this thread, and the others are
      // suspended while this one runs: the member whose arrival completes
      // the group reduces the members' buffers once, in rank order (the
      // staged path's sums, bit for bit), into rank 0's buffer in place,
      // and copies the result into the others' before any of them resumes.
      // No staging copies, one wait, and one reduction instead of one per
      // member.
      const met m = meet(axes, g, c, data.data(), data.data(), data.size_bytes(), {}, false);
      if (m.last) reduce_into_members<T>(m.rv, g, 0, data.size(), op);
      return;
    }
    const met m = meet(axes, g, c, data.data(), data.data(), data.size_bytes());
    thread_rendezvous& rv = m.rv;
    if (m.staged) {
      // Every member reduces the members' copies, in rank order, straight
      // into its own buffer (no source is that buffer): the same sums, bit
      // for bit, on every member.
      // (basic_device::all_reduce handles a group of one: g.size >= 2.)
      T* out = data.data();
      const std::size_t n = data.size();
      reduce_to(out, in_of<T>(rv, g.rank, 0), in_of<T>(rv, g.rank, 1), n, op);
      for (std::int64_t j = 2; j < g.size; ++j) reduce_into(out, in_of<T>(rv, g.rank, j), n, op);
      return;
    }
    // Chunk `rank` of every member's buffer, reduced and written back into
    // every member's buffer: no other member touches this chunk, so the
    // group reads and writes each buffer once, with no second pass (one
    // pass per input and one copy per other member, in rank order as in the
    // staged path).
    const std::size_t b = chunk_bound<T>(data.size(), g.rank, g.size),
                      e = chunk_bound<T>(data.size(), g.rank + 1, g.size);
    reduce_into_members<T>(rv, g, b, e - b, op);
    rv.arrive_and_wait(c.kind);  // nobody returns while a peer still writes its buffer
  }

  /// all_reduce over the concatenation of the parts (the same sizes on
  /// every member, check_calls saw to it), in the three ways all_reduce_impl
  /// has, with one rendezvous: each member's slot points at its parts.
  template <class T>
  void all_reduce_many_impl(std::span<const std::span<T>> parts, reduce_op op, axis_set axes, group_info g,
                            const collective_call& c) {
    const auto part_of = [](const thread_rendezvous& rv, std::int64_t me, std::int64_t j, std::size_t p) {
      return static_cast<const std::span<T>*>(rv.slot(me, j).out)[p].data();
    };
    if (group(axes).one_thread()) {
      const met m = meet(axes, g, c, nullptr, const_cast<std::span<T>*>(parts.data()), 0, {}, false);
      if (m.last)
        for (std::size_t p = 0; p < parts.size(); ++p)
          reduce_in_place<T>(
              g.size, [&](std::int64_t j) { return part_of(m.rv, g.rank, j, p); }, parts[p].size(), op);
      return;
    }
    std::size_t total = 0;
    for (const std::span<T>& p : parts) total += p.size();
    const met m = meet_staging(axes, g, c, nullptr, const_cast<std::span<T>*>(parts.data()), total * sizeof(T),
                               [&](std::byte* to) {
                                 for (const std::span<T>& p : parts) {
                                   if (!p.empty()) std::memcpy(to, p.data(), p.size_bytes());
                                   to += p.size_bytes();
                                 }
                               });
    thread_rendezvous& rv = m.rv;
    if (m.staged) {
      // Every member reduces the members' copies into its own parts, as
      // all_reduce_impl's staged path does.
      std::size_t at = 0;
      for (const std::span<T>& p : parts) {
        reduce_to(p.data(), in_of<T>(rv, g.rank, 0) + at, in_of<T>(rv, g.rank, 1) + at, p.size(), op);
        for (std::int64_t j = 2; j < g.size; ++j) reduce_into(p.data(), in_of<T>(rv, g.rank, j) + at, p.size(), op);
        at += p.size();
      }
      return;
    }
    // Chunk `rank` of the concatenation (64-byte multiples), part by part,
    // reduced and written back into every member's parts.
    const std::size_t b = chunk_bound<T>(total, g.rank, g.size), e = chunk_bound<T>(total, g.rank + 1, g.size);
    std::size_t start = 0;
    for (std::size_t p = 0; p < parts.size() && start < e; start += parts[p].size(), ++p) {
      const std::size_t from = std::max(b, start), to = std::min(e, start + parts[p].size());
      if (from >= to) continue;
      reduce_in_place<T>(
          g.size, [&](std::int64_t j) { return part_of(rv, g.rank, j, p) + (from - start); }, to - from, op);
    }
    rv.arrive_and_wait(c.kind);  // nobody returns while a peer still writes its parts
  }

  template <class T>
  void all_gather_impl(std::span<const T> in, std::span<T> out, axis_set axes, group_info g, const collective_call& c) {
    const met m = meet(axes, g, c, in.data(), out.data(), in.size_bytes());
    thread_rendezvous& rv = m.rv;
    for (std::int64_t j = 0; j < g.size; ++j)
      copy(out.data() + static_cast<std::size_t>(j) * in.size(), in_of<T>(rv, g.rank, j), in.size());
    if (!m.staged) rv.arrive_and_wait(c.kind);
  }

  template <class T>
  void reduce_scatter_impl(std::span<const T> in, std::span<T> out, reduce_op op, axis_set axes, group_info g,
                           const collective_call& c) {
    const met m = meet(axes, g, c, in.data(), out.data(), in.size_bytes());
    thread_rendezvous& rv = m.rv;
    const std::size_t offset = static_cast<std::size_t>(g.rank) * out.size();
    reduce_members<T>(
        g.size, [&](std::int64_t j) { return in_of<T>(rv, g.rank, j) + offset; }, out.data(), out.size(), op);
    if (!m.staged) rv.arrive_and_wait(c.kind);
  }

  template <class T>
  void all_to_all_impl(std::span<const T> in, std::span<T> out, axis_set axes, group_info g, const collective_call& c) {
    const met m = meet(axes, g, c, in.data(), out.data(), in.size_bytes());
    thread_rendezvous& rv = m.rv;
    const std::size_t chunk = in.size() / static_cast<std::size_t>(g.size);
    for (std::int64_t j = 0; j < g.size; ++j)
      copy(out.data() + static_cast<std::size_t>(j) * chunk,
           in_of<T>(rv, g.rank, j) + static_cast<std::size_t>(g.rank) * chunk, chunk);
    if (!m.staged) rv.arrive_and_wait(c.kind);
  }

  template <class T>
  void permute_impl(std::span<const T> in, std::span<T> out, std::span<const rank_pair> pairs, axis_set axes,
                    group_info g, const collective_call& c) {
    const met m = meet(axes, g, c, in.data(), out.data(), in.size_bytes(), pairs);
    thread_rendezvous& rv = m.rv;
    const rank_pair* from = nullptr;
    for (const rank_pair& p : pairs)
      if (p.second == g.rank) from = &p;
    if (from)
      copy(out.data(), in_of<T>(rv, g.rank, from->first), out.size());
    else if (!out.empty())
      std::memset(static_cast<void*>(out.data()), 0, out.size_bytes());
    if (!m.staged) rv.arrive_and_wait(c.kind);
  }

  void barrier_impl(axis_set axes, group_info g, const collective_call& c) { meet(axes, g, c, nullptr, nullptr, 0); }

  thread_mesh_state* mesh_;
  std::vector<thread_rendezvous*> groups_;  // by axis set, filled on first use
  std::vector<collective_call> calls_;      // scratch for meet()
};

/// The worker threads of a thread_mesh: `workers` threads, each running
/// job(ctx, p) for a block of consecutive device positions p (the devices
/// of the mesh's last axes share a thread). A thread with one device runs
/// it directly; a thread with several runs them as fibers, which hand the
/// thread to each other while they wait in a collective (core/fiber.hpp).
class device_threads {
 public:
  using job_fn = void (*)(void*, std::int64_t);

  device_threads(thread_mesh_state& mesh, std::int64_t n, std::int64_t workers) : mesh_(mesh), n_(n) {
    if (workers < 1 || workers > n)
      throw error("xshard: a thread_mesh of " + std::to_string(n) + " devices needs 1 to " + std::to_string(n) +
                  " worker threads, got " + std::to_string(workers));
    mesh_.set_workers(workers);
    threads_.reserve(static_cast<std::size_t>(workers));
    try {
      for (std::int64_t t = 0; t < workers; ++t)
        threads_.emplace_back([this, first = thread_mesh_state::block_start(n, workers, t),
                               last = thread_mesh_state::block_start(n, workers, t + 1)] { work(first, last); });
    } catch (...) {
      stop();
      throw;
    }
  }
  device_threads(const device_threads&) = delete;
  device_threads& operator=(const device_threads&) = delete;
  ~device_threads() { stop(); }

  /// Worker threads.
  std::int64_t workers() const { return static_cast<std::int64_t>(threads_.size()); }

  /// Runs job(ctx, p) for every device and returns when all are done;
  /// rethrows the first exception a device threw.
  void run(job_fn job, void* ctx) {
    if (current_ == this) throw error("xshard: thread_mesh::run called from inside one of its own device bodies");
    std::lock_guard call(call_mu_);  // one run at a time
    mesh_.begin_run();
    {
      std::lock_guard lock(mu_);
      job_ = job;
      ctx_ = ctx;
      done_ = 0;
      first_error_ = nullptr;
      ++generation_;
    }
    start_.notify_all();
    std::exception_ptr err;
    {
      std::unique_lock lock(mu_);
      finished_.wait(lock, [&] { return done_ == n_; });
      job_ = nullptr;
      err = std::exchange(first_error_, nullptr);
    }
    if (err) std::rethrow_exception(err);
  }

 private:
  /// What a worker thread running devices [first, last) as fibers keeps.
  struct fiber_worker {
    device_threads* self;
    std::int64_t first;
    job_fn job;
    void* ctx;
    std::vector<trace_thread_state> traces;  // each device's open scopes and trace buffer
    std::vector<workspace*> workspaces;      // each device's current workspace (workspace::scope)
  };

  /// Worker thread for devices [first, last).
  void work(std::int64_t first, std::int64_t last) {
    current_ = this;
    // A device computes on its own thread: library kernels called from its
    // body (einsum, reductions) do not fan out over the process pool.
    const scoped_thread_limit one_thread(1);
    // Trace scopes opened in a device's body are that device's (Chrome
    // trace "process" = device id); fibers switch it (enter_fiber).
    const trace_device_scope trace_device(mesh_.ids()[static_cast<std::size_t>(first)]);
    const auto count = static_cast<std::size_t>(last - first);
    std::unique_ptr<fiber_host> host;
    fiber_worker w{this,
                   first,
                   nullptr,
                   nullptr,
                   std::vector<trace_thread_state>(count > 1 ? count : 0),
                   std::vector<workspace*>(count > 1 ? count : 0)};
    if (count > 1) host = std::make_unique<fiber_host>(count);
    std::uint64_t seen = 0;
    while (true) {
      {
        std::unique_lock lock(mu_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        w.job = job_;
        w.ctx = ctx_;
      }
      if (!host) {
        run_device(w.job, w.ctx, first);
        continue;
      }
      host->run(
          count,
          [](void* c, std::size_t i) {
            auto& fw = *static_cast<fiber_worker*>(c);
            fw.self->run_device(fw.job, fw.ctx, fw.first + static_cast<std::int64_t>(i));
          },
          &w, mesh_.progress(), &enter_fiber, &w);
    }
  }
  /// Before fiber i of a worker (or the worker itself, npos) resumes.
  static void enter_fiber(void* c, std::size_t i) {
    auto& fw = *static_cast<fiber_worker*>(c);
    const std::size_t p = static_cast<std::size_t>(fw.first) + (i == fiber_host::npos ? 0 : i);
    trace_device = fw.self->mesh_.ids()[p];
    trace_fiber_state = i == fiber_host::npos ? nullptr : &fw.traces[i];
    workspace_fiber_slot = i == fiber_host::npos ? nullptr : &fw.workspaces[i];
  }
  /// Runs device p's body: its failure poisons the mesh; then it has left.
  void run_device(job_fn job, void* ctx, std::int64_t p) {
    try {
      job(ctx, p);
    } catch (...) {
      fail(p, std::current_exception());
    }
    mesh_.leave(p);
    std::lock_guard lock(mu_);
    if (++done_ == n_) finished_.notify_all();
  }
  void fail(std::int64_t p, std::exception_ptr e) {
    {
      std::lock_guard lock(mu_);
      if (!first_error_) first_error_ = e;
    }
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
    mesh_.poison(p, what);
  }
  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  thread_mesh_state& mesh_;
  std::int64_t n_;
  std::vector<std::thread> threads_;
  std::mutex call_mu_, mu_;
  std::condition_variable start_, finished_;
  job_fn job_ = nullptr;
  void* ctx_ = nullptr;
  std::uint64_t generation_ = 0;
  std::int64_t done_ = 0;
  std::exception_ptr first_error_;
  bool stop_ = false;
  static inline thread_local const device_threads* current_ = nullptr;
};

}  // namespace detail

/// A device of a thread_mesh<M>: what an SPMD body gets. Its collectives are
/// those of basic_device (collectives.hpp).
template <Mesh M>
class thread_device : public detail::thread_device_core {
 public:
  using mesh_type = M;
  /// The axis set named by `names` ("data" or "data, model"); constexpr.
  static constexpr axis_set axes(std::string_view names) { return parse_axis_set(M::axes, names); }

  thread_device(detail::thread_mesh_state& mesh, std::int64_t position) : thread_device_core(mesh, position) {}
};

/// Worker threads for a thread_mesh of `devices` devices:
/// $XSHARD_MESH_THREADS if set (a positive integer; at most `devices` are
/// used), else the hardware's thread count, at most `devices`.
inline std::int64_t default_mesh_threads(std::int64_t devices) {
  std::int64_t n = 0;
  if (const char* env = std::getenv("XSHARD_MESH_THREADS")) {
    detail::cursor c{env};
    if (!c.integer(n, max_mesh_devices) || !c.at_end() || n < 1)
      throw error(std::string("xshard: XSHARD_MESH_THREADS must be a positive integer, got \"") + env + '"');
  } else {
    const unsigned hw = std::thread::hardware_concurrency();
    n = hw ? static_cast<std::int64_t>(hw) : 1;
  }
  return std::min(n, devices);
}

/// M::size() devices on persistent worker threads; run(body) runs
/// body(device&) on all of them at once. With fewer worker threads than
/// devices (by default, the hardware's thread count), a thread runs a block
/// of consecutive devices as fibers that switch in user space while they
/// wait for their groups, not through the kernel. A device body then must
/// wait for other devices only through the mesh's collectives (a body that
/// blocks in a lock or a std::barrier held by another device of its thread
/// would wait forever).
template <Mesh M>
class thread_mesh {
 public:
  using mesh_type = M;
  using device = thread_device<M>;

  thread_mesh() : thread_mesh(default_mesh_threads(M::size())) {}
  /// `workers` worker threads, 1 to M::size() (otherwise an xshard::error).
  explicit thread_mesh(std::int64_t workers)
      : state_(M::axes, std::span<const int>(M::device_ids)), devices_(make_devices(state_)) {
    threads_ = std::make_unique<detail::device_threads>(state_, M::size(), workers);
  }
  thread_mesh(const thread_mesh&) = delete;
  thread_mesh& operator=(const thread_mesh&) = delete;
  ~thread_mesh() { threads_.reset(); }  // join the workers before the devices go

  static constexpr std::int64_t size() { return M::size(); }
  /// The axis set named by `names` ("data" or "data, model"); constexpr.
  static constexpr axis_set axes(std::string_view names) { return parse_axis_set(M::axes, names); }
  /// Worker threads the devices run on.
  std::int64_t workers() const { return threads_->workers(); }

  /// Runs body(device&) on every device concurrently; returns when all are
  /// done. If a body throws, the others' collectives fail instead of
  /// hanging, and run() rethrows the first exception after all returned.
  template <class F>
  void run(F&& body) {
    struct context {
      std::remove_reference_t<F>* body;
      std::vector<std::unique_ptr<device>>* devices;
    } ctx{&body, &devices_};
    threads_->run(
        [](void* p, std::int64_t pos) {
          auto* c = static_cast<context*>(p);
          (*c->body)(*(*c->devices)[static_cast<std::size_t>(pos)]);
        },
        &ctx);
  }

  /// The device at `position` (e.g. to read its counters between runs).
  device& at(std::int64_t position) {
    if (position < 0 || position >= size())
      throw error("xshard: device position " + std::to_string(position) + " is out of range for a mesh of " +
                  std::to_string(size()) + " devices");
    return *devices_[static_cast<std::size_t>(position)];
  }

 private:
  static std::vector<std::unique_ptr<device>> make_devices(detail::thread_mesh_state& state) {
    std::vector<std::unique_ptr<device>> d;
    for (std::int64_t p = 0; p < M::size(); ++p) d.push_back(std::make_unique<device>(state, p));
    return d;
  }

  detail::thread_mesh_state state_;
  std::vector<std::unique_ptr<device>> devices_;
  std::unique_ptr<detail::device_threads> threads_;
};

}  // namespace xshard
