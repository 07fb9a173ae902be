// train_transformer: the sequence-parallel run on the 2x2 mesh.
#include "mesh_run.hpp"

namespace train_transformer {
run_result train_sp(const Dense::params& init, const options& o, std::size_t first_step) {
  return train_mesh<Sp>(init, o, first_step);
}
void print_plans_sp() { print_plans<Sp>("sp (sequence parallel on top of tensor parallel)"); }
}  // namespace train_transformer
