#!/usr/bin/env bash
# Compile time of a TU that defines a graph layer of N nodes (a chain of
# einsum -> + bias -> gelu blocks over one weight and one bias, plus the
# input and parameter leaves) and instantiates its forward and vjp, plain
# (float) and sharded (data x model on a 2x2 mesh), g++ -O2. Prints one row
# per N: N, nodes, seconds (plain), seconds (sharded).
#
#   bench/compile_time/run_graph.sh [CXX] [N...]     (default: g++ 4 12 24)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
include="$here/../../include"
cxx="${1:-g++}"
shift || true
sizes=("$@")
if [ "${#sizes[@]}" -eq 0 ]; then sizes=(4 12 24); fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
gen() {  # gen N SHARDED
  local n=$1 sharded=$2 blocks=$(( ($1 + 2) / 3 ))
  {
    echo '#include <xshard/graph/graph.hpp>'
    echo '#include <xshard/nn/mlp.hpp>'
    echo '#include <xshard/spmd/thread_mesh.hpp>'
    echo 'namespace g = xshard::graph;'
    if [ "$sharded" = 1 ]; then
      echo 'using M = xshard::mesh<"data=2, model=2">;'
      echo 'template <std::size_t R, class S> using tensor = xshard::sharded<float, R, M, S>;'
      echo 'using X = tensor<2, xshard::spec<"data, None">>; using W = tensor<2, xshard::spec<"None, None">>; using B = tensor<1, xshard::spec<"None">>;'
    else
      echo 'using X = xt::xtensor<float, 2>; using W = xt::xtensor<float, 2>; using B = xt::xtensor<float, 1>;'
    fi
    echo 'struct def {'
    echo '  using input = X; using params = std::tuple<W, B>;'
    echo '  static constexpr std::array<std::string_view, 2> param_names{"w", "b"};'
    echo '  template <class A, class P, class Q> static auto forward(A x, P w, Q b) {'
    echo '    auto h0 = x;'
    for ((i = 1; i <= blocks; ++i)); do
      echo "    auto h$i = g::gelu(g::einsum<\"...n,mn->...m\">(h$((i - 1)), w) + b);"
    done
    echo "    return h$blocks;"
    echo '  }'
    echo '};'
    echo 'using L = g::layer<def>;'
    echo "static_assert(L::program_type::size == $(( blocks * 3 + 3 )));"
    if [ "$sharded" = 1 ]; then
      echo 'void run(xshard::thread_mesh<M>& m, const xt::xtensor<float, 2>& x0, const xt::xtensor<float, 2>& w0, const xt::xtensor<float, 1>& b0) {'
      echo '  m.run([&](auto& dev) {'
      echo '    L::params p{xshard::distribute<xshard::spec<"None, None">>(dev, w0), xshard::distribute<xshard::spec<"None">>(dev, b0)};'
      echo '    auto x = xshard::distribute<xshard::spec<"data, None">>(dev, x0);'
      echo '    auto [y, r] = L{}.forward(p, x); auto grads = L{}.vjp(p, r, y); (void)grads;'
      echo '  });'
      echo '}'
    else
      echo 'auto run(const L::params& p, const X& x) { auto [y, r] = L{}.forward(p, x); return L{}.vjp(p, r, y); }'
    fi
    echo 'int main() {}'
  } > "$work/g_${n}_${sharded}.cpp"
}
echo "| N (einsum, +, gelu blocks x3) | nodes | plain -O2 (s) | sharded -O2 (s) |"
echo "|---:|---:|---:|---:|"
for n in "${sizes[@]}"; do
  row="| $n | $(( ( (n + 2) / 3 ) * 3 + 3 ))"
  for sharded in 0 1; do
    gen "$n" "$sharded"
    start=$(date +%s.%N)
    "$cxx" -std=c++20 -O2 -I"$include" -c "$work/g_${n}_${sharded}.cpp" -o "$work/g.o"
    end=$(date +%s.%N)
    row="$row | $(echo "$end - $start" | bc -l | xargs printf '%.1f')"
  done
  echo "$row |"
done
