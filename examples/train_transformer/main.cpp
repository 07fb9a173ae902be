// train_transformer: the end-to-end example. A 4-layer pre-norm transformer
// decoder (nn/decoder.hpp: rms_norm, causal multi-head attention with
// einsum projections, softmax, gelu MLP; one-hot token and position
// embedding; log-softmax head), its layers run by scan_layers over stacked
// parameters, trained with AdamW to reverse sequences of 31 digits, on the
// 2x2 thread mesh in one of two layouts chosen by specs alone:
//
//   --layout tp   Megatron tensor parallel: batch over data; heads, the
//                 MLP's hidden units and the vocabulary over model
//   --layout sp   sequence parallel on top: the activations between blocks
//                 split over the sequence on model
//
// It prints the layout and the collectives of every node from the
// compile-time plans, checks every step's collective counters against
// them, checks the final parameters against the same training on one
// device, reports the held-out token accuracy (exit 1 below 99% after a
// full run), and writes a Chrome trace of the last two steps.
//
//   train_transformer [--steps N] [--layout tp|sp] [--devices 4|1] [--no-check]
//                     [--trace FILE] [--no-progress] [--save DIR] [--resume DIR]
//                     [--save-init FILE] [--print-losses] [--mpi]
//
// --devices 1 trains on one device (plain tensors). --no-check skips the
// single-device reference run. --save DIR writes DIR/checkpoint.h5 at the
// end (parameters, AdamW states, step), --resume DIR continues from one,
// whatever layout or device count saved it. --save-init FILE writes the
// initial parameters and the first training batches, for
// bench/train_transformer_peer.py (the same model in PyTorch). Checkpoint
// flags need HDF5. --mpi runs the same training loop under mpiexec -n 4,
// one MPI rank per device (xshard::mpi_mesh; rank 0 prints, checks and runs
// the single-device reference).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <xshard/core/memory.hpp>
#include <xshard/trace/trace.hpp>
#if defined(XSHARD_WITH_HDF5)
#include <xshard/checkpoint/checkpoint.hpp>
#endif

#include "model.hpp"
#include "train_loop.hpp"

namespace {

using namespace train_transformer;

// What the compiler knows about one training step's communication (the
// plans, printed by --devices 4): Megatron's two all-reduces per layer
// forward, the sequence-parallel all-gathers and reduce-scatters instead.
static_assert(Dense::block::forward_collectives() == 0);
static_assert(model<Tp>::block::forward_collectives() == 2);
static_assert(model<Sp>::block::forward_collectives() == 4);
static_assert(collectives_per_step<Tp>() == 28);
static_assert(collectives_per_step<Sp>() == 68);

#if defined(XSHARD_WITH_HDF5)
/// The initial parameters and the first training batches, for the PyTorch
/// peer (same weights, same data).
void save_init(const std::string& file, const Dense::params& init) {
  constexpr std::size_t batches = 20;
  xt::xtensor<std::int64_t, 3> tokens = xt::xtensor<std::int64_t, 3>::from_shape({batches, batch, seq});
  for (std::size_t k = 0; k < batches; ++k) xt::view(tokens, k) = training_batch(k);
  xshard::checkpoint_writer w(file, 0);
  w.add_tuple("params/embedding", init.embedding, Dense::embed::param_names);
  w.add_tuple("params/blocks", init.blocks, Dense::block::param_names);
  w.add_tuple("params/head", init.out, Dense::head::param_names);
  w.add("data/tokens", tokens);
  w.commit();
}
#endif

int run(const options& o) {
  const Dense::params init = init_params();
#if defined(XSHARD_WITH_HDF5)
  if (!o.init_file.empty()) {
    save_init(o.init_file, init);
    std::cout << "== wrote the initial parameters and the first training batches to " << o.init_file << "\n";
  }
  if (!o.save_dir.empty()) std::filesystem::create_directories(o.save_dir);
#endif
  std::size_t first_step = 0;
#if defined(XSHARD_WITH_HDF5)
  if (!o.resume_dir.empty())
    first_step = static_cast<std::size_t>(xshard::checkpoint_reader(checkpoint_file(o.resume_dir)).step());
#endif
  const bool tp = o.layout == layout_kind::tp;
  std::cout << "== model: " << layers << " decoder layers, width " << width << ", " << heads << " heads of " << head_dim
            << ", MLP " << hidden << ", vocabulary " << vocab << ", sequence " << seq << ", batch " << batch
            << "; AdamW lr " << learning_rate << " weight decay " << weight_decay << "; " << o.steps << " steps";
  if (first_step) std::cout << " (resumed at step " << first_step << " from " << checkpoint_file(o.resume_dir) << ")";
  std::cout << "\n== task: reverse " << digits << " digits (" << digits << " digits, SEP, the reversed digits, END); "
            << "the loss is the cross-entropy of the " << answer_count << " answer tokens\n";

  run_result mesh;
  if (o.devices == 4) {
    tp ? print_plans_tp() : print_plans_sp();
    if (o.mpi) {
#if defined(TRAIN_TRANSFORMER_MPI)
      std::cout << "== under MPI: this process is rank " << mpi_rank() << " of 4, one device each\n";
      mesh = train_mpi(init, o, first_step);
#endif
    } else {
      mesh = tp ? train_tp(init, o, first_step) : train_sp(init, o, first_step);
    }
  } else {
    std::cout << "== one device (plain tensors, " << xshard::usable_threads() << " einsum threads)\n\n";
  }
  run_result single;
  if (o.devices == 1 || o.check_single) {
    if (o.devices == 4)
      std::cout << "\n== the same training on one device (" << xshard::usable_threads()
                << " einsum threads), the reference\n";
    options quiet = o;
    quiet.save_dir.clear();  // the mesh run saves
    if (o.devices == 1) quiet = o;
    single = train_single_device(init, quiet, first_step);
  }
  const run_result& trained = o.devices == 4 ? mesh : single;
  const std::vector<float>& losses = trained.losses;

  std::cout << "\n== loss\n";
  for (std::size_t s = 0; s < o.steps; s += std::max<std::size_t>(1, o.steps / 8))
    std::cout << "  step " << first_step + s + 1 << ": " << losses[s] << "\n";
  std::cout << "  step " << first_step + o.steps << ": " << losses[o.steps - 1] << "\n";
  if (o.print_losses) {
    char buf[64];
    for (std::size_t s = 0; s < o.steps; ++s) {
      std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(losses[s]));
      std::cout << "  loss[" << first_step + s + 1 << "] = " << buf << "\n";
    }
  }
  const double tokens_per_step = static_cast<double>(batch * seq);
  if (o.devices == 4) {
    if (!mesh.mismatch.empty()) {
      std::cout << "collectives differ from the plan: " << mesh.mismatch << "\n";
      return 1;
    }
    std::cout << "  every step ran exactly " << (tp ? collectives_per_step<Tp>() : collectives_per_step<Sp>())
              << " collectives on every device, as planned\n";
    std::cout << "  " << o.steps << " steps on the mesh in " << mesh.seconds << " s ("
              << tokens_per_step * static_cast<double>(o.steps) / mesh.seconds << " tokens/s)\n";
    if (o.check_single) {
      std::cout << "  " << o.steps << " steps on one device in " << single.seconds << " s ("
                << tokens_per_step * static_cast<double>(o.steps) / single.seconds << " tokens/s)\n";
      // The parameters after the first steps, within float32 rounding; the
      // final ones after the chaotic fast phase by loss and accuracy.
      const auto [early_diff, early_max] = max_abs_diff(mesh.early, single.early);
      const double tolerance = 1e-3 * early_max;
      const auto [final_diff, final_max] = max_abs_diff(mesh.params, single.params);
      const double loss_gap = std::abs(static_cast<double>(single.losses[o.steps - 1] - losses[o.steps - 1]));
      const double loss_tolerance = 0.05 * static_cast<double>(single.losses[o.steps - 1]) + 1e-3;
      std::cout << "== check against one device\n  after step " << single.early_step
                << ": largest parameter difference " << early_diff << " (largest parameter " << early_max
                << ", tolerance " << tolerance << ")\n  final loss " << single.losses[o.steps - 1] << " (mesh "
                << losses[o.steps - 1] << ", tolerance " << loss_tolerance << "); held-out accuracy "
                << 100.0 * single.accuracy << "% (mesh " << 100.0 * mesh.accuracy
                << "%); largest final parameter difference " << final_diff << " of " << final_max << "\n";
      if (!(early_diff <= tolerance) || !(loss_gap <= loss_tolerance) || mesh.accuracy + 0.01 < single.accuracy) {
        std::cout << "the mesh run differs from the single-device run\n";
        return 1;
      }
    }
  } else {
    std::cout << "  " << o.steps << " steps on one device in " << single.seconds << " s ("
              << tokens_per_step * static_cast<double>(o.steps) / single.seconds << " tokens/s)\n";
  }
  if (o.devices == 1 || o.check_single) {
    const auto& ws = single.workspace;
    std::cout << "== one device's workspace: " << ws.allocated_bytes / 1024 << " KiB in " << ws.allocations
              << " buffers, handed out " << ws.reuses + ws.allocations
              << " times; buffers made from step 3 on: " << ws.allocations - single.workspace_allocations_by_step_3
              << "\n";
  }
  std::cout << "== held-out token accuracy (" << held_out_batches * batch << " new samples, " << answer_count
            << " answer tokens each): " << 100.0 * trained.accuracy << "%\n";
  // A full run must solve the task; a shorter one must still learn.
  if (first_step == 0 && o.steps >= 400 && trained.accuracy < accuracy_bar) {
    std::cout << "the held-out accuracy is below " << 100.0 * accuracy_bar << "%\n";
    return 1;
  }
  if (first_step == 0 && !(losses[o.steps - 1] < losses[0])) {
    std::cout << "the loss did not go down\n";
    return 1;
  }
#if defined(XSHARD_WITH_HDF5)
  if (!o.save_dir.empty())
    std::cout << "== saved step " << first_step + o.steps << " to " << checkpoint_file(o.save_dir) << "\n";
#endif
  if (o.devices == 4 && !o.trace_path.empty()) {
    auto& tracer = xshard::tracer::instance();
    tracer.write_chrome_json(o.trace_path);
    std::cout << "\n== trace of the last " << std::min<std::size_t>(2, o.steps) << " steps (" << tracer.events().size()
              << (o.mpi ? " events, rank 0's device): " : " events, 4 devices): ") << o.trace_path
              << " (open in ui.perfetto.dev or chrome://tracing)\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  xshard::retain_freed_memory();  // activations are freed and reallocated every layer and step
  options o;
  if (const std::optional<int> status = parse_command_line(argc, argv, o)) return *status;
  if (o.mpi) {
#if defined(TRAIN_TRANSFORMER_MPI)
    if (o.devices != 4 || !o.save_dir.empty() || !o.resume_dir.empty()) {
      std::cerr << "train_transformer: --mpi runs the 2x2 mesh (--devices 4) without --save/--resume (the "
                   "checkpoints of MPI ranks need parallel HDF5)\n";
      return 2;
    }
    if (mpi_rank() != 0) {  // rank 0 reports and runs the single-device reference
      std::cout.setstate(std::ios::failbit);
      o.check_single = false;
      o.trace_path.clear();
      o.init_file.clear();
    }
#else
    std::cerr << "train_transformer: built without MPI (the xshard::mpi target): --mpi is not available\n";
    return 2;
#endif
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "train_transformer: " << e.what() << "\n";
    return 1;
  }
}
