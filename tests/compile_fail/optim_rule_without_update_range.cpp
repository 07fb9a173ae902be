// An optimizer over a rule without update_range (an older rule that only
// updates a whole tensor over the pool) is a compile error saying what a
// rule needs.
// expect: the update rule needs states\(\), state_names and update_range
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <xshard/optim/optimizer.hpp>
#include <xtensor/xtensor.hpp>

struct halve {  // p -= g / 2, no state
  static constexpr std::array<std::string_view, 0> state_names{};
  std::size_t states() const { return 0; }
#ifdef XSHARD_NEGATIVE
  void update(float* p, const float* g, float, float* const*, std::size_t n, std::int64_t) const {
#else
  void update_range(float* p, const float* g, float, float* const*, std::size_t n, std::int64_t) const {
#endif
      for (std::size_t i = 0; i < n; ++i) p[i] -= g[i] / 2;
}
}
;

using P = std::tuple<xt::xtensor<float, 1>>;

void step(P& params, const P& grads) {
  xshard::optimizer<halve, P> opt(halve{}, params);
  opt.step(params, grads);
}

int main() { return 0; }
