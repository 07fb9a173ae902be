// xshard/optim/accumulate.hpp - gradient accumulation over micro-batches,
// the synchronisation mode part of the type:
//
// Example (compiled in tests/compile/doc_optim.cpp):
//   xshard::grad_accumulator<G, xshard::grad_sync::at_end> acc;   // G: gradients partial over "data"
//   for (auto& mb : micro_batches) acc.add(local_gradient(mb));    // no communication
//   opt.step(params, acc.mean());   // still partial: the optimizer reduces once (all-reduce or ZeRO's
//                                   // reduce-scatter)
//
//   xshard::grad_accumulator<G, xshard::grad_sync::every_micro_batch> acc2;
//   acc2.add(g);                    // one all-reduce per micro-batch (overlappable with the next backward)
//   opt.step(params, acc2.mean());  // already reduced
//
// mean() is the sum of the micro-batch gradients divided by their count:
// the gradient of the mean loss over the whole batch when each micro-batch
// gradient is that of its own mean loss and the micro-batches are equal.
// collectives(k) says how many collectives k add() calls run (the plan that
// the tests compare with the counters).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "../core/error.hpp"
#include "tensors.hpp"

namespace xshard {

/// When accumulated gradients are reduced over their partial axes.
enum class grad_sync {
  every_micro_batch,  ///< one all-reduce per add(); the sum is of reduced gradients
  at_end,             ///< none in add(); the sum stays partial, reduced once by its consumer
};

template <optim_tuple G, grad_sync Sync>
class grad_accumulator {
  static_assert(detail::check_param_tuple<G>());
  static_assert(detail::common_partial<G>() != ~axis_set{0},
                "xshard: grad_accumulator: the gradients are partial sums over different mesh axes");

 public:
  using gradients_type = G;
  using value_type = std::conditional_t<Sync == grad_sync::every_micro_batch, reduced_tuple_t<G>, G>;
  static constexpr grad_sync sync = Sync;

  /// Collectives run by `micro_batches` calls of add() (per device).
  static constexpr std::int64_t collectives(std::int64_t micro_batches) {
    if constexpr (Sync == grad_sync::at_end || !detail::optim_tensor<std::tuple_element_t<0, G>>::is_sharded) {
      return 0;
    } else {
      return detail::nontrivial<detail::tuple_mesh_t<G>>(detail::common_partial<G>()) != 0 ? micro_batches : 0;
    }
  }

  /// Adds one micro-batch's gradients.
  void add(const G& g) {
    if constexpr (Sync == grad_sync::every_micro_batch)
      accumulate(detail::reduce_partial(g));
    else
      accumulate(g);
  }

  std::int64_t count() const { return count_; }

  /// The sum over the micro-batches divided by their count.
  value_type mean() const {
    if (!sum_) throw error("xshard: grad_accumulator::mean: no micro-batch was added");
    value_type out = *sum_;
    using T = optim_value_t<G>;
    const T k = static_cast<T>(count_);
    detail::for_each_index<std::tuple_size_v<G>>([&](auto i) {
      using X = std::tuple_element_t<decltype(i)::value, value_type>;
      auto& x = std::get<decltype(i)::value>(out);
      T* d = detail::optim_tensor<X>::data(x);
      for (std::size_t e = 0; e < detail::optim_tensor<X>::size(x); ++e) d[e] /= k;
    });
    return out;
  }

  /// Forgets the micro-batches (after an optimizer step).
  void clear() {
    sum_.reset();
    count_ = 0;
  }

 private:
  void accumulate(const value_type& g) {
    ++count_;
    if (!sum_) {
      sum_ = g;
      return;
    }
    detail::for_each_index<std::tuple_size_v<G>>([&](auto i) {
      constexpr std::size_t k = decltype(i)::value;
      using X = std::tuple_element_t<k, value_type>;
      auto& s = std::get<k>(*sum_);
      const auto& x = std::get<k>(g);
      if (detail::optim_tensor<X>::block(s).shape() != detail::optim_tensor<X>::block(x).shape())
        throw error("xshard: grad_accumulator::add: tensor " + std::to_string(k) + " of micro-batch " +
                    std::to_string(count_) + " has another shape than the first one's");
      auto* d = detail::optim_tensor<X>::data(s);
      const auto* e = detail::optim_tensor<X>::data(x);
      for (std::size_t j = 0; j < detail::optim_tensor<X>::size(s); ++j) d[j] += e[j];
    });
  }

  std::optional<value_type> sum_;
  std::int64_t count_ = 0;
};

}  // namespace xshard
