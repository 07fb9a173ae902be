// xshard/einsum/plan.hpp - the order in which 3+ operands are contracted.
//
// Greedy on cost, like opt_einsum's "greedy": at each step contract the pair
// whose contraction does the fewest multiply-adds (the product of the
// extents of every label either operand has), keeping the labels still needed
// (by the output or by another operand). Ties go to the lowest indices. The
// plan is constexpr: with static extents it is made at compile time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../core/static_vector.hpp"
#include "parse.hpp"

namespace xshard {

using label_set = static_vector<int, max_einsum_labels>;

struct einsum_step {
  int lhs = 0, rhs = 0;   ///< positions in the current operand list (lhs < rhs)
  label_set result{};     ///< labels of the intermediate (or the output, last step)
  std::int64_t cost = 0;  ///< multiply-adds
};

struct contraction_order {
  static_vector<einsum_step, max_einsum_operands> steps{};
  std::int64_t total_cost = 0;
};

namespace detail {
constexpr bool contains(const label_set& s, int id) {
  for (int x : s)
    if (x == id) return true;
  return false;
}
constexpr void add_unique(label_set& s, int id) {
  if (!contains(s, id)) s.push_back(id);
}
}  // namespace detail

/// Plans pairwise contractions for 2+ operands. After step s the two
/// contracted operands are removed and the intermediate is appended.
constexpr contraction_order plan_einsum(const einsum_binding& b, const einsum_extents& ext) {
  contraction_order plan;
  static_vector<label_set, max_einsum_operands> ops;
  for (const auto& labels : b.operand_labels) {
    label_set s;
    for (int id : labels) detail::add_unique(s, id);
    ops.push_back(s);
  }
  label_set out;
  for (int id : b.output_labels) out.push_back(id);
  while (ops.size() >= 2) {
    einsum_step best;
    best.cost = -1;
    for (std::size_t i = 0; i < ops.size(); ++i)
      for (std::size_t j = i + 1; j < ops.size(); ++j) {
        label_set all = ops[i];
        for (int id : ops[j]) detail::add_unique(all, id);
        std::int64_t cost = 1;
        for (int id : all) cost *= ext.of[id] > 0 ? ext.of[id] : 1;
        if (best.cost >= 0 && cost >= best.cost) continue;
        label_set keep;
        if (ops.size() == 2) {
          keep = out;
        } else {
          for (int id : all) {
            bool needed = detail::contains(out, id);
            for (std::size_t k = 0; k < ops.size() && !needed; ++k)
              if (k != i && k != j) needed = detail::contains(ops[k], id);
            if (needed) keep.push_back(id);
          }
        }
        best = {static_cast<int>(i), static_cast<int>(j), keep, cost};
      }
    plan.steps.push_back(best);
    plan.total_cost += best.cost;
    static_vector<label_set, max_einsum_operands> next;
    for (std::size_t k = 0; k < ops.size(); ++k)
      if (static_cast<int>(k) != best.lhs && static_cast<int>(k) != best.rhs) next.push_back(ops[k]);
    next.push_back(best.result);
    ops = next;
  }
  return plan;
}

}  // namespace xshard
