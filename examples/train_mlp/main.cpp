// train_mlp: the end-to-end example. An 8-layer residual MLP (nn/mlp.hpp:
// einsum linear, gelu composite, einsum linear), sharded data x model on a
// 2x2 thread mesh, run with scan_layers (a run-time loop over stacked
// parameters) and trained with SGD on synthetic regression data. It prints
// the sharding and the per-step collectives from the compile-time plans,
// checks every step's collectives against them, shows the loss going down,
// checks the final parameters against the same training on one device, and
// writes a Chrome trace of the last steps.
//
//   train_mlp [--steps N] [--trace FILE] [--no-progress] [--optimizer sgd|adamw]
//             [--save DIR] [--resume DIR] [--devices 4|1] [--compare FILE] [--print-losses]
//
// --optimizer: plain SGD (the default, lr 0.1) or AdamW (lr 1e-3, weight
// decay 0.01), both xshard::optimizer over the stacked sharded parameters.
// --save DIR writes DIR/checkpoint.h5 at the end (parameters, optimizer
// states and step count, the RNG state, the step); --resume DIR starts from
// it and runs --steps more steps. --devices 1 trains on one device only
// (plain tensors; a checkpoint from the 2x2 mesh loads onto it). --compare
// FILE checks the final parameters against a checkpoint's (bit for bit, or
// the largest difference and the tolerance). --print-losses prints every
// step's loss with 9 digits. Checkpoint flags need HDF5 (xshard::hdf5).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>
#include <xshard/xshard.hpp>  // with xshard::hdf5 (XSHARD_WITH_HDF5) also checkpoint/checkpoint.hpp
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

namespace {

using T = float;
using Mesh = xshard::mesh<"data=2, model=2">;
using Layout = xshard::data_model_mlp<Mesh>;
using Block = xshard::mlp_block<T, Layout>;            // on the mesh
using DenseBlock = xshard::mlp_block<T>;               // one device, the reference
constexpr auto policy = xshard::remat::dots_saveable;  // keep x and h per layer, recompute gelu

constexpr std::size_t layers = 8, width = 128, hidden = 512, batch = 64, samples = 1024;
constexpr T learning_rate = 0.1f;
constexpr double adamw_learning_rate = 1e-3;

using MeshParams = xshard::stacked_params<Block>;
using DenseParams = xshard::stacked_params<DenseBlock>;

// What the compiler knows about one training step's communication: one
// all-reduce per layer forward, five per layer backward (dots_saveable
// reruns no einsum), and one for the loss.
static_assert(Block::forward_collectives() == 1);
static_assert(Block::backward_collectives() == 5);
constexpr std::int64_t collectives_per_step =
    layers * (Block::forward_collectives() + Block::backward_collectives()) + 1;
static_assert(collectives_per_step == 49);

struct data_set {
  xt::xtensor<T, 2> x, y;
};

/// Targets from a fixed random "teacher": y = sin(x A) / 2.
data_set make_data() {
  xt::random::seed(7);
  data_set d;
  d.x = xt::random::randn<T>({samples, width});
  const xt::xtensor<T, 2> a = xt::random::randn<T>({width, width}) / std::sqrt(T(width));
  d.y = xt::sin(xshard::einsum<"bi,io->bo">(d.x, a)) / T(2);
  return d;
}

std::vector<DenseBlock::params> init_params() {
  xt::random::seed(11);
  std::vector<DenseBlock::params> ps;
  for (std::size_t l = 0; l < layers; ++l)
    ps.push_back({xt::xtensor<T, 2>(xt::random::randn<T>({hidden, width}) / std::sqrt(T(width))),
                  xt::xtensor<T, 1>(xt::zeros<T>({hidden})),
                  xt::xtensor<T, 2>(xt::random::randn<T>({width, hidden}) * T(0.1) / std::sqrt(T(hidden))),
                  xt::xtensor<T, 1>(xt::zeros<T>({width}))});
  return ps;
}

xt::xtensor<T, 2> rows(const xt::xtensor<T, 2>& a, std::size_t step) {
  const std::size_t first = (step * batch) % samples;
  return xt::view(a, xt::range(first, first + batch), xt::all());
}

std::string bar(std::size_t done, std::size_t total, std::size_t width_chars = 30) {
  const std::size_t fill = total ? done * width_chars / total : width_chars;
  return "[" + std::string(fill, '#') + std::string(width_chars - fill, '.') + "]";
}

std::string collective_list(const xshard::sharded_einsum_plan& p) {
  if (p.collective_count() == 0) return "none";
  std::string s;
  for (const auto& c : p.collectives()) {
    if (!s.empty()) s += ", ";
    s += std::string(xshard::collective_name(c.kind)) + " over " +
         std::string(xshard::axis_set_text(Mesh::axes, c.axes).view());
  }
  return s;
}

enum class optimizer_kind { sgd, adamw };

struct options {
  std::size_t steps = 300;
  std::string trace_path = "train_mlp.trace.json";
  bool progress = true;
  optimizer_kind opt = optimizer_kind::sgd;
  std::string save_dir, resume_dir, compare_file;
  int devices = 4;
  bool print_losses = false;
};

/// The update rule, as xshard::optimizer takes it.
template <class Rule>
Rule make_rule() {
  if constexpr (std::is_same_v<Rule, xshard::sgd>)
    return {.lr = learning_rate};
  else
    return {.lr = adamw_learning_rate, .weight_decay = 0.01};
}

std::string checkpoint_file(const std::string& dir) { return dir + "/checkpoint.h5"; }

/// FNV-1a over the bytes of every parameter (a digest to compare runs).
std::uint64_t digest(const std::vector<DenseBlock::params>& layers) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& p : layers) [&]<std::size_t... I>(std::index_sequence<I...>) {
      auto mix = [&](const auto& t) {
        const auto* b = reinterpret_cast<const unsigned char*>(t.data());
        for (std::size_t i = 0; i < t.size() * sizeof(T); ++i) h = (h ^ b[i]) * 1099511628211ull;
      };
      (mix(std::get<I>(p)), ...);
    }
  (std::make_index_sequence<4>{});
  return h;
}

template <class Rule>
int run(const options& o) {
  const std::size_t steps = o.steps;
  const bool tty = isatty(STDOUT_FILENO) != 0;
  const data_set data = make_data();
  const std::vector<DenseBlock::params> init = init_params();
  const bool adamw = std::is_same_v<Rule, xshard::adamw>;

  std::size_t first_step = 0;  // the global step this run starts at
#if defined(XSHARD_WITH_HDF5)
  if (!o.resume_dir.empty())
    first_step = static_cast<std::size_t>(xshard::checkpoint_reader(checkpoint_file(o.resume_dir)).step());
#endif
  std::cout << "== model: " << layers << " residual MLP blocks (x + W2 gelu(W1 x + b1) + b2), width " << width
            << ", hidden " << hidden << ", batch " << batch << ", "
            << (adamw ? "AdamW lr 0.001 weight decay 0.01" : "SGD lr 0.1") << ", " << steps << " steps";
  if (first_step) std::cout << " (resumed at step " << first_step << " from " << checkpoint_file(o.resume_dir) << ")";
  std::cout << "\n";
  if (o.devices == 4) {
    std::cout << "== mesh: data=2, model=2 (4 devices, one thread each); scan_layers over stacked parameters; remat "
                 "dots_saveable\n\n";
    const std::array<std::int64_t, 2> x_shape{batch, width}, w_in_shape{hidden, width}, w_out_shape{width, hidden};
    std::cout << "activations x, y [batch, width] by spec (" << Layout::batch::text.view() << "):\n"
              << xshard::visualize<Mesh, Layout::batch>(x_shape) << "\n";
    std::cout << "W1 [hidden, width] by (" << Layout::w_in::text.view() << "), stacked over layers as ("
              << std::tuple_element_t<0, MeshParams>::spec_type::text.view() << "):\n"
              << xshard::visualize<Mesh, Layout::w_in>(w_in_shape) << "\n";
    std::cout << "W2 [width, hidden] by (" << Layout::w_out::text.view() << "):\n"
              << xshard::visualize<Mesh, Layout::w_out>(w_out_shape) << "\n";

    std::cout << "== collectives per layer, from the compile-time plans\n";
    for (const auto& s : Block::forward_plans())
      std::cout << "  forward   " << s.what << ": " << collective_list(s.plan) << "\n";
    std::cout << "  forward   constrain y to (" << Layout::batch::text.view()
              << "): " << Block::constrain_plan().collective_count() << " collectives\n";
    for (const auto& s : Block::backward_plans())
      std::cout << "  backward  " << s.what << ": " << collective_list(s.plan) << "\n";
    std::cout << "  per step: " << layers << " x (" << Block::forward_collectives() << " + "
              << Block::backward_collectives() << ") + 1 (the loss) = " << collectives_per_step
              << " all-reduces on every device";
    static_assert(xshard::optimizer<Rule, MeshParams>::template plan<MeshParams>(false).collective_count() == 0);
    std::cout << " (the optimizer's update adds none: its states are sharded like the parameters)\n\n";
  } else {
    std::cout << "== one device (plain tensors, " << xshard::usable_threads() << " einsum threads)\n\n";
  }

  // ---- training on the mesh
  std::vector<float> losses(steps);
  std::vector<DenseBlock::params> trained(layers);
  std::mutex mu;
  std::string mismatch;
  const std::size_t traced_steps = std::min<std::size_t>(3, steps);
  auto& tracer = xshard::tracer::instance();
  double mesh_seconds = 0;
  if (o.devices == 4) {
    xshard::thread_mesh<Mesh> mesh;
    const auto t0 = std::chrono::steady_clock::now();
    mesh.run([&](auto& dev) {
      Block block;
      std::vector<Block::params> per_layer;
      for (const auto& p : init)
        per_layer.push_back({xshard::distribute<Layout::w_in>(dev, std::get<0>(p)),
                             xshard::distribute<Layout::b_in>(dev, std::get<1>(p)),
                             xshard::distribute<Layout::w_out>(dev, std::get<2>(p)),
                             xshard::distribute<Layout::b_out>(dev, std::get<3>(p))});
      auto params = xshard::stack_params<Block>(per_layer);
      xshard::optimizer<Rule, MeshParams> opt(make_rule<Rule>(), params);
#if defined(XSHARD_WITH_HDF5)
      if (!o.resume_dir.empty()) {
        // Each device reads the hyperslabs of its own blocks, whatever mesh
        // and specs the checkpoint was saved with.
        xshard::checkpoint_reader r(dev, checkpoint_file(o.resume_dir));
        r.read_tuple("params", params, Block::param_names);
        r.read_optimizer("optimizer", opt, params, Block::param_names);
      }
#endif
      const bool lead = dev.id() == 0;
      for (std::size_t i = 0; i < steps; ++i) {
        const std::size_t step = first_step + i;
        if (lead && i + traced_steps == steps) tracer.start();
        const xshard::trace_me scope("train/step", {{"step", step}});
        dev.reset_counters();
        const auto x = xshard::distribute<Layout::batch>(dev, rows(data.x, step));
        const auto target = xshard::distribute<Layout::batch>(dev, rows(data.y, step));
        auto [y, pullback] = xshard::scan_layers_vjp(block, params, x, policy);
        // Mean squared error: each device's block of rows; the sum over the
        // batch is an all-reduce over data (model replicas hold the same rows).
        const auto diff = xshard::local_zip(y, target, [](const auto& a, const auto& b) { return a - b; });
        float loss = xt::sum(diff.local() * diff.local())() / T(batch * width);
        dev.all_reduce(std::span<float>(&loss, 1), xshard::reduce_op::sum, xshard::axis_set{1});
        const auto gy = xshard::local_map(diff, [](const auto& d) { return d * (T(2) / T(batch * width)); });
        const auto grads = pullback(gy).first;  // (and dx: unused)
        opt.step(params, grads);                // plain SGD: p -= lr g, exactly as before
        if (dev.counters().total_calls() != collectives_per_step) {
          std::lock_guard lock(mu);
          mismatch = "device " + std::to_string(dev.id()) + " step " + std::to_string(step) + ": " +
                     std::to_string(dev.counters().total_calls()) + " collectives, the plan says " +
                     std::to_string(collectives_per_step);
        }
        if (lead) {
          losses[i] = loss;
          // A bar redrawn in place on a terminal, a line per tenth of the run
          // otherwise (logs).
          const std::size_t every = tty ? 5 : std::max<std::size_t>(1, steps / 10);
          if (o.progress && (i % every == 0 || i + 1 == steps))
            std::cout << (tty ? "\r" : "") << bar(i + 1, steps) << " step " << step + 1 << "  loss " << loss
                      << (tty ? "" : "\n") << std::flush;
        }
      }
      if (lead) tracer.stop();
#if defined(XSHARD_WITH_HDF5)
      if (!o.save_dir.empty()) {
        std::filesystem::create_directories(o.save_dir);
        xshard::checkpoint_writer w(dev, checkpoint_file(o.save_dir), static_cast<std::int64_t>(first_step + steps));
        w.add_tuple("params", params, Block::param_names);
        w.add_optimizer("optimizer", opt, Block::param_names);
        w.add_rng("rng/xtensor", xt::random::get_default_random_engine());
        w.commit();
      }
#endif
      for (std::size_t l = 0; l < layers; ++l) {
        const auto p = xshard::layer_params<Block>(params, l);
        DenseBlock::params g{xshard::gather(std::get<0>(p)), xshard::gather(std::get<1>(p)),
                             xshard::gather(std::get<2>(p)), xshard::gather(std::get<3>(p))};
        if (lead) trained[l] = std::move(g);
      }
    });
    mesh_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.progress && tty) std::cout << "\n";
  }

  // ---- the same training on one device
  const auto t1 = std::chrono::steady_clock::now();
  DenseBlock dense;
  auto ref = xshard::stack_params<DenseBlock>(init);
  xshard::optimizer<Rule, DenseParams> ref_opt(make_rule<Rule>(), ref);
#if defined(XSHARD_WITH_HDF5)
  if (!o.resume_dir.empty()) {
    xshard::checkpoint_reader r(checkpoint_file(o.resume_dir));  // the whole tensors
    r.read_tuple("params", ref, DenseBlock::param_names);
    r.read_optimizer("optimizer", ref_opt, ref, DenseBlock::param_names);
    r.read_rng("rng/xtensor", xt::random::get_default_random_engine());
  }
#endif
  std::vector<float> ref_losses(steps);
  for (std::size_t i = 0; i < steps; ++i) {
    const std::size_t step = first_step + i;
    const auto x = rows(data.x, step);
    auto [y, pullback] = xshard::scan_layers_vjp(dense, ref, x, policy);
    const xt::xtensor<T, 2> diff = y - rows(data.y, step);
    ref_losses[i] = xt::sum(diff * diff)() / T(batch * width);
    const auto grads = pullback(diff * (T(2) / T(batch * width))).first;
    ref_opt.step(ref, grads);
    if (o.devices == 1 && o.progress && (i % std::max<std::size_t>(1, steps / 10) == 0 || i + 1 == steps))
      std::cout << bar(i + 1, steps) << " step " << step + 1 << "  loss " << ref_losses[i] << "\n";
  }
  const double single_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  std::vector<DenseBlock::params> ref_layers;
  for (std::size_t l = 0; l < layers; ++l) ref_layers.push_back(xshard::layer_params<DenseBlock>(ref, l));
  if (o.devices == 1) {
    losses = ref_losses;
    trained = ref_layers;
#if defined(XSHARD_WITH_HDF5)
    if (!o.save_dir.empty()) {
      std::filesystem::create_directories(o.save_dir);
      xshard::checkpoint_writer w(checkpoint_file(o.save_dir), static_cast<std::int64_t>(first_step + steps));
      w.add_tuple("params", ref, DenseBlock::param_names);
      w.add_optimizer("optimizer", ref_opt, DenseBlock::param_names);
      w.add_rng("rng/xtensor", xt::random::get_default_random_engine());
      w.commit();
    }
#endif
  }

  std::cout << "\n== loss\n";
  for (std::size_t s = 0; s < steps; s += std::max<std::size_t>(1, steps / 6))
    std::cout << "  step " << first_step + s + 1 << ": " << losses[s] << "\n";
  std::cout << "  step " << first_step + steps << ": " << losses[steps - 1] << "\n";
  if (o.print_losses) {
    char buf[64];
    for (std::size_t s = 0; s < steps; ++s) {
      std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(losses[s]));
      std::cout << "  loss[" << first_step + s + 1 << "] = " << buf << "\n";
    }
  }
  if (o.devices == 4) {
    if (!mismatch.empty()) {
      std::cout << "collectives differ from the plan: " << mismatch << "\n";
      return 1;
    }
    std::cout << "  every step ran exactly " << collectives_per_step << " collectives on every device, as planned\n";
    std::cout << "  " << steps << " steps on the mesh in " << mesh_seconds << " s\n";

    double max_diff = 0, max_param = 0;
    for (std::size_t l = 0; l < layers; ++l) {
      const auto& want = ref_layers[l];
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        ((max_diff = std::max<double>(max_diff, xt::amax(xt::abs(std::get<I>(trained[l]) - std::get<I>(want)))())),
         ...);
        ((max_param = std::max<double>(max_param, xt::amax(xt::abs(std::get<I>(want)))())), ...);
      }
      (std::make_index_sequence<4>{});
    }
    const double tolerance = 1e-3 * max_param;
    std::cout << "\n== the same training on one device (" << xshard::usable_threads()
              << " einsum threads): " << single_seconds << " s\n";
    std::cout << "== check against one device: final loss " << ref_losses[steps - 1] << " (mesh " << losses[steps - 1]
              << "); largest parameter difference " << max_diff << " (largest parameter " << max_param << ", tolerance "
              << tolerance << ")\n";
    if (!(max_diff <= tolerance)) {
      std::cout << "the mesh's parameters differ from the single-device run\n";
      return 1;
    }
  } else {
    std::cout << "  " << steps << " steps on one device in " << single_seconds << " s\n";
  }
  // The loss halves within a hundred steps (about 0.4 of the first at step
  // 51 with SGD); shorter runs must still make progress. (A resumed run
  // starts where the loss is already low: not checked.)
  const float want = steps >= 100 && !adamw ? 0.5f : 1.0f;
  if (first_step == 0 && !(losses[steps - 1] < want * losses[0])) {
    std::cout << "the loss did not go down to " << want << " of the first step's\n";
    return 1;
  }
  std::cout << "== parameters digest (FNV-1a of their bytes): " << std::hex << digest(trained) << std::dec << "\n";
#if defined(XSHARD_WITH_HDF5)
  if (!o.save_dir.empty())
    std::cout << "== saved step " << first_step + steps << " to " << checkpoint_file(o.save_dir) << "\n";
  if (!o.compare_file.empty()) {
    // The parameters against a checkpoint's: bit for bit, or how far.
    xshard::checkpoint_reader r(o.compare_file);
    DenseParams other = ref;
    r.read_tuple("params", other, DenseBlock::param_names);
    double max_diff = 0, max_param = 0;
    bool identical = true;
    for (std::size_t l = 0; l < layers; ++l) {
      const auto want = xshard::layer_params<DenseBlock>(other, l);
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        ((identical = identical && std::get<I>(trained[l]) == std::get<I>(want)), ...);
        ((max_diff = std::max<double>(max_diff, xt::amax(xt::abs(std::get<I>(trained[l]) - std::get<I>(want)))())),
         ...);
        ((max_param = std::max<double>(max_param, xt::amax(xt::abs(std::get<I>(want)))())), ...);
      }
      (std::make_index_sequence<4>{});
    }
    const double tolerance = 1e-3 * max_param;
    std::cout << "== compared with " << o.compare_file << " (step " << r.step()
              << "): " << (identical ? "bit-identical" : "not bit-identical") << "; largest parameter difference "
              << max_diff << " (largest parameter " << max_param << ", tolerance " << tolerance
              << ": float32 sums in another order)\n";
    if (!(max_diff <= tolerance)) return 1;
  }
#endif

  if (o.devices == 4 && !o.trace_path.empty()) {
    tracer.write_chrome_json(o.trace_path);
    std::cout << "\n== trace of the last " << traced_steps << " steps (" << tracer.events().size()
              << " events, 4 devices): " << o.trace_path << " (open in ui.perfetto.dev or chrome://tracing)\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  auto usage = [] {
    std::cerr << "usage: train_mlp [--steps N] [--trace FILE] [--no-progress] [--optimizer sgd|adamw] [--save DIR] "
                 "[--resume DIR] [--devices 4|1] [--compare FILE] [--print-losses]\n";
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--steps" && has_value) {
      char* end = nullptr;
      o.steps = std::strtoul(argv[++i], &end, 10);
      if (*end != '\0' || o.steps == 0 || o.steps > 100000) {
        std::cerr << "train_mlp: --steps needs a whole number from 1 to 100000, not \"" << argv[i] << "\"\n";
        return 2;
      }
    } else if (a == "--trace" && has_value) {
      o.trace_path = argv[++i];
    } else if (a == "--no-progress") {
      o.progress = false;
    } else if (a == "--print-losses") {
      o.print_losses = true;
    } else if (a == "--optimizer" && has_value) {
      const std::string_view v = argv[++i];
      if (v == "sgd") {
        o.opt = optimizer_kind::sgd;
      } else if (v == "adamw") {
        o.opt = optimizer_kind::adamw;
      } else {
        std::cerr << "train_mlp: --optimizer is sgd or adamw, not \"" << v << "\"\n";
        return 2;
      }
    } else if (a == "--devices" && has_value) {
      const std::string_view v = argv[++i];
      if (v != "4" && v != "1") {
        std::cerr << "train_mlp: --devices is 4 (the 2x2 mesh) or 1, not \"" << v << "\"\n";
        return 2;
      }
      o.devices = v == "4" ? 4 : 1;
    } else if ((a == "--save" || a == "--resume" || a == "--compare") && has_value) {
#if defined(XSHARD_WITH_HDF5)
      (a == "--save" ? o.save_dir : a == "--resume" ? o.resume_dir : o.compare_file) = argv[++i];
#else
      std::cerr << "train_mlp: " << a << " needs checkpoints: build with HDF5 (libhdf5-dev, target xshard::hdf5)\n";
      return 2;
#endif
    } else {
      return usage();
    }
  }
  try {
    return o.opt == optimizer_kind::sgd ? run<xshard::sgd>(o) : run<xshard::adamw>(o);
  } catch (const std::exception& e) {
    std::cerr << "train_mlp: " << e.what() << "\n";
    return 1;
  }
}
