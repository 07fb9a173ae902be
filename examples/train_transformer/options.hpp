// train_transformer's command line: the options (read by every TU) and the
// parser (cli.cpp). The parser has a translation unit of its own: CLI11 is
// header-only and costs seconds of g++ -O2 in any TU that parses with it,
// so main.cpp does not pay for it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace train_transformer {

enum class layout_kind { tp, sp };

struct options {
  std::size_t steps = 400;
  layout_kind layout = layout_kind::tp;
  int devices = 4;
  bool progress = true;
  bool check_single = true;
  std::string trace_path = "train_transformer.trace.json";
  std::string save_dir, resume_dir, init_file;
  bool print_losses = false;
  /// --mpi: one MPI rank per device (main.cpp checks the build has MPI).
  bool mpi = false;
};

/// Reads the command line into `o`. Returns the exit status to stop with
/// (0 after --help, 2 after a usage error, printed), or nothing to run.
std::optional<int> parse_command_line(int argc, char** argv, options& o);

}  // namespace train_transformer
