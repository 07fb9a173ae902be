// train_mlp's command line: the options (read by main.cpp and
// single_device.cpp) and the parser (cli.cpp). The parser has a translation
// unit of its own: CLI11 is header-only and costs about 6 s of g++ -O2 in
// any TU that parses with it, so main.cpp does not pay for it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <xshard/scan/remat.hpp>

namespace train_mlp {

enum class optimizer_kind { sgd, adamw };

struct options {
  std::size_t steps = 300;
  std::string trace_path = "train_mlp.trace.json";
  bool progress = true;
  optimizer_kind opt = optimizer_kind::sgd;
  std::string save_dir, resume_dir, compare_file;
  int devices = 4;
  bool print_losses = false;
  /// What each layer's forward keeps (both runs): dots_saveable (the
  /// default) keeps x and h and recomputes gelu; save_all keeps everything
  /// the backward reads, as PyTorch eager does; recompute keeps x only.
  xshard::remat policy = xshard::remat::dots_saveable;
};

/// Reads the command line into `o`. Returns the exit status to stop with
/// (0 after --help, 2 after a usage error, printed), or nothing to run.
std::optional<int> parse_command_line(int argc, char** argv, options& o);

}  // namespace train_mlp
