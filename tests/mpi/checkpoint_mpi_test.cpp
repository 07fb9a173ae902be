// Checkpoints under mpi_mesh through parallel HDF5 (xshard::hdf5_mpi), run
// under mpiexec (tests/CMakeLists.txt registers it; the runs share DIR):
//
//   checkpoint_mpi_test save DIR    4 ranks. Saves on the 2x2 data x model
//                                   mpi_mesh (DIR/mpi.h5; every rank writes its
//                                   own blocks through MPI-IO) and rank 0 saves
//                                   on a 2x2 thread_mesh (DIR/thread.h5); both
//                                   load onto the MPI 2x2 mesh under other specs
//                                   and onto the MPI 4x1 mesh, and rank 0 loads
//                                   the MPI one onto thread meshes and without a
//                                   mesh. An incompatible model is an
//                                   xshard::error naming the tensor on every
//                                   rank. AdamW: 2N steps equal N steps, save,
//                                   fresh meshes and optimizer, load, N steps,
//                                   bit for bit. Saves DIR/checkpoint_interop.h5
//                                   and .txt for tests/checkpoint_h5py.py (h5py,
//                                   a serial HDF5, reads what MPI-IO wrote).
//   checkpoint_mpi_test load1 DIR   1 rank: both files onto a one-device mesh.
//   checkpoint_mpi_test serial FILE 4 ranks: the file runtime/checkpoint_test's
//                                   CheckpointInterop.WriteForH5py wrote with
//                                   the serial HDF5 library, onto 2x2 and 4x1.
//   checkpoint_mpi_test load8 DIR   8 ranks: both files onto 2x4 and 8x1 (with
//                                   empty blocks); saves on 8x1 and loads that
//                                   onto 2x4, and rank 0 onto a thread mesh.
//
// Every loaded block is compared element by element with the slice of the
// global tensor the test built (no collective involved); the tensors are
// filled with a sentinel first, so an element the loader skips shows. Each
// rank prints its failures; an MPI reduction of the counts is the exit code.
#include <mpi.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>
#include <xshard/checkpoint/checkpoint.hpp>
#include <xshard/optim/optimizer.hpp>
#include <xshard/spmd/mpi_mesh.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xtensor/xtensor.hpp>

namespace {

namespace fs = std::filesystem;
using xshard::spec;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

long failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "FAIL rank %d: %s\n", world_rank(), what.c_str());
  ++failures;
}

/// The saved tensors: uneven extents, three dtypes, a stacked rank-3 one
/// (the layers of a scan, stacked along dimension 0).
struct globals {
  xt::xtensor<float, 2> a;
  xt::xtensor<std::int64_t, 1> b;
  xt::xtensor<double, 3> c;
};

globals make_globals(int k) {
  globals g;
  g.a = xt::xtensor<float, 2>::from_shape({7, 5});
  g.b = xt::xtensor<std::int64_t, 1>::from_shape({9});
  g.c = xt::xtensor<double, 3>::from_shape({3, 6, 5});
  for (std::size_t i = 0; i < g.a.size(); ++i) g.a.data()[i] = static_cast<float>(std::sin(0.3 * i + k)) * 7.0f;
  for (std::size_t i = 0; i < g.b.size(); ++i) g.b.data()[i] = static_cast<std::int64_t>(i * 1000003) - 4 + k;
  for (std::size_t i = 0; i < g.c.size(); ++i) g.c.data()[i] = std::cos(0.01 * i) * 1e-3 + k;
  return g;
}

/// Whether x's local block equals its slice of `global`, element by element.
template <class G, class X>
bool block_equals(const G& global, const X& x) {
  const auto sl = x.slices();
  const auto& local = x.local();
  const std::size_t rank = global.dimension();
  for (std::size_t d = 0; d < rank; ++d)
    if (local.shape()[d] != static_cast<std::size_t>(sl[d].size())) return false;
  for (std::size_t i = 0; i < local.size(); ++i) {
    std::size_t rest = i, offset = 0, stride = 1;
    for (std::size_t d = rank; d-- > 0;) {
      const std::size_t li = rest % local.shape()[d];
      rest /= local.shape()[d];
      offset += (static_cast<std::size_t>(sl[d].start) + li) * stride;
      stride *= global.shape()[d];
    }
    if (!(local.data()[i] == global.data()[offset])) return false;
  }
  return true;
}

/// A layout: mesh M and one spec per tensor; runs on an mpi_mesh or a
/// thread_mesh of M.
template <class M, class SA, class SB, class SC>
struct layout {
  using mesh_type = M;
  static std::string name() {
    return std::string(xshard::mesh_text(M::axes).view()) + " (" + std::string(SA::text.view()) + " | " +
           std::string(SB::text.view()) + " | " + std::string(SC::text.view()) + ")";
  }
  template <class Mesh>
  static void save(Mesh& mesh, const std::string& path, const globals& g, std::int64_t step) {
    mesh.run([&](auto& dev) {
      xshard::checkpoint_writer w(dev, path, step);
      w.add("model/a", xshard::distribute<SA>(dev, g.a));
      w.add("model/b", xshard::distribute<SB>(dev, g.b));
      w.add("stack/c", xshard::distribute<SC>(dev, g.c));
      w.commit();
    });
  }
  /// Loads and compares every block with g; `what` names the case.
  template <class Mesh>
  static void load(Mesh& mesh, const std::string& path, const globals& g, std::int64_t step, const std::string& what) {
    mesh.run([&](auto& dev) {
      auto a = xshard::distribute<SA>(dev, xt::xtensor<float, 2>(xt::full_like(g.a, -99.0f)));
      auto b = xshard::distribute<SB>(dev, xt::xtensor<std::int64_t, 1>(xt::full_like(g.b, -99)));
      auto c = xshard::distribute<SC>(dev, xt::xtensor<double, 3>(xt::full_like(g.c, -99.0)));
      xshard::checkpoint_reader r(dev, path);
      r.read("model/a", a);
      r.read("model/b", b);
      r.read("stack/c", c);
      const std::string at = what + " -> " + name() + ", device " + std::to_string(dev.id());
      expect(block_equals(g.a, a), at + ": model/a differs");
      expect(block_equals(g.b, b), at + ": model/b differs");
      expect(block_equals(g.c, c), at + ": stack/c differs");
      expect(r.step() == step, at + ": step " + std::to_string(r.step()));
    });
  }
};

using M2x2 = xshard::mesh<"data=2, model=2">;
using L2x2 = layout<M2x2, spec<"data, model">, spec<"model">, spec<"None, model, data">>;
using L2x2other = layout<M2x2, spec<"model, data">, spec<"(data, model)">, spec<"None, None, (model, data)">>;
using L2x2custom = layout<xshard::mesh<"data=2, model=2", 3, 1, 2, 0>, spec<"(data, model), None">,
                          spec<"(model, data)">, spec<"model, data, None">>;
using L4x1 = layout<xshard::mesh<"data=4, model=1">, spec<"data, None">, spec<"None">, spec<"None, data, None">>;
using L1 = layout<xshard::mesh<"data=1, model=1">, spec<"data, model">, spec<"model">, spec<"None, model, data">>;
using L2x4 = layout<xshard::mesh<"data=2, model=4">, spec<"model, data">, spec<"model">, spec<"None, model, data">>;
using L8x1 = layout<xshard::mesh<"data=8, model=1">, spec<"data, None">, spec<"data">, spec<"None, None, data">>;

/// Loads path onto the MPI meshes of the layouts Ls (M::size() == the world).
template <class... Ls>
void load_on_mpi(const std::string& path, const globals& g, std::int64_t step, const std::string& what) {
  (
      [&] {
        xshard::mpi_mesh<typename Ls::mesh_type> mesh;
        Ls::load(mesh, path, g, step, what);
      }(),
      ...);
}

/// Without a mesh: plain tensors, one process.
void load_plain(const std::string& path, const globals& g, std::int64_t step, const std::string& what) {
  globals got{xt::full_like(g.a, -99.0f), xt::full_like(g.b, -99), xt::full_like(g.c, -99.0)};
  xshard::checkpoint_reader r(path);
  r.read("model/a", got.a);
  r.read("model/b", got.b);
  r.read("stack/c", got.c);
  expect(got.a == g.a && got.b == g.b && got.c == g.c && r.step() == step, what + " -> no mesh: differs");
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const xshard::error& e) {
    return e.what();
  }
  return "no error";
}

// ---------------------------------------------------------------------------
// Exact resume (AdamW with clipping, the RNG in the checkpoint).

using P =
    std::tuple<xshard::sharded<double, 2, M2x2, spec<"model, None">>, xshard::sharded<double, 1, M2x2, spec<"None">>>;
using Gp = std::tuple<xshard::sharded<double, 2, M2x2, spec<"model, None">, 1>,
                      xshard::sharded<double, 1, M2x2, spec<"None">, 1>>;
constexpr std::array<std::string_view, 2> names{"w", "b"};

template <class Dev>
P init_params(Dev& dev) {
  xt::xtensor<double, 2> w = xt::xtensor<double, 2>::from_shape({5, 3});
  xt::xtensor<double, 1> b = xt::xtensor<double, 1>::from_shape({3});
  for (std::size_t i = 0; i < w.size(); ++i) w.data()[i] = std::sin(1.0 + i);
  for (std::size_t i = 0; i < b.size(); ++i) b.data()[i] = std::cos(2.0 + i);
  return {xshard::distribute<spec<"model, None">>(dev, w), xshard::distribute<spec<"None">>(dev, b)};
}

/// This device's gradient part: depends on the parameters, the step and a
/// random draw (so the RNG state matters), partial over data.
template <class Dev>
Gp gradient(Dev& dev, const P& p, int step, std::mt19937_64& rng) {
  const double noise = static_cast<double>(rng() % 1000) / 1000.0;
  const double c = static_cast<double>(dev.coord(0)) + 1;
  auto w = std::get<0>(p).local();
  auto b = std::get<1>(p).local();
  w = xt::sin(w) * c + 0.01 * step + noise;
  b = b * b * c - noise;
  return {xshard::from_local<spec<"model, None">, 1>(dev, std::get<0>(p).global_shape(), w),
          xshard::from_local<spec<"None">, 1>(dev, std::get<1>(p).global_shape(), b)};
}

/// `steps` AdamW steps on a fresh MPI 2x2 mesh, after loading `load` (if
/// given) and before saving `save` (if given); the gathered parameters.
std::pair<xt::xtensor<double, 2>, xt::xtensor<double, 1>> train(int steps, const std::string& load,
                                                                const std::string& save) {
  xshard::mpi_mesh<M2x2> mesh;
  std::pair<xt::xtensor<double, 2>, xt::xtensor<double, 1>> out;
  mesh.run([&](auto& dev) {
    P p = init_params(dev);
    xshard::optimizer<xshard::adamw, P> opt({.lr = 0.02, .weight_decay = 0.05}, p, {.max_grad_norm = 2.0});
    std::mt19937_64 rng(5);
    int step = 0;
    if (!load.empty()) {
      xshard::checkpoint_reader r(dev, load);
      r.read_tuple("params", p, names);
      r.read_optimizer("adamw", opt, p, names);
      r.read_rng("rng", rng);
      step = static_cast<int>(r.step());
    }
    for (int s = 0; s < steps; ++s, ++step) opt.step(p, gradient(dev, p, step, rng));
    if (!save.empty()) {
      xshard::checkpoint_writer w(dev, save, step);
      w.add_tuple("params", p, names);
      w.add_optimizer("adamw", opt, names);
      w.add_rng("rng", rng);
      w.commit();
    }
    out = {xshard::gather(std::get<0>(p)), xshard::gather(std::get<1>(p))};
  });
  return out;
}

// ---------------------------------------------------------------------------

void save_4(const fs::path& dir) {
  const globals g = make_globals(1);
  const std::string mpi = (dir / "mpi.h5").string(), thread = (dir / "thread.h5").string();
  {
    xshard::mpi_mesh<M2x2> mesh;
    L2x2::save(mesh, mpi, g, 42);
  }
  if (world_rank() == 0) {
    xshard::thread_mesh<M2x2> mesh;
    L2x2::save(mesh, thread, g, 42);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  load_on_mpi<L2x2, L2x2other, L4x1>(mpi, g, 42, "MPI 2x2");
  load_on_mpi<L2x2, L2x2other, L4x1>(thread, g, 42, "threads 2x2");
  if (world_rank() == 0) {
    xshard::thread_mesh<M2x2> m2x2;
    L2x2other::load(m2x2, mpi, g, 42, "MPI 2x2 (on threads)");
    xshard::thread_mesh<L4x1::mesh_type> m4x1;
    L4x1::load(m4x1, mpi, g, 42, "MPI 2x2 (on threads)");
    load_plain(mpi, g, 42, "MPI 2x2");
  }

  // An incompatible model: the same error on every rank, naming the tensor
  // (thrown before any collective read, so no rank is left waiting).
  {
    xshard::mpi_mesh<M2x2> mesh;
    mesh.run([&](auto& dev) {
      xshard::checkpoint_reader r(dev, mpi);
      auto wrong_shape = xshard::distribute<spec<"data, model">>(dev, xt::xtensor<float, 2>(xt::zeros<float>({7, 4})));
      expect(error_of([&] { r.read("model/a", wrong_shape); }) ==
                 "xshard: checkpoint " + mpi +
                     ": tensor \"model/a\" has global shape [7,5] in the checkpoint, the model's is [7,4]",
             "wrong shape: " + error_of([&] { r.read("model/a", wrong_shape); }));
      auto wrong_type = xshard::distribute<spec<"model">>(dev, xt::xtensor<double, 1>(xt::zeros<double>({9})));
      expect(
          error_of([&] { r.read("model/b", wrong_type); }) ==
              "xshard: checkpoint " + mpi + ": tensor \"model/b\" is int64 in the checkpoint, the model's is float64",
          "wrong type: " + error_of([&] { r.read("model/b", wrong_type); }));
      expect(error_of([&] { r.read("model/missing", wrong_type); })
                     .find("tensor \"model/missing\" is not in the "
                           "checkpoint") != std::string::npos,
             "missing: " + error_of([&] { r.read("model/missing", wrong_type); }));
      // The reader still works after those errors.
      auto c = xshard::distribute<spec<"None, data, model">>(dev, xt::xtensor<double, 3>(xt::full_like(g.c, -99.0)));
      r.read("stack/c", c);
      expect(block_equals(g.c, c), "stack/c after the errors");
    });
  }

  // Exact resume under MPI.
  const std::string ck = (dir / "resume.h5").string();
  const auto whole = train(8, "", "");
  train(4, "", ck);
  const auto resumed = train(4, ck, "");
  expect(whole.first == resumed.first && whole.second == resumed.second, "resume: 4 + 4 steps differ from 8");
  expect(!(whole.first == train(7, "", "").first), "resume: 7 steps equal 8 (the test cannot tell)");

  // For tests/checkpoint_h5py.py: what CheckpointInterop.WriteForH5py
  // writes with threads and serial HDF5, written here by MPI-IO.
  const globals g4 = make_globals(4);
  {
    xshard::mpi_mesh<L2x2custom::mesh_type> mesh;
    L2x2custom::save(mesh, (dir / "checkpoint_interop.h5").string(), g4, 17);
  }
  if (world_rank() == 0) {
    std::ofstream out(dir / "checkpoint_interop.txt");
    out.precision(17);
    auto put = [&](const char* name, const char* type, const auto& t) {
      out << name << ' ' << type << ' ';
      for (std::size_t d = 0; d < t.dimension(); ++d) out << (d ? "," : "") << t.shape()[d];
      for (std::size_t i = 0; i < t.size(); ++i) out << ' ' << +t.data()[i];
      out << '\n';
    };
    put("model/a", "float32", g4.a);
    put("model/b", "int64", g4.b);
    put("stack/c", "float64", g4.c);
    expect(out.good(), "cannot write checkpoint_interop.txt");
  }
}

/// The serial library's file (CheckpointInterop.WriteForH5py: make_globals(4), step 17).
void load_serial(const std::string& file) {
  const globals g = make_globals(4);
  load_on_mpi<L2x2, L2x2custom, L4x1>(file, g, 17, "serial HDF5, threads 2x2");
}

void load_1(const fs::path& dir) {
  const globals g = make_globals(1);
  load_on_mpi<L1>((dir / "mpi.h5").string(), g, 42, "MPI 2x2");
  load_on_mpi<L1>((dir / "thread.h5").string(), g, 42, "threads 2x2");
}

void load_8(const fs::path& dir) {
  const globals g = make_globals(1);
  load_on_mpi<L2x4, L8x1>((dir / "mpi.h5").string(), g, 42, "MPI 2x2");
  load_on_mpi<L2x4, L8x1>((dir / "thread.h5").string(), g, 42, "threads 2x2");
  // Saved by 8 ranks, some of them with empty blocks.
  const globals g2 = make_globals(2);
  const std::string mpi8 = (dir / "mpi8.h5").string();
  {
    xshard::mpi_mesh<L8x1::mesh_type> mesh;
    L8x1::save(mesh, mpi8, g2, 7);
  }
  load_on_mpi<L2x4, L8x1>(mpi8, g2, 7, "MPI 8x1");
  if (world_rank() == 0) {
    xshard::thread_mesh<M2x2> m2x2;
    L2x2::load(m2x2, mpi8, g2, 7, "MPI 8x1 (on threads)");
    load_plain(mpi8, g2, 7, "MPI 8x1");
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::string what = argc > 2 ? argv[1] : "";
  const fs::path dir = argc > 2 ? argv[2] : "";
  if (world_rank() == 0 && !dir.empty() && what != "serial") fs::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  if (what == "save") {
    save_4(dir);
  } else if (what == "serial") {
    load_serial(argv[2]);
  } else if (what == "load1") {
    load_1(dir);
  } else if (what == "load8") {
    load_8(dir);
  } else {
    if (world_rank() == 0) std::fprintf(stderr, "usage: checkpoint_mpi_test save|load1|load8 DIR | serial FILE\n");
    failures = 1;
  }
  long total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank() == 0) std::printf("checkpoint_mpi_test %s: %ld failures over all ranks\n", what.c_str(), total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
