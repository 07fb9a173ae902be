// xshard/checkpoint/checkpoint.hpp - training state in HDF5 files that any
// mesh can load: each tensor is one dataset of its *global* shape, each
// device writes only its own block (a hyperslab), a block held by several
// devices is written once, and a loader reads only the hyperslabs of the
// blocks its own sharding gives it. Needs <hdf5.h>: link xshard::hdf5
// (which defines XSHARD_WITH_HDF5, so xshard/xshard.hpp includes this).
//
// Example (compiled in tests/compile/doc_checkpoint.cpp):
//   devices.run([&](auto& dev) {                       // thread_mesh or mpi_mesh
//     xshard::checkpoint_writer w(dev, "run/ckpt.h5", step);
//     w.add_tuple("params", params, Block::param_names);   // plain or sharded tensors
//     w.add_optimizer("adamw", opt, Block::param_names);  // its states and step count
//     w.add_rng("rng", engine);
//     w.commit();                                      // collective; atomic
//   });
//   other_mesh.run([&](auto& dev) {                    // any mesh, any specs
//     xshard::checkpoint_reader r(dev, "run/ckpt.h5");
//     r.read_tuple("params", params, Block::param_names);   // checks names, dtypes, global shapes
//   });
//
// The file: the tensors under their names ('/' makes groups), each with
// attributes xshard_dtype, xshard_spec (the spec it was saved under),
// xshard_hlo_sharding (XLA's text) and xshard_mesh; root attributes
// xshard_format, xshard_version, xshard_step, xshard_mesh, xshard_devices;
// and /xshard_manifest (checkpoint/manifest.hpp), which the loader checks
// first and compares every dataset with. Datasets are chunked by the saving
// layout's shard shape and carry HDF5's Fletcher-32 checksum; the file uses
// HDF5's 1.10 format, whose metadata is checksummed too. So a corrupted or
// truncated file is an xshard::error (the tensor named when it is the
// tensor's data), never wrong numbers or a crash.
//
// Atomicity: commit() writes "<path>.tmp", fsyncs it, renames it over
// <path> and fsyncs the directory: a writer killed at any point leaves the
// previous checkpoint whole.
//
// Who writes what: each device writes the blocks it owns (the owner of a
// replicated block is its holder at coordinate 0 of every replicating axis,
// optim/tensors.hpp); a plain tensor is written by position 0. Every HDF5
// call of the process holds one mutex. Two ways to get the blocks into the
// file, the only difference between them being how the file is opened:
//
//  - serial HDF5 (xshard::hdf5), or a thread_mesh: the device at position 0
//    creates the file and its datasets; then the devices take turns (a
//    barrier between turns), each opening the file and writing its blocks.
//    With mpi_mesh the ranks write in turn.
//  - parallel HDF5 with an mpi_mesh (xshard::hdf5_mpi, which defines
//    XSHARD_WITH_HDF5_MPI): every rank opens the file through MPI-IO
//    (H5Pset_fapl_mpio over MPI_COMM_WORLD, collective metadata), the ranks
//    create the datasets together, and each tensor is one collective
//    H5Dwrite in which every rank selects its own block (or nothing). The
//    reader opens the file the same way and reads each tensor with one
//    collective H5Dread of every rank's hyperslabs, so read() and the
//    reader's destructor are collective there: every rank reads the same
//    tensors in the same order (an SPMD program does). A thread_mesh or no
//    mesh in such a build takes the serial way.
//
// Both write the same file: either kind of build loads the other's.
#pragma once

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>  // fsync, close

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>  // std::rename
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xtensor.hpp>

#include "../core/error.hpp"
#include "../core/text.hpp"
#include "../optim/optimizer.hpp"
#include "../optim/tensors.hpp"
#include "../sharding/sharding.hpp"
#include "../spmd/layout.hpp"
#include "../spmd/sharded.hpp"
#include "manifest.hpp"

#if defined(XSHARD_WITH_HDF5_MPI)  // set by the CMake target xshard::hdf5_mpi
#if !defined(H5_HAVE_PARALLEL)
#error "xshard: XSHARD_WITH_HDF5_MPI needs the parallel HDF5 library (link xshard::hdf5_mpi, not xshard::hdf5)"
#endif
#include "../spmd/mpi_mesh.hpp"
#endif

namespace xshard {

struct checkpoint_options {
  /// HDF5's Fletcher-32 checksum on every data chunk (verified on read).
  bool checksum = true;
};

namespace detail {

/// Every HDF5 call of the process holds this (serial HDF5 is not thread-safe).
inline std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

struct hdf5_lock {
  std::lock_guard<std::mutex> lock{hdf5_mutex()};
  hdf5_lock() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }  // errors are ours to report
};

/// HDF5's error stack as one line (its deepest two messages), cleared.
inline std::string hdf5_message() {
  std::vector<std::string> descs;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        auto* v = static_cast<std::vector<std::string>*>(data);
        if (e && e->desc && v->size() < 64) v->push_back(e->desc);
        return 0;
      },
      &descs);
  H5Eclear2(H5E_DEFAULT);
  if (descs.empty()) return "HDF5 reported no detail";
  std::string s = descs.back();
  if (descs.size() > 1) s = descs[descs.size() - 2] + ": " + s;
  return s;
}

/// An HDF5 id closed at scope end.
class h5_id {
 public:
  h5_id() = default;
  h5_id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  h5_id(h5_id&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  h5_id& operator=(h5_id&& o) noexcept {
    reset();
    id_ = std::exchange(o.id_, -1);
    close_ = o.close_;
    return *this;
  }
  ~h5_id() { reset(); }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  /// Closes now and says whether closing succeeded.
  bool close() {
    const herr_t st = id_ >= 0 && close_ ? close_(id_) : 0;
    id_ = -1;
    return st >= 0;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

inline hid_t native_type(dtype d) {
  switch (d) {
    case dtype::float32:
      return H5T_NATIVE_FLOAT;
    case dtype::float64:
      return H5T_NATIVE_DOUBLE;
    case dtype::int32:
      return H5T_NATIVE_INT32;
    case dtype::int64:
      return H5T_NATIVE_INT64;
    case dtype::uint8:
      return H5T_NATIVE_UINT8;
    case dtype::uint32:
      return H5T_NATIVE_UINT32;
    case dtype::uint64:
      return H5T_NATIVE_UINT64;
  }
  return H5T_NATIVE_UINT8;
}

/// Whether a dataset's stored type is d (class, size and sign).
inline bool stored_type_is(hid_t type, dtype d) {
  const H5T_class_t c = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  if (size != dtype_size(d)) return false;
  if (d == dtype::float32 || d == dtype::float64) return c == H5T_FLOAT;
  if (c != H5T_INTEGER) return false;
  const H5T_sign_t s = H5Tget_sign(type);
  const bool is_signed = d == dtype::int32 || d == dtype::int64;
  return s == (is_signed ? H5T_SGN_2 : H5T_SGN_NONE);
}

/// How a file is opened: by one process (the sec2 driver), or by every rank
/// of an MPI communicator together (MPI-IO, parallel HDF5 only).
struct ckpt_file_mode {
#if defined(XSHARD_WITH_HDF5_MPI)
  MPI_Comm mpi = MPI_COMM_NULL;
  bool parallel() const { return mpi != MPI_COMM_NULL; }
#else
  bool parallel() const { return false; }
#endif
};

/// The file mode of a device: MPI-IO over MPI_COMM_WORLD (whose rank is the
/// device's position) for an mpi_mesh device in a parallel-HDF5 build.
template <class Device>
ckpt_file_mode file_mode_of([[maybe_unused]] const Device& dev) {
  ckpt_file_mode m;
#if defined(XSHARD_WITH_HDF5_MPI)
  if constexpr (std::is_base_of_v<mpi_device_core, Device>) m.mpi = MPI_COMM_WORLD;
#endif
  return m;
}

/// What a checkpoint needs from the devices: where this one is, how many
/// there are, a barrier over all of them, the mesh's text and device ids,
/// and how the file is opened.
struct ckpt_comm {
  std::int64_t position = 0;
  std::int64_t size = 1;
  std::function<void()> barrier = [] {};
  std::string mesh;
  std::vector<int> devices;
  ckpt_file_mode mode;
};

template <class Device>
ckpt_comm make_comm(Device& dev) {
  using M = typename Device::mesh_type;
  ckpt_comm c;
  c.position = dev.position();
  c.size = M::size();
  c.barrier = [&dev] { dev.barrier(all_axes<M>()); };
  c.mesh = mesh_text(M::axes).str();
  c.devices.assign(M::device_ids.begin(), M::device_ids.end());
  c.mode = file_mode_of(dev);
  return c;
}

inline h5_id file_access([[maybe_unused]] ckpt_file_mode mode = {}) {
  h5_id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  // The 1.10 format: checksums on the superblock, the object headers and
  // the chunk indices (fixed arrays; 1.8's v1 B-trees have none, so a
  // changed byte there could lose a chunk silently).
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_LATEST);
#if defined(XSHARD_WITH_HDF5_MPI)
  if (mode.parallel()) {
    // Every rank opens the file; metadata is read by one rank and broadcast,
    // and written collectively (every call that touches metadata is made by
    // all ranks with the same arguments).
    H5Pset_fapl_mpio(fapl.get(), mode.mpi, MPI_INFO_NULL);
    H5Pset_all_coll_metadata_ops(fapl.get(), true);
    H5Pset_coll_metadata_write(fapl.get(), true);
  }
#endif
  return fapl;
}

/// The transfer properties of a data read or write: collective MPI-IO in
/// parallel mode (which parallel HDF5 needs to write chunks with filters),
/// the default otherwise.
inline h5_id transfer([[maybe_unused]] ckpt_file_mode mode) {
#if defined(XSHARD_WITH_HDF5_MPI)
  if (mode.parallel()) {
    h5_id dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
    H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE);
    return dxpl;
  }
#endif
  return {};
}

/// The property list id of transfer()'s result (H5P_DEFAULT when none).
inline hid_t plist_or_default(const h5_id& p) { return p.ok() ? p.get() : H5P_DEFAULT; }

/// Writes (write = true) or reads the block [start, start + count) of
/// dataset ds from or into the row-major buffer data, or takes part in a
/// collective transfer with nothing of its own (mine = false; parallel mode
/// only). A scalar dataset has empty start and count.
inline herr_t transfer_block(hid_t ds, hid_t memtype, const std::vector<hsize_t>& start,
                             const std::vector<hsize_t>& count, bool mine, bool write, void* data, hid_t dxpl) {
  h5_id fspace(H5Dget_space(ds), H5Sclose);
  h5_id mspace;
  if (!fspace.ok()) return -1;
  if (!mine) {
    const hsize_t one = 1;
    mspace = h5_id(H5Screate_simple(1, &one, nullptr), H5Sclose);
    if (!mspace.ok() || H5Sselect_none(mspace.get()) < 0 || H5Sselect_none(fspace.get()) < 0) return -1;
  } else if (count.empty()) {
    mspace = h5_id(H5Screate(H5S_SCALAR), H5Sclose);
  } else {
    if (H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0) return -1;
    mspace = h5_id(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose);
  }
  if (!mspace.ok()) return -1;
  return write ? H5Dwrite(ds, memtype, mspace.get(), fspace.get(), dxpl, data)
               : H5Dread(ds, memtype, mspace.get(), fspace.get(), dxpl, data);
}

inline void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return;  // best effort for the directory; the file was just closed by us
  ::fsync(fd);
  ::close(fd);
}

/// Whether a tensor of this global shape has any element (a scalar has one).
inline bool has_elements(const std::vector<std::int64_t>& shape) {
  return std::none_of(shape.begin(), shape.end(), [](std::int64_t n) { return n == 0; });
}

/// "None, None" for rank 2 ("" for rank 0): a plain tensor's spec.
inline std::string replicated_spec_text(std::size_t rank) {
  std::string s;
  for (std::size_t d = 0; d < rank; ++d) s += d ? ", None" : "None";
  return s;
}

/// One tensor to write.
struct ckpt_entry {
  manifest_tensor meta;
  std::string hlo;
  const void* data = nullptr;  // this device's block, row-major
  std::vector<hsize_t> start;  // of the block in the global tensor
  std::vector<hsize_t> count;  // extents of the block
  std::vector<hsize_t> chunk;  // the dataset's chunk shape (empty: contiguous)
  bool write = false;          // this device writes the block
};

inline std::vector<hsize_t> chunk_shape(const std::vector<std::int64_t>& shape, std::vector<std::int64_t> shard,
                                        std::size_t elem) {
  if (shape.empty()) return {};
  for (std::int64_t e : shape)
    if (e == 0) return {};
  std::vector<hsize_t> c;
  for (std::size_t d = 0; d < shape.size(); ++d)
    c.push_back(static_cast<hsize_t>(std::clamp<std::int64_t>(shard[d], 1, shape[d])));
  // At most 64 MiB a chunk (HDF5's limit is 4 GiB): halve the largest dim.
  auto bytes = [&] {
    hsize_t b = elem;
    for (hsize_t e : c) b *= e;
    return b;
  };
  while (bytes() > (hsize_t{64} << 20)) {
    auto it = std::max_element(c.begin(), c.end());
    *it = (*it + 1) / 2;
  }
  return c;
}

}  // namespace detail

/// Writes one checkpoint collectively: every device constructs a writer,
/// adds the same tensors in the same order, and calls commit().
class checkpoint_writer {
 public:
  /// Inside an SPMD body: `dev` is this device (thread_mesh or mpi_mesh).
  template <class Device>
  checkpoint_writer(Device& dev, std::string path, std::int64_t step, checkpoint_options options = {})
      : comm_(detail::make_comm(dev)), path_(std::move(path)), step_(step), options_(options) {
    check_step();
  }
  /// Without a mesh: one process, plain tensors.
  checkpoint_writer(std::string path, std::int64_t step, checkpoint_options options = {})
      : path_(std::move(path)), step_(step), options_(options) {
    check_step();
  }

  /// A plain or sharded tensor (not partial). The tensor must live until
  /// commit(); pass an rvalue to hand it over instead.
  template <class X>
  void add(std::string name, const X& x) {
    using D = std::remove_cvref_t<X>;
    if constexpr (Sharded<D>) {
      static_assert(D::partial_axes == 0,
                    "xshard: checkpoint: a tensor holding partial sums cannot be saved; "
                    "redistribute it first");
      using T = typename D::value_type;
      detail::ckpt_entry e;
      e.meta.name = std::move(name);
      e.meta.type = dtype_of<T>();
      e.meta.shape.assign(x.global_shape().begin(), x.global_shape().end());
      e.meta.spec = std::string(D::spec_type::text.view());
      e.hlo = std::string(hlo_sharding<typename D::mesh_type, typename D::spec_type>().view());
      const auto sl = x.slices();
      bool empty = false;
      for (std::size_t d = 0; d < D::rank; ++d) {
        e.start.push_back(static_cast<hsize_t>(sl[d].start));
        e.count.push_back(static_cast<hsize_t>(sl[d].size()));
        empty = empty || sl[d].size() == 0;
      }
      const auto padded = padded_shard_shape(D::mesh_shape, D::resolved, x.global_shape());
      e.chunk = detail::chunk_shape(e.meta.shape, {padded.begin(), padded.end()}, sizeof(T));
      e.data = x.local().data();
      e.write = !empty && detail::owns_block<D>(x.device().position);
      push(std::move(e));
    } else {
      using T = typename D::value_type;
      detail::ckpt_entry e;
      e.meta.name = std::move(name);
      e.meta.type = dtype_of<T>();
      e.meta.shape.assign(x.shape().begin(), x.shape().end());
      e.meta.spec = detail::replicated_spec_text(e.meta.shape.size());
      e.hlo = "{replicated}";
      bool empty = false;
      for (std::int64_t n : e.meta.shape) {
        e.start.push_back(0);
        e.count.push_back(static_cast<hsize_t>(n));
        empty = empty || n == 0;
      }
      e.chunk = detail::chunk_shape(e.meta.shape, e.meta.shape, sizeof(T));
      e.data = x.data();
      e.write = !empty && comm_.position == 0;
      push(std::move(e));
    }
  }
  template <class X>
  requires(!std::is_lvalue_reference_v<X>) void add(std::string name, X&& x) {
    auto held = std::make_shared<std::remove_cvref_t<X>>(std::move(x));
    add(std::move(name), static_cast<const std::remove_cvref_t<X>&>(*held));
    keep_.push_back(std::move(held));
  }

  /// Every tensor of a tuple as "<prefix>/<names[i]>".
  template <class P, std::size_t N>
  void add_tuple(std::string_view prefix, const P& p, const std::array<std::string_view, N>& names) {
    static_assert(std::tuple_size_v<P> == N, "xshard: add_tuple: one name per tensor of the tuple");
    detail::for_each_index<N>([&](auto i) { add(join(prefix, names[i.value]), std::get<i.value>(p)); });
  }
  template <class P, std::size_t N>
  requires(!std::is_lvalue_reference_v<P>) void add_tuple(std::string_view prefix, P&& p,
                                                          const std::array<std::string_view, N>& names) {
    auto held = std::make_shared<std::remove_cvref_t<P>>(std::move(p));
    add_tuple(prefix, static_cast<const std::remove_cvref_t<P>&>(*held), names);
    keep_.push_back(std::move(held));
  }

  /// An optimizer's states ("<prefix>/<state>/<names[i]>", sharded like the
  /// parameters; with ZeRO-1 one all-gather per state) and step count
  /// ("<prefix>/steps").
  template <class Rule, class P, class S, std::size_t N>
  void add_optimizer(std::string_view prefix, const optimizer<Rule, P, S>& opt,
                     const std::array<std::string_view, N>& names) {
    for (std::size_t k = 0; k < opt.state_count(); ++k) add_tuple(join(prefix, opt.state_name(k)), opt.state(k), names);
    add(join(prefix, "steps"), xt::xtensor<std::int64_t, 1>({opt.steps()}));
  }

  /// A random engine's state (its text form, as bytes).
  template <class Engine>
  void add_rng(std::string name, const Engine& engine) {
    std::ostringstream os;
    os << engine;
    const std::string s = os.str();
    xt::xtensor<std::uint8_t, 1> bytes = xt::xtensor<std::uint8_t, 1>::from_shape({s.size()});
    std::copy(s.begin(), s.end(), bytes.begin());
    add(std::move(name), std::move(bytes));
  }

  /// Writes the file (collective). Throws xshard::error on failure; the
  /// previous checkpoint at the path is then untouched.
  void commit() {
    if (committed_) throw error("xshard: checkpoint " + path_ + ": commit() was already called");
    committed_ = true;
    const std::string tmp = path_ + ".tmp";
    if (comm_.mode.parallel()) {
      // Every rank at once: the file, its datasets, then each tensor in one
      // collective write of every rank's block.
      const detail::hdf5_lock lock;
      detail::h5_id file = open_file(tmp, true);
      define(file.get());
      write_blocks(file.get());
      close_file(file, tmp);
    } else {
      // Position 0 defines the file, then the devices write in turn.
      if (comm_.position == 0) {
        const detail::hdf5_lock lock;
        detail::h5_id file = open_file(tmp, true);
        define(file.get());
        close_file(file, tmp);
      }
      comm_.barrier();
      for (std::int64_t turn = 0; turn < comm_.size; ++turn) {
        if (turn == comm_.position &&
            std::any_of(entries_.begin(), entries_.end(), [](const auto& e) { return e.write; })) {
          const detail::hdf5_lock lock;
          detail::h5_id file = open_file(tmp, false);
          write_blocks(file.get());
          close_file(file, tmp);
        }
        if (comm_.size > 1) comm_.barrier();
      }
    }
    comm_.barrier();
    if (comm_.position == 0) {
      detail::fsync_path(tmp, false);
      if (std::rename(tmp.c_str(), path_.c_str()) != 0)
        throw error("xshard: checkpoint " + path_ + ": cannot rename " + tmp + " into place");
      const std::filesystem::path dir = std::filesystem::path(path_).parent_path();
      detail::fsync_path(dir.empty() ? "." : dir.string(), true);
    }
    comm_.barrier();
  }

 private:
  static std::string join(std::string_view a, std::string_view b) { return std::string(a) + "/" + std::string(b); }
  void check_step() const {
    if (step_ < 0) throw error("xshard: checkpoint " + path_ + ": the step cannot be negative");
  }
  void push(detail::ckpt_entry e) {
    if (committed_) throw error("xshard: checkpoint " + path_ + ": add() after commit()");
    if (std::string p = tensor_entry_problem(e.meta); !p.empty()) throw error("xshard: checkpoint " + path_ + ": " + p);
    for (const detail::ckpt_entry& o : entries_) {
      const std::string& a = o.meta.name;
      const std::string& b = e.meta.name;
      if (a == b) throw error("xshard: checkpoint " + path_ + ": tensor \"" + b + "\" is added twice");
      if (b.starts_with(a + "/") || a.starts_with(b + "/"))
        throw error("xshard: checkpoint " + path_ + ": tensor \"" + a + "\" and tensor \"" + b +
                    "\": one name is a group of the other");
    }
    entries_.push_back(std::move(e));
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw error("xshard: checkpoint " + path_ + ": " + what + ": " + detail::hdf5_message());
  }

  void string_attribute(hid_t obj, const char* name, std::string_view value) const {
    detail::h5_id type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), std::max<std::size_t>(1, value.size()));
    H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
    detail::h5_id space(H5Screate(H5S_SCALAR), H5Sclose);
    detail::h5_id attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    if (!attr.ok()) fail(std::string("cannot create attribute ") + name);
    std::string v(value);
    if (v.empty()) v.push_back('\0');
    if (H5Awrite(attr.get(), type.get(), v.data()) < 0) fail(std::string("cannot write attribute ") + name);
  }
  void int_attribute(hid_t obj, const char* name, std::int64_t value) const {
    detail::h5_id space(H5Screate(H5S_SCALAR), H5Sclose);
    detail::h5_id attr(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    if (!attr.ok() || H5Awrite(attr.get(), H5T_NATIVE_INT64, &value) < 0)
      fail(std::string("cannot write attribute ") + name);
  }

  /// Creates (create = true) or opens tmp for writing, as the mode says.
  /// @pre the HDF5 lock is held.
  detail::h5_id open_file(const std::string& tmp, bool create) const {
    const detail::h5_id fapl = detail::file_access(comm_.mode);
    detail::h5_id file(create ? H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get())
                              : H5Fopen(tmp.c_str(), H5F_ACC_RDWR, fapl.get()),
                       H5Fclose);
    if (!file.ok()) fail(create ? "cannot create " + tmp : "cannot open " + tmp + " to write");
    return file;
  }
  /// Flushes and closes the file (collective in parallel mode).
  void close_file(detail::h5_id& file, const std::string& tmp) const {
    if (H5Fflush(file.get(), H5F_SCOPE_LOCAL) < 0) fail("cannot flush " + tmp);
    if (!file.close()) fail("cannot close " + tmp);
  }

  /// The attributes, the manifest and every tensor's (empty) dataset.
  void define(hid_t file) {
    checkpoint_manifest m;
    m.step = step_;
    m.mesh = comm_.mesh;
    m.devices = comm_.devices;
    for (const detail::ckpt_entry& e : entries_) m.tensors.push_back(e.meta);
    const std::string manifest = print_manifest(m);
    std::string devices;
    for (std::size_t i = 0; i < comm_.devices.size(); ++i) devices += (i ? "," : "") + std::to_string(comm_.devices[i]);

    string_attribute(file, "xshard_format", "xshard-checkpoint " + std::to_string(checkpoint_format));
    string_attribute(file, "xshard_version", library_version);
    int_attribute(file, "xshard_step", step_);
    string_attribute(file, "xshard_mesh", comm_.mesh);
    string_attribute(file, "xshard_devices", devices);
    {
      const hsize_t n = manifest.size();
      detail::h5_id space(H5Screate_simple(1, &n, nullptr), H5Sclose);
      detail::h5_id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      H5Pset_chunk(dcpl.get(), 1, &n);
      H5Pset_fletcher32(dcpl.get());
      detail::h5_id ds(
          H5Dcreate2(file, "xshard_manifest", H5T_STD_U8LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
          H5Dclose);
      // Written by position 0 (in parallel mode the others take part with nothing).
      const detail::h5_id dxpl = detail::transfer(comm_.mode);
      if (!ds.ok() || detail::transfer_block(ds.get(), H5T_NATIVE_UINT8, {0}, {n}, comm_.position == 0, true,
                                             const_cast<char*>(manifest.data()), detail::plist_or_default(dxpl)) < 0)
        fail("cannot write the manifest");
    }
    detail::h5_id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    H5Pset_create_intermediate_group(lcpl.get(), 1);
    for (const detail::ckpt_entry& e : entries_) {
      std::vector<hsize_t> dims(e.meta.shape.begin(), e.meta.shape.end());
      detail::h5_id space(
          dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
          H5Sclose);
      detail::h5_id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
      if (!e.chunk.empty()) {
        H5Pset_chunk(dcpl.get(), static_cast<int>(e.chunk.size()), e.chunk.data());
        if (options_.checksum) H5Pset_fletcher32(dcpl.get());
      }
      // Stored little-endian, as the native types on this library's targets.
      hid_t stored = H5T_IEEE_F32LE;
      switch (e.meta.type) {
        case dtype::float32:
          stored = H5T_IEEE_F32LE;
          break;
        case dtype::float64:
          stored = H5T_IEEE_F64LE;
          break;
        case dtype::int32:
          stored = H5T_STD_I32LE;
          break;
        case dtype::int64:
          stored = H5T_STD_I64LE;
          break;
        case dtype::uint8:
          stored = H5T_STD_U8LE;
          break;
        case dtype::uint32:
          stored = H5T_STD_U32LE;
          break;
        case dtype::uint64:
          stored = H5T_STD_U64LE;
          break;
      }
      detail::h5_id ds(H5Dcreate2(file, e.meta.name.c_str(), stored, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
                       H5Dclose);
      if (!ds.ok()) fail("cannot create the dataset of tensor \"" + e.meta.name + "\"");
      string_attribute(ds.get(), "xshard_dtype", dtype_name(e.meta.type));
      string_attribute(ds.get(), "xshard_spec", e.meta.spec);
      string_attribute(ds.get(), "xshard_hlo_sharding", e.hlo);
      string_attribute(ds.get(), "xshard_mesh", comm_.mesh);
    }
  }

  /// This device's blocks: in parallel mode one collective write per tensor
  /// (every rank takes part, with its block or nothing), else its own only.
  void write_blocks(hid_t file) {
    const bool parallel = comm_.mode.parallel();
    const detail::h5_id dxpl = detail::transfer(comm_.mode);
    for (const detail::ckpt_entry& e : entries_) {
      if (!(parallel ? detail::has_elements(e.meta.shape) : e.write)) continue;  // the former is the same on every rank
      detail::h5_id ds(H5Dopen2(file, e.meta.name.c_str(), H5P_DEFAULT), H5Dclose);
      if (!ds.ok()) fail("tensor \"" + e.meta.name + "\" has no dataset (did every device add the same tensors?)");
      if (detail::transfer_block(ds.get(), detail::native_type(e.meta.type), e.start, e.count, e.write, true,
                                 const_cast<void*>(e.data), detail::plist_or_default(dxpl)) < 0)
        fail("cannot write the block of tensor \"" + e.meta.name + "\"");
    }
  }

  detail::ckpt_comm comm_;
  std::string path_;
  std::int64_t step_ = 0;
  checkpoint_options options_;
  std::vector<detail::ckpt_entry> entries_;
  std::vector<std::shared_ptr<void>> keep_;
  bool committed_ = false;
};

/// Reads a checkpoint onto any mesh: each device reads the hyperslabs of its
/// own blocks. Opening checks the manifest; read() checks the tensor's
/// name, dtype and global shape against the model's tensor. With an
/// mpi_mesh device in a parallel-HDF5 build, construction, read() and
/// destruction are collective over the ranks (see the top of this file).
class checkpoint_reader {
 public:
  template <class Device>
  checkpoint_reader(Device& dev, std::string path) : path_(std::move(path)), mode_(detail::file_mode_of(dev)) {
    open();
  }
  explicit checkpoint_reader(std::string path) : path_(std::move(path)) { open(); }
  checkpoint_reader(const checkpoint_reader&) = delete;
  checkpoint_reader& operator=(const checkpoint_reader&) = delete;
  ~checkpoint_reader() {
    const detail::hdf5_lock lock;
    file_.reset();
  }

  const checkpoint_manifest& manifest() const { return manifest_; }
  std::int64_t step() const { return manifest_.step; }
  bool contains(std::string_view name) const { return manifest_.find(name) != nullptr; }

  /// Fills x (plain, or this device's block of a sharded tensor) with
  /// tensor `name`; x's global shape and element type must be the file's.
  template <class X>
  void read(std::string_view name, X& x) const {
    using D = std::remove_cvref_t<X>;
    using T = typename D::value_type;
    std::vector<std::int64_t> want;
    if constexpr (Sharded<D>) {
      static_assert(D::partial_axes == 0, "xshard: checkpoint: cannot load into a tensor of partial sums");
      want.assign(x.global_shape().begin(), x.global_shape().end());
    } else {
      want.assign(x.shape().begin(), x.shape().end());
    }
    const manifest_tensor& t = entry(name, dtype_of<T>(), want);
    std::vector<hsize_t> start, count;
    T* out = nullptr;
    if constexpr (Sharded<D>) {
      const auto sl = x.slices();
      for (std::size_t d = 0; d < D::rank; ++d) {
        start.push_back(static_cast<hsize_t>(sl[d].start));
        count.push_back(static_cast<hsize_t>(sl[d].size()));
      }
      out = x.local().data();
    } else {
      for (std::int64_t n : want) {
        start.push_back(0);
        count.push_back(static_cast<hsize_t>(n));
      }
      out = x.data();
    }
    read_block(t, start, count, out);
  }

  /// Every tensor of a tuple from "<prefix>/<names[i]>".
  template <class P, std::size_t N>
  void read_tuple(std::string_view prefix, P& p, const std::array<std::string_view, N>& names) const {
    static_assert(std::tuple_size_v<P> == N, "xshard: read_tuple: one name per tensor of the tuple");
    detail::for_each_index<N>([&](auto i) { read(join(prefix, names[i.value]), std::get<i.value>(p)); });
  }

  /// An optimizer's states and step count, saved by add_optimizer; `like`
  /// gives the parameters' tensors (their shapes and this device's blocks).
  template <class Rule, class P, class S, std::size_t N>
  void read_optimizer(std::string_view prefix, optimizer<Rule, P, S>& opt, const P& like,
                      const std::array<std::string_view, N>& names) const {
    for (std::size_t k = 0; k < opt.state_count(); ++k) {
      P s = like;
      read_tuple(join(prefix, opt.state_name(k)), s, names);
      opt.set_state(k, s);
    }
    xt::xtensor<std::int64_t, 1> steps = xt::xtensor<std::int64_t, 1>::from_shape({1});
    read(join(prefix, "steps"), steps);
    opt.set_steps(steps(0));
  }

  /// A random engine's state saved by add_rng.
  template <class Engine>
  void read_rng(std::string_view name, Engine& engine) const {
    const manifest_tensor* t = manifest_.find(name);
    if (!t) missing(name);
    xt::xtensor<std::uint8_t, 1> bytes =
        xt::xtensor<std::uint8_t, 1>::from_shape({static_cast<std::size_t>(t->shape.size() == 1 ? t->shape[0] : 0)});
    read(name, bytes);
    std::istringstream is(std::string(bytes.begin(), bytes.end()));
    Engine e;
    is >> e;
    if (is.fail())
      throw error("xshard: checkpoint " + path_ + ": tensor \"" + std::string(name) +
                  "\" is not the state of this random engine");
    engine = e;
  }

 private:
  static std::string join(std::string_view a, std::string_view b) { return std::string(a) + "/" + std::string(b); }

  [[noreturn]] void fail(const std::string& what) const {
    throw error("xshard: checkpoint " + path_ + ": " + what + ": " + detail::hdf5_message());
  }
  [[noreturn]] void missing(std::string_view name) const {
    std::string have;
    for (std::size_t i = 0; i < manifest_.tensors.size() && i < 8; ++i)
      have += (i ? ", " : "") + manifest_.tensors[i].name;
    if (manifest_.tensors.size() > 8) have += ", ...";
    throw error("xshard: checkpoint " + path_ + ": tensor \"" + std::string(name) +
                "\" is not in the checkpoint (it holds " + (have.empty() ? std::string("no tensors") : have) + ")");
  }

  const manifest_tensor& entry(std::string_view name, dtype type, const std::vector<std::int64_t>& shape) const {
    const manifest_tensor* t = manifest_.find(name);
    if (!t) missing(name);
    const std::string head = "xshard: checkpoint " + path_ + ": tensor \"" + std::string(name) + "\" ";
    if (t->type != type)
      throw error(head + "is " + std::string(dtype_name(t->type)) + " in the checkpoint, the model's is " +
                  std::string(dtype_name(type)));
    if (t->shape != shape)
      throw error(head + "has global shape " + detail::shape_text(t->shape) + " in the checkpoint, the model's is " +
                  detail::shape_text(shape));
    return *t;
  }

  void open() {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path_, ec)) throw error("xshard: checkpoint " + path_ + ": no such file");
    std::string text;
    {
      const detail::hdf5_lock lock;
      const detail::h5_id fapl = detail::file_access(mode_);
      file_ = detail::h5_id(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
      if (!file_.ok()) fail("not a readable HDF5 file");
      if (H5Lexists(file_.get(), "xshard_manifest", H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        throw error("xshard: checkpoint " + path_ + ": no xshard_manifest (not an xshard checkpoint)");
      }
      detail::h5_id ds(H5Dopen2(file_.get(), "xshard_manifest", H5P_DEFAULT), H5Dclose);
      if (!ds.ok()) fail("cannot open the manifest");
      detail::h5_id space(H5Dget_space(ds.get()), H5Sclose);
      detail::h5_id type(H5Dget_type(ds.get()), H5Tclose);
      hsize_t n = 0;
      if (!space.ok() || !type.ok() || H5Sget_simple_extent_ndims(space.get()) != 1 ||
          !detail::stored_type_is(type.get(), dtype::uint8) ||
          H5Sget_simple_extent_dims(space.get(), &n, nullptr) != 1 || n > (hsize_t{64} << 20)) {
        H5Eclear2(H5E_DEFAULT);
        throw error("xshard: checkpoint " + path_ + ": the manifest is not a 1-D byte array of at most 64 MiB");
      }
      text.resize(static_cast<std::size_t>(n));
      const detail::h5_id dxpl = detail::transfer(mode_);
      if (n && detail::transfer_block(ds.get(), H5T_NATIVE_UINT8, {0}, {n}, true, false, text.data(),
                                      detail::plist_or_default(dxpl)) < 0)
        fail("cannot read the manifest");
    }
    manifest_ = parse_manifest(text, "checkpoint " + path_);
  }

  template <class T>
  void read_block(const manifest_tensor& t, const std::vector<hsize_t>& start, const std::vector<hsize_t>& count,
                  T* out) const {
    const detail::hdf5_lock lock;
    const std::string head = "tensor \"" + t.name + "\"";
    detail::h5_id ds(H5Dopen2(file_.get(), t.name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!ds.ok()) fail(head + " is in the manifest but its dataset cannot be opened (the file is corrupt)");
    detail::h5_id fspace(H5Dget_space(ds.get()), H5Sclose);
    detail::h5_id type(H5Dget_type(ds.get()), H5Tclose);
    if (!fspace.ok() || !type.ok()) fail(head + ": cannot read its dataspace");
    const int rank = H5Sget_simple_extent_ndims(fspace.get());
    std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
    if (rank < 0 || static_cast<std::size_t>(rank) != t.shape.size() ||
        H5Sget_simple_extent_dims(fspace.get(), dims.data(), nullptr) != rank ||
        !std::equal(dims.begin(), dims.end(), t.shape.begin(),
                    [](hsize_t a, std::int64_t b) { return a == static_cast<hsize_t>(b); }))
      throw error("xshard: checkpoint " + path_ + ": " + head +
                  ": the dataset's shape differs from the manifest's (the file is corrupt)");
    if (!detail::stored_type_is(type.get(), t.type))
      throw error("xshard: checkpoint " + path_ + ": " + head + ": the dataset's type is not the manifest's " +
                  std::string(dtype_name(t.type)) + " (the file is corrupt)");
    hsize_t elements = 1;
    for (hsize_t c : count) elements *= c;
    // In parallel mode every rank takes part in the collective read of a
    // tensor that has elements, with its block or with nothing.
    if (elements == 0 && !(mode_.parallel() && detail::has_elements(t.shape))) return;
    const detail::h5_id dxpl = detail::transfer(mode_);
    if (detail::transfer_block(ds.get(), detail::native_type(t.type), start, count, elements > 0, false, out,
                               detail::plist_or_default(dxpl)) < 0)
      fail(head + ": reading its block failed");
  }

  std::string path_;
  detail::ckpt_file_mode mode_;
  detail::h5_id file_;
  checkpoint_manifest manifest_;
};

}  // namespace xshard
