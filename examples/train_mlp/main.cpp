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
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>
#include <xshard/core/memory.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xshard/sharding/visualize.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xshard/trace/trace.hpp>
#include <xtensor/xrandom.hpp>
#if defined(XSHARD_WITH_HDF5)
#include <xshard/checkpoint/checkpoint.hpp>
#endif

#include "model.hpp"

namespace {

using namespace train_mlp;

// What the compiler knows about one training step's communication: one
// all-reduce per layer forward, two per layer backward (the input
// gradient's over model, and the four parameter gradients' over data as one
// all_reduce_many at the layer's end; only the latter for the first layer,
// which makes no input gradient: params_only), one more per layer when the
// backward reruns the forward (remat::recompute; dots_saveable reruns no
// einsum), and one for the loss.
static_assert(Block::forward_collectives() == 1);
static_assert(Block::backward_collectives() == 2);
static_assert(Block::backward_collectives_params_only() == 1);
constexpr std::int64_t collectives_per_step(xshard::remat policy) {
  const std::int64_t rerun = policy == xshard::remat::recompute ? Block::forward_collectives() : 0;
  return layers * (Block::forward_collectives() + rerun) + (layers - 1) * Block::backward_collectives() +
         Block::backward_collectives_params_only() + 1;
}
static_assert(collectives_per_step(xshard::remat::dots_saveable) == 24);
static_assert(collectives_per_step(xshard::remat::save_all) == 24);
static_assert(collectives_per_step(xshard::remat::recompute) == 32);

std::string bar(std::size_t done, std::size_t total, std::size_t width_chars = 30) {
  const std::size_t fill = total ? done * width_chars / total : width_chars;
  return "[" + std::string(fill, '#') + std::string(width_chars - fill, '.') + "]";
}

/// "node 9 (einsum ...m,mk->...k, named h)", or the parameters' deferred
/// all-reduces.
std::string node_text(const xshard::graph::node_plan& step) {
  if (step.node == xshard::graph::no_node) return "end (the parameter gradients, one all_reduce_many)";
  std::string s = "node " + std::to_string(step.node) + " (";
  s += step.op.find("->") != std::string_view::npos ? "einsum " + std::string(step.op) : std::string(step.op);
  if (!step.name.empty()) s += ", named " + std::string(step.name);
  return s + ")";
}

/// FNV-1a over the bytes of every parameter (a digest to compare runs).
std::uint64_t digest(const std::vector<DenseBlock::params>& ps) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& p : ps) [&]<std::size_t... I>(std::index_sequence<I...>) {
      auto mix = [&](const auto& t) {
        const auto* b = reinterpret_cast<const unsigned char*>(t.data());
        for (std::size_t i = 0; i < t.size() * sizeof(T); ++i) h = (h ^ b[i]) * 1099511628211ull;
      };
      (mix(std::get<I>(p)), ...);
    }
  (std::make_index_sequence<4>{});
  return h;
}

void print_mesh_plan(xshard::remat policy) {
  // The worker threads thread_mesh's default constructor starts (devices
  // that share one run as fibers).
  const std::int64_t workers = xshard::default_mesh_threads(Mesh::size());
  std::cout << "== mesh: data=2, model=2 (" << Mesh::size() << " devices on " << workers << " worker thread"
            << (workers == 1 ? "" : "s") << "); scan_layers over stacked parameters; remat "
            << xshard::remat_name(policy) << "\n\n";
  const std::array<std::int64_t, 2> x_shape{batch, width}, w_shape{hidden, width};
  static_assert(std::is_same_v<Layout::w_in, Layout::w_out>, "W1 and W2 are printed as one");
  std::cout << "activations x, y [batch, width] by spec (" << Layout::batch::text.view() << "):\n"
            << xshard::visualize<Mesh, Layout::batch>(x_shape) << "\n";
  std::cout << "W1, W2 [hidden, width] by (" << Layout::w_in::text.view() << "), stacked over layers as ("
            << std::tuple_element_t<0, MeshParams>::spec_type::text.view() << "):\n"
            << xshard::visualize<Mesh, Layout::w_in>(w_shape) << "\n";

  std::cout << "== collectives per layer, from the compile-time plans of the block's graph (nn/mlp.hpp); every "
               "other node runs on its block alone\n";
  // The plans are compile-time values (consteval): kept as constants, not
  // rebuilt at run time.
  static constexpr auto forward_plan = Block::forward_plan();
  static constexpr auto backward_plan = Block::backward_plan();
  for (const auto& s : forward_plan)
    std::cout << "  forward   " << node_text(s) << ": " << xshard::graph::collectives_text(s, Mesh::axes) << "\n";
  for (const auto& s : backward_plan)
    std::cout << "  backward  " << node_text(s) << ": " << xshard::graph::collectives_text(s, Mesh::axes) << "\n";
  std::cout << "  per step: " << layers << " x (" << Block::forward_collectives() << " + "
            << (policy == xshard::remat::recompute ? "1 (the forward again) + " : "") << Block::backward_collectives()
            << ") - " << Block::backward_collectives() - Block::backward_collectives_params_only()
            << " (the first layer makes no input gradient) + 1 (the loss) = " << collectives_per_step(policy)
            << " all-reduces on every device (the optimizer's update adds none: its states are sharded like the "
               "parameters)\n\n";
}

/// The training on the 2x2 mesh: every step's loss, the gathered final
/// parameters, and the first step whose collectives differ from the plan.
struct mesh_run {
  std::vector<float> losses;
  std::vector<DenseBlock::params> params;
  std::string mismatch;
  double seconds = 0;
  xshard::workspace::statistics workspace;          // device 0's, at the end
  std::size_t workspace_allocations_by_step_3 = 0;  // the buffers it had made before step 3
};

template <class Rule>
mesh_run train_on_mesh(const data_set& data, const std::vector<DenseBlock::params>& init, const options& o,
                       std::size_t first_step) {
  static_assert(xshard::optimizer<Rule, MeshParams>::template plan<MeshParams>(false).collective_count() == 0);
  const std::size_t steps = o.steps;
  const bool tty = isatty(STDOUT_FILENO) != 0;
  mesh_run run;
  run.losses.resize(steps);
  run.params.resize(layers);
  std::mutex mu;
  const std::size_t traced_steps = std::min<std::size_t>(3, steps);
  auto& tracer = xshard::tracer::instance();
#if defined(XSHARD_WITH_HDF5)
  if (!o.save_dir.empty()) std::filesystem::create_directories(o.save_dir);
#endif
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
    xshard::workspace ws;  // this device's (its fiber keeps it current)
    const xshard::workspace::scope use(ws);
    for (std::size_t i = 0; i < steps; ++i) {
      const std::size_t step = first_step + i;
      if (lead && i + traced_steps == steps) tracer.start();
      const xshard::trace_me scope("train/step", {{"step", step}});
      dev.reset_counters();
      if (lead && i == 2) run.workspace_allocations_by_step_3 = ws.stats().allocations;
      // The batch's rows (every device is handed them), then this device's block.
      const auto place = [&](const xt::xtensor<T, 2>& all) {
        auto rows_now = ws.tensor<T, 2>({batch, width});
        xt::noalias(rows_now) = batch_rows(all, step);
        auto block = xshard::distribute<Layout::batch>(dev, rows_now);
        ws.recycle(std::move(rows_now));
        return block;
      };
      auto x = place(data.x);
      auto target = place(data.y);
      auto [y, pullback] = xshard::scan_layers_vjp(block, params, std::move(x), o.policy);
      // Mean squared error: each device's block of rows; the sum over the
      // batch is an all-reduce over data (model replicas hold the same rows).
      auto diff = xshard::local_zip(y, target, [](const auto& a, const auto& b) { return a - b; });
      float loss = xt::sum(diff.local() * diff.local())() / T(batch * width);
      dev.all_reduce(std::span<float>(&loss, 1), xshard::reduce_op::sum, xshard::axis_set{1});
      auto gy = xshard::local_map(diff, [](const auto& d) { return d * (T(2) / T(batch * width)); });
      // Each layer updated as soon as the backward makes its gradients
      // (optimizer::layer_updates): no gradient stack; the batch is data, so
      // no input gradient (params_only). What the step is done with goes
      // back to the device's workspace.
      pullback.params_only(std::move(gy), opt.layer_updates(params));
      ws.recycle(std::move(y));
      ws.recycle(std::move(diff));
      ws.recycle(std::move(target));
      if (dev.counters().total_calls() != collectives_per_step(o.policy)) {
        std::lock_guard lock(mu);
        run.mismatch = "device " + std::to_string(dev.id()) + " step " + std::to_string(step) + ": " +
                       std::to_string(dev.counters().total_calls()) + " collectives, the plan says " +
                       std::to_string(collectives_per_step(o.policy));
      }
      if (lead) {
        run.losses[i] = loss;
        // A bar redrawn in place on a terminal, a line per tenth of the run
        // otherwise (logs).
        const std::size_t every = tty ? 5 : std::max<std::size_t>(1, steps / 10);
        if (o.progress && (i % every == 0 || i + 1 == steps))
          std::cout << (tty ? "\r" : "") << bar(i + 1, steps) << " step " << step + 1 << "  loss " << loss
                    << (tty ? "" : "\n") << std::flush;
      }
    }
    if (lead) {
      tracer.stop();
      run.workspace = ws.stats();
      if (steps <= 2) run.workspace_allocations_by_step_3 = run.workspace.allocations;
    }
#if defined(XSHARD_WITH_HDF5)
    if (!o.save_dir.empty()) {
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
      if (lead) run.params[l] = std::move(g);
    }
  });
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (o.progress && tty) std::cout << "\n";
  return run;
}

double max_abs_diff(const std::vector<DenseBlock::params>& a, const std::vector<DenseBlock::params>& b,
                    double& max_param) {
  double max_diff = 0;
  for (std::size_t l = 0; l < layers; ++l) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((max_diff = std::max<double>(max_diff, xt::amax(xt::abs(std::get<I>(a[l]) - std::get<I>(b[l])))())), ...);
      ((max_param = std::max<double>(max_param, xt::amax(xt::abs(std::get<I>(b[l])))())), ...);
    }
    (std::make_index_sequence<4>{});
  }
  return max_diff;
}

int run(const options& o) {
  const std::size_t steps = o.steps;
  const data_set data = make_data();
  const std::vector<DenseBlock::params> init = init_params();
  const bool adamw = o.opt == optimizer_kind::adamw;

  std::size_t first_step = 0;  // the global step this run starts at
#if defined(XSHARD_WITH_HDF5)
  if (!o.resume_dir.empty())
    first_step = static_cast<std::size_t>(xshard::checkpoint_reader(checkpoint_file(o.resume_dir)).step());
#endif
  std::cout << "== model: " << layers << " residual MLP blocks (x + gelu(x W1^T + b1) W2 + b2), width " << width
            << ", hidden " << hidden << ", batch " << batch << ", "
            << (adamw ? "AdamW lr 0.001 weight decay 0.01" : "SGD lr 0.1") << ", " << steps << " steps";
  if (first_step) std::cout << " (resumed at step " << first_step << " from " << checkpoint_file(o.resume_dir) << ")";
  std::cout << "\n";
  if (o.devices == 4)
    print_mesh_plan(o.policy);
  else
    std::cout << "== one device (plain tensors, " << xshard::usable_threads() << " einsum threads)\n\n";

  mesh_run mesh;
  if (o.devices == 4)
    mesh = adamw ? train_on_mesh<xshard::adamw>(data, init, o, first_step)
                 : train_on_mesh<xshard::sgd>(data, init, o, first_step);
  // ---- the same training on one device (single_device.cpp)
  const single_device_run single = train_single_device(data, init, o, first_step);
  const std::vector<float>& losses = o.devices == 4 ? mesh.losses : single.losses;
  const std::vector<DenseBlock::params>& trained = o.devices == 4 ? mesh.params : single.params;

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
    if (!mesh.mismatch.empty()) {
      std::cout << "collectives differ from the plan: " << mesh.mismatch << "\n";
      return 1;
    }
    std::cout << "  every step ran exactly " << collectives_per_step(o.policy)
              << " collectives on every device, as planned\n";
    std::cout << "  " << steps << " steps on the mesh in " << mesh.seconds << " s\n";
    std::cout << "  device 0's workspace: " << mesh.workspace.allocated_bytes / 1024 << " KiB in "
              << mesh.workspace.allocations << " buffers, handed out "
              << mesh.workspace.reuses + mesh.workspace.allocations << " times; buffers made from step 3 on: "
              << mesh.workspace.allocations - mesh.workspace_allocations_by_step_3 << "\n";
    double max_param = 0;
    const double max_diff = max_abs_diff(mesh.params, single.params, max_param);
    const double tolerance = 1e-3 * max_param;
    std::cout << "\n== the same training on one device (" << xshard::usable_threads()
              << " einsum threads): " << single.seconds << " s\n";
    std::cout << "== check against one device: final loss " << single.losses[steps - 1] << " (mesh "
              << losses[steps - 1] << "); largest parameter difference " << max_diff << " (largest parameter "
              << max_param << ", tolerance " << tolerance << ")\n";
    if (!(max_diff <= tolerance)) {
      std::cout << "the mesh's parameters differ from the single-device run\n";
      return 1;
    }
  } else {
    std::cout << "  " << steps << " steps on one device in " << single.seconds << " s\n";
  }
  const auto& ws = single.workspace;
  std::cout << "== one device's workspace: " << ws.allocated_bytes / 1024 << " KiB in " << ws.allocations
            << " buffers, handed out " << ws.reuses + ws.allocations
            << " times; buffers made from step 3 on: " << ws.allocations - single.workspace_allocations_by_step_3
            << "\n";
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
    const comparison c = compare_with_checkpoint(trained, o.compare_file);
    const double tolerance = 1e-3 * c.max_param;
    std::cout << "== compared with " << o.compare_file << " (step " << c.step
              << "): " << (c.identical ? "bit-identical" : "not bit-identical") << "; largest parameter difference "
              << c.max_diff << " (largest parameter " << c.max_param << ", tolerance " << tolerance
              << ": float32 sums in another order)\n";
    if (!(c.max_diff <= tolerance)) return 1;
  }
#endif
  if (o.devices == 4 && !o.trace_path.empty()) {
    auto& tracer = xshard::tracer::instance();
    tracer.write_chrome_json(o.trace_path);
    std::cout << "\n== trace of the last " << std::min<std::size_t>(3, steps) << " steps (" << tracer.events().size()
              << " events, 4 devices): " << o.trace_path << " (open in ui.perfetto.dev or chrome://tracing)\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Activations and gradients are freed and reallocated every layer and
  // step: keep them in the heap (core/memory.hpp).
  xshard::retain_freed_memory();
  options o;
  if (const std::optional<int> status = parse_command_line(argc, argv, o)) return *status;
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "train_mlp: " << e.what() << "\n";
    return 1;
  }
}
