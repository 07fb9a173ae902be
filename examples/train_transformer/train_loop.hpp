// train_transformer: one training run, written once for one device (plain
// tensors, Layout = replicated_decoder) and for a device of the mesh
// (sharded tensors, Layout = Tp or Sp). Included by single_device.cpp,
// mesh_tp.cpp and mesh_sp.cpp only.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>
#include <xshard/core/workspace.hpp>
#include <xshard/optim/optimizer.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xshard/trace/trace.hpp>
#if defined(XSHARD_WITH_HDF5)
#include <xshard/checkpoint/checkpoint.hpp>
#endif

#include "model.hpp"

namespace train_transformer {

/// Where a run's tensors live: nowhere in particular (one device) or on a
/// device of the mesh.
struct one_device {};

/// x placed by spec S: x itself on one device, this device's block on the
/// mesh.
template <class S, class Dev, class E>
auto place(Dev& dev, const E& x) {
  if constexpr (std::is_same_v<Dev, one_device>)
    return xt::xtensor<typename E::value_type, E::rank>(x);
  else
    return xshard::distribute<S>(dev, x);
}
/// The whole tensor.
template <class X>
auto whole(const X& x) {
  if constexpr (xshard::Sharded<X>)
    return xshard::gather(x);
  else
    return xt::xtensor<typename X::value_type, X::rank>(x);
}
/// A tuple of tensors, each placed by the spec of the same element of P.
template <class P, class Dev, class Q>
P place_tuple(Dev& dev, const Q& q) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    if constexpr (std::is_same_v<Dev, one_device>)
      return P{std::tuple_element_t<I, P>(std::get<I>(q))...};
    else
      return P{xshard::distribute<typename std::tuple_element_t<I, P>::spec_type>(dev, std::get<I>(q))...};
  }
  (std::make_index_sequence<std::tuple_size_v<P>>{});
}
template <class Q, class P>
Q whole_tuple(const P& p) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) { return Q{whole(std::get<I>(p))...}; }
  (std::make_index_sequence<std::tuple_size_v<P>>{});
}

/// The collectives of one training step on every device, from the plans:
/// the embedding, each layer and the head, forward and backward, and the
/// loss's all-reduce. AdamW adds none (its states are sharded like the
/// parameters).
template <class Layout>
constexpr std::int64_t collectives_per_step() {
  using m = model<Layout>;
  return m::embed::forward_collectives() + m::embed::backward_collectives() +
         static_cast<std::int64_t>(layers) * (m::block::forward_collectives() + m::block::backward_collectives()) +
         m::head::forward_collectives() + m::head::backward_collectives() + 1;
}

inline std::string bar(std::size_t done, std::size_t total, std::size_t width_chars = 30) {
  const std::size_t fill = total ? done * width_chars / total : width_chars;
  return "[" + std::string(fill, '#') + std::string(width_chars - fill, '.') + "]";
}

template <class Layout, class Dev>
run_result train_on(Dev& dev, const Dense::params& init, const options& o, std::size_t first_step, bool lead) {
  using m = model<Layout>;
  using block_params = typename m::block::params;
  constexpr bool on_mesh = !std::is_same_v<Dev, one_device>;
  constexpr std::int64_t planned = collectives_per_step<Layout>();
  const typename m::block block;
  const typename m::embed embed;
  const typename m::head head;

  // ---- parameters and optimizer states, placed by their specs
  typename m::params p{
      place_tuple<typename m::embed::params>(dev, init.embedding),
      [&] {
        std::vector<block_params> per_layer;
        for (std::size_t l = 0; l < layers; ++l)
          per_layer.push_back(place_tuple<block_params>(dev, xshard::layer_params<Dense::block>(init.blocks, l)));
        return xshard::stack_params<typename m::block>(per_layer);
      }(),
      place_tuple<typename m::head::params>(dev, init.out)};
  const xshard::adamw rule{.lr = learning_rate, .weight_decay = weight_decay};
  using embed_opt = xshard::optimizer<xshard::adamw, typename m::embed::params>;
  using block_opt = xshard::optimizer<xshard::adamw, typename m::stack>;
  using head_opt = xshard::optimizer<xshard::adamw, typename m::head::params>;
  static_assert(embed_opt::template plan<typename m::embed::params>(false).collective_count() == 0);
  static_assert(block_opt::template plan<typename m::stack>(false).collective_count() == 0);
  embed_opt opt_embed(rule, p.embedding);
  block_opt opt_blocks(rule, p.blocks);
  head_opt opt_head(rule, p.out);

#if defined(XSHARD_WITH_HDF5)
  auto make_writer = [&](const std::string& path, std::int64_t step) {
    if constexpr (on_mesh)
      return xshard::checkpoint_writer(dev, path, step);
    else
      return xshard::checkpoint_writer(path, step);
  };
  auto make_reader = [&](const std::string& path) {
    if constexpr (on_mesh)
      return xshard::checkpoint_reader(dev, path);
    else
      return xshard::checkpoint_reader(path);
  };
  if (!o.resume_dir.empty()) {
    // Each device reads its own blocks, whatever layout saved them.
    auto r = make_reader(checkpoint_file(o.resume_dir));
    r.read_tuple("params/embedding", p.embedding, m::embed::param_names);
    r.read_tuple("params/blocks", p.blocks, m::block::param_names);
    r.read_tuple("params/head", p.out, m::head::param_names);
    r.read_optimizer("optimizer/embedding", opt_embed, p.embedding, m::embed::param_names);
    r.read_optimizer("optimizer/blocks", opt_blocks, p.blocks, m::block::param_names);
    r.read_optimizer("optimizer/head", opt_head, p.out, m::head::param_names);
  }
#endif

  run_result run;
  run.losses.resize(o.steps);
  const bool tty = isatty(STDOUT_FILENO) != 0;
  auto& tracer = xshard::tracer::instance();
  const std::size_t traced_steps = std::min<std::size_t>(2, o.steps);
  // The step's tensors (activations, residuals, gradients) come from this
  // device's workspace and go back to it (on the mesh each device's fiber
  // keeps its own current).
  xshard::workspace ws;
  const xshard::workspace::scope use(ws);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < o.steps; ++i) {
    const std::size_t step = first_step + i;
    if (i == 2) run.workspace_allocations_by_step_3 = ws.stats().allocations;
    if (on_mesh && lead && i + traced_steps == o.steps && !o.trace_path.empty()) tracer.start();
    const xshard::trace_me scope("train/step", {{"step", step}});
    if constexpr (on_mesh) dev.reset_counters();
    const auto tokens = training_batch(step);
    const auto x = place<typename Layout::tokens>(dev, one_hot_inputs(tokens));
    const auto gy = place<typename Layout::logits>(dev, loss_gradient(tokens));
    // forward: embedding, the scanned decoder layers, the head
    auto [h0, embed_saved] = embed.forward(p.embedding, x);
    auto [h, pullback] = xshard::scan_layers_vjp(block, p.blocks, h0, policy);
    auto [log_probs, head_saved] = head.forward(p.out, h);
    // the loss: this device's block of sum(gy * log_probs), summed over the
    // devices that split the log-probabilities
    float loss = 0;
    if constexpr (on_mesh) {
      loss = xt::sum(gy.local() * log_probs.local())();
      dev.all_reduce(std::span<float>(&loss, 1), xshard::reduce_op::sum, xshard::axis_set{3});
    } else {
      loss = xt::sum(gy * log_probs)();
    }
    // backward, and the updates
    auto [head_grads, dh] = head.vjp(p.out, head_saved, gy);
    auto [block_grads, dh0] = pullback(dh);
    auto [embed_grads, dx] = embed.vjp(p.embedding, embed_saved, dh0);
    opt_head.step(p.out, head_grads);
    opt_blocks.step(p.blocks, block_grads);
    opt_embed.step(p.embedding, embed_grads);
    // What the step handed back, to the workspace for the next one.
    ws.recycle(std::move(head_grads));
    ws.recycle(std::move(block_grads));
    ws.recycle(std::move(embed_grads));
    ws.recycle(std::move(log_probs));
    ws.recycle(std::move(h));
    ws.recycle(std::move(h0));
    ws.recycle(std::move(dh));
    ws.recycle(std::move(dh0));
    ws.recycle(std::move(embed_saved));
    ws.recycle(std::move(dx));  // the one-hot input's gradient, which nothing reads
    ws.recycle(std::move(head_saved));
    if constexpr (on_mesh) {
      if (dev.counters().total_calls() != planned && run.mismatch.empty())
        run.mismatch = "device " + std::to_string(dev.id()) + " step " + std::to_string(step + 1) + ": " +
                       std::to_string(dev.counters().total_calls()) + " collectives, the plan says " +
                       std::to_string(planned);
    }
    run.losses[i] = loss;
    if (i + 1 == std::min(snapshot_step, o.steps)) {  // (after the step's counters were checked)
      run.early = Dense::params{whole_tuple<Dense::embed::params>(p.embedding), whole_tuple<Dense::stack>(p.blocks),
                                whole_tuple<Dense::head::params>(p.out)};
      run.early_step = step + 1;
    }
    if (lead && o.progress) {
      const std::size_t every = tty ? 5 : std::max<std::size_t>(1, o.steps / 8);
      if (i % every == 0 || i + 1 == o.steps)
        std::cout << (tty ? "\r" : "") << bar(i + 1, o.steps) << " step " << step + 1 << "  loss " << loss
                  << (tty ? "" : "\n") << std::flush;
    }
  }
  if (on_mesh && lead && !o.trace_path.empty()) tracer.stop();
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.workspace = ws.stats();
  if (o.steps <= 2) run.workspace_allocations_by_step_3 = run.workspace.allocations;
  if (lead && o.progress && tty) std::cout << "\n";

  // ---- held-out accuracy (forward only)
  std::size_t hits = 0, total = 0;
  for (std::size_t k = 0; k < held_out_batches; ++k) {
    const auto tokens = make_samples(batch, 1000 + k);
    const auto x = place<typename Layout::tokens>(dev, one_hot_inputs(tokens));
    const auto h = xshard::scan_layers(block, p.blocks, embed.forward(p.embedding, x).first);
    const auto [hit, n] = answer_hits(whole(head.forward(p.out, h).first), tokens);
    hits += hit;
    total += n;
  }
  run.accuracy = static_cast<double>(hits) / static_cast<double>(total);

#if defined(XSHARD_WITH_HDF5)
  if (!o.save_dir.empty()) {
    auto w = make_writer(checkpoint_file(o.save_dir), static_cast<std::int64_t>(first_step + o.steps));
    w.add_tuple("params/embedding", p.embedding, m::embed::param_names);
    w.add_tuple("params/blocks", p.blocks, m::block::param_names);
    w.add_tuple("params/head", p.out, m::head::param_names);
    w.add_optimizer("optimizer/embedding", opt_embed, m::embed::param_names);
    w.add_optimizer("optimizer/blocks", opt_blocks, m::block::param_names);
    w.add_optimizer("optimizer/head", opt_head, m::head::param_names);
    w.commit();
  }
#endif
  // ---- the whole parameters
  run.params = Dense::params{whole_tuple<Dense::embed::params>(p.embedding), whole_tuple<Dense::stack>(p.blocks),
                             whole_tuple<Dense::head::params>(p.out)};
  return run;
}

}  // namespace train_transformer
