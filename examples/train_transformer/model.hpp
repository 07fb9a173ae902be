// train_transformer's model, task and training loop, shared by its
// translation units: main.cpp (plans, checks, report), cli.cpp (the
// command line, options.hpp),
// mesh_tp.cpp and mesh_sp.cpp (the 2x2 mesh run, one layout each) and
// single_device.cpp (the same training on one device). Each TU
// instantiates only its own part of the templates, and they compile in
// parallel.
//
// The task: reverse a sequence of 31 digits. A sample is 64 tokens,
//   d_1 ... d_31  SEP  d_31 ... d_1  END
// and the model is trained to predict each token of the answer (the 31
// reversed digits and END) from the tokens before it; the loss is the mean
// cross-entropy over those 32 positions. Held-out samples (another seed)
// give the token accuracy the run checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>
#include <xshard/core/workspace.hpp>
#include <xshard/nn/decoder.hpp>
#include <xshard/optim/optimizer.hpp>
#include <xshard/scan/remat.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xtensor/xtensor.hpp>

#include "options.hpp"

namespace train_transformer {

using T = float;

constexpr std::size_t layers = 4, width = 128, heads = 4, head_dim = width / heads, hidden = 4 * width;
constexpr std::size_t digits = 31, seq = 2 * digits + 2, batch = 16;
constexpr std::size_t vocab = 16;           // 0-9, SEP, END and 4 unused ids (the vocabulary splits over model)
constexpr std::size_t table = vocab + seq;  // the embedding's rows: one per token, then one per position
constexpr std::int64_t sep = 10, end = 11;
constexpr std::size_t answer_first = digits;  // positions 31..62 predict the answer
constexpr std::size_t answer_count = digits + 1;
constexpr double learning_rate = 1e-3, weight_decay = 0.01;
constexpr double init_std = 0.02;
constexpr double accuracy_bar = 0.99;  // held-out token accuracy the run must reach
constexpr std::size_t held_out_batches = 8;
/// The mesh run's parameters are checked against one device's after this
/// many steps, before float32 rounding differences (sums in another order)
/// are amplified by the fast phase of training around step 100, and the
/// final runs by their losses and accuracies.
constexpr std::size_t snapshot_step = 50;

using Mesh = xshard::mesh<"data=2, model=2">;
using Tp = xshard::tensor_parallel_decoder<Mesh>;
using Sp = xshard::sequence_parallel_decoder<Mesh>;

template <class Layout>
struct model {
  using block = xshard::decoder_block<T, head_dim, Layout>;
  using embed = xshard::embedding_layer<T, Layout>;
  using head = xshard::head_layer<T, Layout>;
  using stack = xshard::stacked_params<block>;
  struct params {
    typename embed::params embedding;
    stack blocks;
    typename head::params out;
  };
};
using Dense = model<xshard::replicated_decoder>;
constexpr auto policy = xshard::remat::save_all;  // every step's collectives are exactly the plans'

/// `count` samples of the task from `seed`: tokens [count, seq].
xt::xtensor<std::int64_t, 2> make_samples(std::size_t count, std::uint64_t seed);

/// The training batch of a step (a fixed stream: step k's batch is always
/// the same, so a resumed run sees what an uninterrupted one would).
xt::xtensor<std::int64_t, 2> training_batch(std::size_t step);

/// One-hot rows [b, seq, table]: token and position.
xt::xtensor<T, 3> one_hot_inputs(const xt::xtensor<std::int64_t, 2>& tokens);

/// The loss's gradient with respect to the log-probabilities, [b, seq,
/// vocab]: -1 / (b * answer_count) at each answer position's target, zero
/// elsewhere. The loss is sum(gradient * log-probabilities).
xt::xtensor<T, 3> loss_gradient(const xt::xtensor<std::int64_t, 2>& tokens);

/// Correct answer tokens (argmax of the log-probabilities) and their count.
std::pair<std::size_t, std::size_t> answer_hits(const xt::xtensor<T, 3>& log_probs,
                                                const xt::xtensor<std::int64_t, 2>& tokens);

/// The initial parameters (fixed seed): weights N(0, 0.02), gains 1, biases 0.
Dense::params init_params();

/// The plain parameters, whole (what a mesh run gathers at the end).
struct run_result {
  Dense::params params;
  Dense::params early;  // after snapshot_step steps
  std::size_t early_step = 0;
  std::vector<float> losses;
  double seconds = 0;
  double accuracy = 0;
  std::string mismatch;                     // the first step whose collectives differ from the plan
  xshard::workspace::statistics workspace;  // this device's, at the end
  std::size_t workspace_allocations_by_step_3 = 0;
};

run_result train_single_device(const Dense::params& init, const options& o, std::size_t first_step);
run_result train_tp(const Dense::params& init, const options& o, std::size_t first_step);
run_result train_sp(const Dense::params& init, const options& o, std::size_t first_step);
/// Under mpiexec -n 4 (--mpi; built with xshard::mpi): this process's rank,
/// and the run of this rank's device.
int mpi_rank();
run_result train_mpi(const Dense::params& init, const options& o, std::size_t first_step);
void print_plans_tp();
void print_plans_sp();

/// Largest absolute difference between two parameter sets, and the largest
/// absolute parameter of b.
std::pair<double, double> max_abs_diff(const Dense::params& a, const Dense::params& b);

inline std::string checkpoint_file(const std::string& dir) { return dir + "/checkpoint.h5"; }

}  // namespace train_transformer
