// train_transformer: the run on the 2x2 thread mesh and the printed plans,
// for one layout. Included by mesh_tp.cpp and mesh_sp.cpp (one layout each,
// compiled in parallel).
#pragma once

#include <array>
#include <iostream>
#include <mutex>
#include <string>
#include <xshard/sharding/visualize.hpp>
#include <xshard/spmd/thread_mesh.hpp>

#include "train_loop.hpp"

namespace train_transformer {

template <class Layout>
run_result train_mesh(const Dense::params& init, const options& o, std::size_t first_step) {
  run_result result;
  std::mutex mu;
  xshard::thread_mesh<Mesh> mesh;
  std::cout << "== on " << mesh.workers() << " worker thread" << (mesh.workers() == 1 ? "" : "s")
            << " (devices that share one run as fibers)\n";
  mesh.run([&](auto& dev) {
    run_result r = train_on<Layout>(dev, init, o, first_step, dev.id() == 0);
    std::lock_guard lock(mu);
    if (dev.id() == 0) {
      std::string mismatch = std::move(result.mismatch);
      result = std::move(r);
      if (result.mismatch.empty()) result.mismatch = std::move(mismatch);
    } else if (result.mismatch.empty()) {
      result.mismatch = std::move(r.mismatch);
    }
  });
  return result;
}

/// "node 17 (einsum bqhe,hed->bqd, in scope attention)".
inline std::string node_text(const xshard::graph::node_plan& step) {
  if (step.node == xshard::graph::no_node) return "end (the parameter gradients, one all_reduce_many per axis set)";
  std::string s = "node " + std::to_string(step.node) + " (";
  s += step.op.find("->") != std::string_view::npos ? "einsum " + std::string(step.op) : std::string(step.op);
  if (!step.name.empty()) s += ", " + std::string(step.name);
  return s + ")";
}

template <class L>
void print_layer_plan(const char* what) {
  static constexpr auto forward_plan = L::forward_plan();
  static constexpr auto backward_plan = L::backward_plan();
  std::cout << "  " << what << ": " << L::forward_collectives() << " forward, " << L::backward_collectives()
            << " backward\n";
  for (const auto& s : forward_plan)
    std::cout << "    forward   " << node_text(s) << ": " << xshard::graph::collectives_text(s, Mesh::axes) << "\n";
  for (const auto& s : backward_plan)
    std::cout << "    backward  " << node_text(s) << ": " << xshard::graph::collectives_text(s, Mesh::axes) << "\n";
}

template <class Layout>
void print_plans(const char* name) {
  using m = model<Layout>;
  std::cout << "== layout " << name << " on the mesh data=2, model=2 (4 devices)\n\n";
  const std::array<std::int64_t, 3> act{batch, seq, width}, proj{heads, head_dim, width};
  std::cout << "activations between blocks [batch, seq, width] by spec (" << Layout::act::text.view() << "):\n"
            << xshard::visualize<Mesh, typename Layout::act>(act) << "\n";
  std::cout << "W_q, W_k, W_v, W_o [heads, head_dim, width] by (" << Layout::heads::text.view() << "):\n"
            << xshard::visualize<Mesh, typename Layout::heads>(proj) << "\n";
  std::cout << "== collectives from the compile-time plans of the graphs (nn/decoder.hpp); every other node runs "
               "on its block alone\n";
  print_layer_plan<typename m::embed>("embedding (vocabulary over model)");
  print_layer_plan<typename m::block>("decoder block (each of the layers)");
  print_layer_plan<typename m::head>("head (log-softmax over the vocabulary split on model)");
  std::cout << "  per step: " << m::embed::forward_collectives() + m::embed::backward_collectives() << " + " << layers
            << " x " << m::block::forward_collectives() + m::block::backward_collectives() << " + "
            << m::head::forward_collectives() + m::head::backward_collectives()
            << " + 1 (the loss) = " << collectives_per_step<Layout>()
            << " collectives on every device (AdamW adds none)\n\n";
}

}  // namespace train_transformer
