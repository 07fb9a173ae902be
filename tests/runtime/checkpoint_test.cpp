// Checkpoints (checkpoint/): a matrix of 5 source x 5 target layouts
// (2x2 data x model, 4x1, one process without a mesh, 2x2 with a custom
// device order and tuple specs, 8 devices with empty blocks; uneven
// extents, a stacked rank-3 tensor, float32 / int64 / float64) where every
// load equals the saved global tensors exactly; an incompatible model is an
// xshard::error naming the tensor; truncated and corrupted files are an
// xshard::error or load the exact saved values, never a crash; a writer
// killed at random points leaves the previous checkpoint loadable; an
// AdamW run of 2N steps equals N steps, save, load on a fresh mesh (also
// into ZeRO-1), N steps, bit for bit; the file h5py reads
// (tests/checkpoint_h5py.py) is written here.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>
#include <xshard/checkpoint/checkpoint.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xtensor/xtensor.hpp>

#include "../support/expect_error.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define XSHARD_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define XSHARD_TEST_ASAN 1
#endif
#endif
#if defined(XSHARD_TEST_ASAN)
#include <sanitizer/lsan_interface.h>  // __lsan_disable: HDF5's own leaks on corrupted metadata
#endif

namespace {

namespace fs = std::filesystem;
using xshard::spec;

struct globals {
  xt::xtensor<float, 2> a;
  xt::xtensor<std::int64_t, 1> b;
  xt::xtensor<double, 3> c;
  bool operator==(const globals& o) const { return a == o.a && b == o.b && c == o.c; }
};

globals make_globals(int k, std::size_t rows = 7, std::size_t stack = 3) {
  globals g;
  g.a = xt::xtensor<float, 2>::from_shape({rows, 5});
  g.b = xt::xtensor<std::int64_t, 1>::from_shape({9});
  g.c = xt::xtensor<double, 3>::from_shape({stack, 6, 5});
  for (std::size_t i = 0; i < g.a.size(); ++i) g.a.data()[i] = static_cast<float>(std::sin(0.3 * i + k)) * 7.0f;
  for (std::size_t i = 0; i < g.b.size(); ++i) g.b.data()[i] = static_cast<std::int64_t>(i * 1000003) - 4 + k;
  for (std::size_t i = 0; i < g.c.size(); ++i) g.c.data()[i] = std::cos(0.01 * i) * 1e-3 + k;
  return g;
}

fs::path temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("xshard_ckpt_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

/// A layout: mesh M and one spec per tensor.
template <class M, class SA, class SB, class SC>
struct mesh_layout {
  static std::string name() {
    return std::string(xshard::mesh_text(M::axes).view()) + " (" + std::string(SA::text.view()) + " | " +
           std::string(SB::text.view()) + " | " + std::string(SC::text.view()) + ")";
  }
  static void save(const std::string& path, const globals& g, std::int64_t step) {
    xshard::thread_mesh<M> mesh;
    mesh.run([&](auto& dev) {
      const auto a = xshard::distribute<SA>(dev, g.a);
      const auto b = xshard::distribute<SB>(dev, g.b);
      const auto c = xshard::distribute<SC>(dev, g.c);
      xshard::checkpoint_writer w(dev, path, step);
      w.add("model/a", a);
      w.add("model/b", b);
      w.add("stack/c", c);
      w.commit();
    });
  }
  static globals load(const std::string& path, const globals& like, std::int64_t* step = nullptr) {
    xshard::thread_mesh<M> mesh;
    globals out;
    mesh.run([&](auto& dev) {
      // Sentinels, so that an element the loader skips shows.
      auto a = xshard::distribute<SA>(dev, xt::xtensor<float, 2>(xt::full_like(like.a, -99.0f)));
      auto b = xshard::distribute<SB>(dev, xt::xtensor<std::int64_t, 1>(xt::full_like(like.b, -99)));
      auto c = xshard::distribute<SC>(dev, xt::xtensor<double, 3>(xt::full_like(like.c, -99.0)));
      xshard::checkpoint_reader r(dev, path);
      r.read("model/a", a);
      r.read("model/b", b);
      r.read("stack/c", c);
      globals g{xshard::gather(a), xshard::gather(b), xshard::gather(c)};
      if (dev.id() == 0) {
        out = std::move(g);
        if (step) *step = r.step();
      }
    });
    return out;
  }
};

/// One process, no mesh: plain tensors.
struct plain_layout {
  static std::string name() { return "no mesh (plain tensors)"; }
  static void save(const std::string& path, const globals& g, std::int64_t step) {
    xshard::checkpoint_writer w(path, step);
    w.add("model/a", g.a);
    w.add("model/b", g.b);
    w.add("stack/c", g.c);
    w.commit();
  }
  static globals load(const std::string& path, const globals& like, std::int64_t* step = nullptr) {
    globals g{xt::full_like(like.a, -99.0f), xt::full_like(like.b, -99), xt::full_like(like.c, -99.0)};
    xshard::checkpoint_reader r(path);
    r.read("model/a", g.a);
    r.read("model/b", g.b);
    r.read("stack/c", g.c);
    if (step) *step = r.step();
    return g;
  }
};

using L2x2 =
    mesh_layout<xshard::mesh<"data=2, model=2">, spec<"model, None">, spec<"model">, spec<"None, model, None">>;
using L4x1 = mesh_layout<xshard::mesh<"data=4, model=1">, spec<"data, None">, spec<"None">, spec<"None, None, data">>;
using L2x2custom = mesh_layout<xshard::mesh<"data=2, model=2", 3, 1, 2, 0>, spec<"(data, model), None">,
                               spec<"(model, data)">, spec<"model, data, None">>;
using L8 = mesh_layout<xshard::mesh<"x=8">, spec<"x, None">, spec<"x">, spec<"None, None, x">>;
using layouts = std::tuple<L2x2, L4x1, plain_layout, L2x2custom, L8>;

template <class F>
void for_each_layout(F&& f) {
  xshard::detail::for_each_index<std::tuple_size_v<layouts>>(
      [&](auto i) { f(std::type_identity<std::tuple_element_t<i.value, layouts>>{}); });
}

// The manifest parser's messages, one per way a manifest can be wrong (the
// fuzz target feeds it arbitrary bytes; this pins the words and line numbers).
TEST(CheckpointManifest, EveryDefectIsNamedWithItsLine) {
  using xshard::detail::crc32;
  using xshard::detail::hex32;
  const auto with_crc = [](const std::string& body) { return body + "crc32 " + hex32(crc32(body)) + "\n"; };
  const std::string h = "xshard-checkpoint 1\nversion 0.1.0\nstep 7\nmesh data=2, model=2\ndevices 0,1,2,3\n";
  const std::string t1 = "tensor model/w float32 [4,6] None, model\n";
  const std::string good = with_crc(h + t1);
  struct row {
    std::string text, message;
  };
  const row rows[] = {
      {"", "line 1: missing \"xshard-checkpoint\" (the manifest is cut short)"},
      {"xshard-checkpoint 1\n", "line 2: missing \"version\" (the manifest is cut short)"},
      {"xshard-checkpoint 1\nversion 0.1.0\nsteps 7\n", "line 3: expected \"step ...\", found \"steps 7\""},
      {with_crc("xshard-checkpoint 1\nversion 0.1.0\nstep 7\nmesh m\ndevices 0,,1\n"), "line 5: bad device id"},
      {with_crc("xshard-checkpoint 1\nversion 0.1.0\nstep 7\nmesh m\ndevices 0,1,\n"), "line 5: bad device id"},
      // 19 digits (found by the fuzz target: the digits' sum overflowed).
      {with_crc("xshard-checkpoint 1\nversion 0.1.0\nstep 7\nmesh m\ndevices 0,9999999999999999992\n"),
       "line 5: bad device id"},
      {with_crc("xshard-checkpoint 1\nversion 0.1.0\nstep 9999999999999999999\n"), "line 3: bad step"},
      {with_crc("xshard-checkpoint 2\nversion 0.1.0\nstep 7\nmesh m\ndevices 0\n"),
       "line 1: format 2 (this library reads format 1)"},
      {with_crc(h + "tensor a int7 [2] None\n"), "line 6: unknown dtype \"int7\""},
      {with_crc(h + "tensor a float32 [2,x] None\n"), "line 6: bad extent"},
      {with_crc(h + "tensor a float32 [2,] None\n"), "line 6: bad extent"},
      {with_crc(h + "tensor a float32 [2]\n"), "line 6: expected a spec after the shape"},
      {with_crc(h + "tensor a float32\n"), "line 6: a tensor line needs a name, a dtype, a shape and a spec"},
      {with_crc(h + t1 + t1), "line 7: tensor \"model/w\" is listed twice"},
      {with_crc(h + "tensor ../a float32 [2] None\n"),
       "line 6: tensor name \"../a\" has an empty, \".\" or \"..\" part"},
      {with_crc(h + "tensor a float32 [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1] None\n"), "line 6: rank above 16"},
      {h + t1 + "crc32 00000000\n",
       "line 7: crc32 78da4ed8 of the manifest differs from the recorded 00000000 (the file is corrupt)"},
      {h + t1 + "crc32 0000000\n", "line 7: bad crc32"},
      {good + "x\n", "line 7: text after the crc32 line"},
      {h + t1, "line 7: no crc32 line (the manifest is cut short)"},
      {good.substr(0, good.size() - 1), "line 7: no line break at the end (the manifest is cut short)"},
      {h + "frob\n", "line 6: expected \"tensor ...\" or \"crc32 ...\""},
  };
  for (const row& r : rows)
    EXPECT_EQ(xshard_test::error_of([&] { (void)xshard::parse_manifest(r.text, "test"); }),
              "xshard: test: manifest " + r.message)
        << r.text;
  const xshard::checkpoint_manifest m = xshard::parse_manifest(good);
  EXPECT_EQ(m.step, 7);
  EXPECT_EQ(m.mesh, "data=2, model=2");
  EXPECT_EQ(m.devices, (std::vector<int>{0, 1, 2, 3}));
  ASSERT_EQ(m.tensors.size(), 1u);
  EXPECT_EQ(m.tensors[0].shape, (std::vector<std::int64_t>{4, 6}));
  EXPECT_EQ(m.tensors[0].spec, "None, model");
  EXPECT_EQ(xshard::print_manifest(m), good);
}

TEST(Checkpoint, ReshardMatrix) {
  const fs::path dir = temp_dir();
  const globals g = make_globals(1);
  int loads = 0;
  for_each_layout([&]<class Src>(std::type_identity<Src>) {
    const std::string path = (dir / "matrix.h5").string();
    Src::save(path, g, 42);
    for_each_layout([&]<class Dst>(std::type_identity<Dst>) {
      std::int64_t step = -1;
      const globals got = Dst::load(path, g, &step);
      EXPECT_TRUE(got == g) << Src::name() << " -> " << Dst::name();
      EXPECT_EQ(step, 42);
      ++loads;
    });
  });
  EXPECT_EQ(loads, 25);
  fs::remove_all(dir);
}

TEST(Checkpoint, IncompatibleModelIsAnErrorNamingTheTensor) {
  const fs::path dir = temp_dir();
  const std::string path = (dir / "model.h5").string();
  const globals g = make_globals(2);
  L2x2::save(path, g, 1);
  xshard::checkpoint_reader r(path);
  xt::xtensor<float, 2> wrong_shape = xt::zeros<float>({7, 4});
  EXPECT_EQ(xshard_test::error_of([&] { r.read("model/a", wrong_shape); }),
            "xshard: checkpoint " + path +
                ": tensor \"model/a\" has global shape [7,5] in the checkpoint, the model's is [7,4]");
  xt::xtensor<double, 2> wrong_type = xt::zeros<double>({7, 5});
  EXPECT_EQ(xshard_test::error_of([&] { r.read("model/a", wrong_type); }),
            "xshard: checkpoint " + path + ": tensor \"model/a\" is float32 in the checkpoint, the model's is float64");
  EXPECT_XSHARD_ERROR(r.read("model/missing", wrong_type), "tensor \"model/missing\" is not in the checkpoint");
  // On a mesh, the same errors.
  xshard::thread_mesh<xshard::mesh<"data=2, model=2">> mesh;
  EXPECT_THROW(mesh.run([&](auto& dev) {
    auto c = xshard::distribute<spec<"None, model, None">>(dev, xt::xtensor<double, 3>(xt::zeros<double>({4, 6, 5})));
    xshard::checkpoint_reader(dev, path).read("stack/c", c);
  }),
               xshard::error);
  // Bad names and duplicates when writing.
  xshard::checkpoint_writer w((dir / "bad.h5").string(), 0);
  EXPECT_THROW(w.add("../x", g.a), xshard::error);
  EXPECT_THROW(w.add("xshard_manifest", g.a), xshard::error);
  w.add("p/a", g.a);
  EXPECT_THROW(w.add("p/a", g.a), xshard::error);
  EXPECT_THROW(w.add("p/a/b", g.a), xshard::error);
  EXPECT_THROW(xshard::checkpoint_reader((dir / "none.h5").string()), xshard::error);
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------
// Corrupted and truncated files.

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_file(const std::string& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Loads every tensor; true if it loaded the original values, false on an
/// xshard::error. Anything else (another exception, wrong values) fails.
bool load_or_error(const std::string& path, const globals& g, const std::string& what) {
#if defined(XSHARD_TEST_ASAN)
  // libhdf5 1.10.8 leaks what it had decoded when a metadata checksum fails
  // (H5C_protect's error path); those allocations are not ours to free.
  // Every other test of this file runs under LeakSanitizer unchanged.
  __lsan_disable();
  struct enable {
    ~enable() { __lsan_enable(); }
  } on_return;
#endif
  try {
    const globals got = plain_layout::load(path, g);
    EXPECT_TRUE(got == g) << what << ": loaded without an error but with other values";
    return true;
  } catch (const xshard::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("xshard: checkpoint ", 0), 0u) << e.what();
    return false;
  }
}

TEST(Checkpoint, CorruptedFilesAreErrors) {
  const fs::path dir = temp_dir();
  const std::string good = (dir / "good.h5").string(), bad = (dir / "bad.h5").string();
  {
    // No HDF5 free lists: what load_or_error leaves to LeakSanitizer's
    // blind eye is then always a fresh allocation, never a recycled block.
    const xshard::detail::hdf5_lock lock;
    H5set_free_list_limits(0, 0, 0, 0, 0, 0);
  }
  const globals g = make_globals(3, 40, 6);
  L2x2::save(good, g, 5);
  const std::string bytes = read_file(good);
  ASSERT_GT(bytes.size(), 1000u);
  int errors = 0, clean = 0;
  // Truncated anywhere.
  for (std::size_t cut :
       {std::size_t{0}, std::size_t{1}, std::size_t{8}, std::size_t{100}, bytes.size() / 2, bytes.size() - 1}) {
    write_file(bad, bytes.substr(0, cut));
    (load_or_error(bad, g, "cut at " + std::to_string(cut)) ? clean : errors)++;
  }
  for (std::size_t cut = 512; cut < bytes.size(); cut += bytes.size() / 37) {
    write_file(bad, bytes.substr(0, cut));
    (load_or_error(bad, g, "cut at " + std::to_string(cut)) ? clean : errors)++;
  }
  EXPECT_EQ(clean, 0);  // a truncated file never loads
  // Bytes changed anywhere: one byte, or a run of 16.
  std::mt19937_64 rng(1234);
  for (int i = 0; i < 300; ++i) {
    std::string c = bytes;
    const std::size_t at = rng() % c.size();
    const std::size_t len = i % 3 == 0 ? 16 : 1;
    for (std::size_t k = at; k < std::min(c.size(), at + len); ++k) c[k] = static_cast<char>(c[k] ^ (1 + rng() % 255));
    write_file(bad, c);
    (load_or_error(bad, g, "bytes changed at " + std::to_string(at)) ? clean : errors)++;
  }
  write_file(bad, std::string(4096, 'x'));
  EXPECT_FALSE(load_or_error(bad, g, "garbage"));
  // A valid HDF5 file that is not a checkpoint.
  EXPECT_FALSE(load_or_error(dir.string(), g, "a directory"));
  std::printf(
      "[          ] corrupted files: %d errors, %d loads of the exact values (changed bytes HDF5 never reads)\n",
      errors, clean);
  EXPECT_GT(errors, 100);
  // (222 errors and 119 exact loads when this was written)
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------
// A writer killed at random points.

/// The child: saves checkpoints of step 1, 2, ... to the path in
/// XSHARD_CKPT_KILL_WRITER on a 2x2 thread mesh until it is killed.
[[maybe_unused]] const bool writer_child = [] {
  const char* path = std::getenv("XSHARD_CKPT_KILL_WRITER");
  if (!path) return false;
  for (int k = 1;; ++k) L2x2::save(path, make_globals(k, 301, 40), k);
}();

TEST(Checkpoint, KilledWriterLeavesThePreviousCheckpoint) {
  const fs::path dir = temp_dir();
  const std::string path = (dir / "kill.h5").string();
  plain_layout::save(path, make_globals(0, 301, 40), 0);
  std::mt19937 rng(99);
  std::vector<std::int64_t> seen;
  for (int round = 0; round < 12; ++round) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::setenv("XSHARD_CKPT_KILL_WRITER", path.c_str(), 1);
      ::execl("/proc/self/exe", "/proc/self/exe", static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 400));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited by itself (status " << status << ")";
    std::int64_t step = -1;
    globals got;
    ASSERT_NO_THROW(got = plain_layout::load(path, make_globals(0, 301, 40), &step)) << "round " << round;
    EXPECT_TRUE(got == make_globals(static_cast<int>(step), 301, 40)) << "round " << round << ", step " << step;
    seen.push_back(step);
  }
  std::string steps;
  for (auto s : seen) steps += std::to_string(s) + " ";
  std::printf("[          ] steps found after each kill: %s\n", steps.c_str());
  EXPECT_GT(*std::max_element(seen.begin(), seen.end()), 0);  // the writers got somewhere
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------
// Exact resume: AdamW on a sharded toy model, 2N steps against N + save +
// load (fresh mesh, fresh optimizer) + N.

using M = xshard::mesh<"data=2, model=2">;
using P = std::tuple<xshard::sharded<double, 2, M, spec<"model, None">>, xshard::sharded<double, 1, M, spec<"None">>>;
using Gp =
    std::tuple<xshard::sharded<double, 2, M, spec<"model, None">, 1>, xshard::sharded<double, 1, M, spec<"None">, 1>>;
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

template <class States>
std::pair<xt::xtensor<double, 2>, xt::xtensor<double, 1>> train(int first, int steps, const std::string& load,
                                                                const std::string& save) {
  xshard::thread_mesh<M> mesh;
  std::pair<xt::xtensor<double, 2>, xt::xtensor<double, 1>> out;
  mesh.run([&](auto& dev) {
    P p = init_params(dev);
    xshard::optimizer<xshard::adamw, P, States> opt({.lr = 0.02, .weight_decay = 0.05}, p, {.max_grad_norm = 2.0});
    std::mt19937_64 rng(5);
    int step = first;
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
    auto w = xshard::gather(std::get<0>(p));
    auto b = xshard::gather(std::get<1>(p));
    if (dev.id() == 0) out = {w, b};
  });
  return out;
}

TEST(Checkpoint, ExactResume) {
  const fs::path dir = temp_dir();
  const std::string ck = (dir / "resume.h5").string();
  const auto whole = train<xshard::param_sharded_states>(0, 8, "", "");
  train<xshard::param_sharded_states>(0, 4, "", ck);
  const auto resumed = train<xshard::param_sharded_states>(0, 4, ck, "");
  EXPECT_TRUE(whole.first == resumed.first && whole.second == resumed.second);
  // The states saved by a param-sharded optimizer load into ZeRO-1, and the
  // other way round: the same numbers.
  const auto zero = train<xshard::zero1<"data">>(0, 4, ck, "");
  EXPECT_TRUE(whole.first == zero.first && whole.second == zero.second);
  const std::string ck2 = (dir / "resume_zero.h5").string();
  train<xshard::zero1<"data">>(0, 4, "", ck2);
  const auto from_zero = train<xshard::param_sharded_states>(0, 4, ck2, "");
  EXPECT_TRUE(whole.first == from_zero.first && whole.second == from_zero.second);
  EXPECT_FALSE(whole.first == train<xshard::param_sharded_states>(0, 7, "", "").first);  // the test can tell
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------
// For tests/checkpoint_h5py.py (CTest checkpoint.h5py): a checkpoint saved
// on the 2x2 mesh, and the gathered tensors as text beside it.

TEST(CheckpointInterop, WriteForH5py) {
  const globals g = make_globals(4);
  L2x2custom::save("checkpoint_interop.h5", g, 17);
  std::ofstream out("checkpoint_interop.txt");
  out.precision(17);
  auto put = [&](const char* name, const char* type, const auto& t) {
    out << name << ' ' << type << ' ';
    for (std::size_t d = 0; d < t.dimension(); ++d) out << (d ? "," : "") << t.shape()[d];
    for (std::size_t i = 0; i < t.size(); ++i) out << ' ' << +t.data()[i];
    out << '\n';
  };
  put("model/a", "float32", g.a);
  put("model/b", "int64", g.b);
  put("stack/c", "float64", g.c);
  EXPECT_TRUE(out.good());
}

}  // namespace
