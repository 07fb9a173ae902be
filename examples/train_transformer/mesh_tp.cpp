// train_transformer: the tensor-parallel run (Megatron) on the 2x2 mesh.
#include "mesh_run.hpp"

namespace train_transformer {
run_result train_tp(const Dense::params& init, const options& o, std::size_t first_step) {
  return train_mesh<Tp>(init, o, first_step);
}
void print_plans_tp() { print_plans<Tp>("tp (Megatron tensor parallel)"); }
}  // namespace train_transformer
