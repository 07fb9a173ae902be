// train_transformer's command line, read with CLI11 (options.hpp says why it
// has a translation unit of its own).
#include <CLI/CLI.hpp>  // command line (libcli11-dev)
#include <iostream>
#include <string>

#include "options.hpp"

namespace train_transformer {

std::optional<int> parse_command_line(int argc, char** argv, options& o) {
  bool no_progress = false, no_check = false;
  std::string layout = "tp";
  CLI::App app{"train_transformer: a decoder trained to reverse digits on a 2x2 thread mesh", "train_transformer"};
  app.add_option("--steps", o.steps, "training steps")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}))
      ->capture_default_str();
  app.add_option("--layout", layout, "tp (tensor parallel) or sp (sequence parallel)")
      ->check(CLI::IsMember({"tp", "sp"}))
      ->capture_default_str();
  app.add_option("--devices", o.devices, "4 (the 2x2 mesh) or 1 (plain tensors)")
      ->check(CLI::IsMember({4, 1}))
      ->capture_default_str();
  app.add_flag("--no-check", no_check, "skip the single-device reference run");
  app.add_option("--trace", o.trace_path, "Chrome trace of the last steps")->capture_default_str();
  app.add_flag("--no-progress", no_progress, "no progress bar");
  app.add_flag("--print-losses", o.print_losses, "every step's loss with 9 digits");
  app.add_flag("--mpi", o.mpi, "run under mpiexec -n 4, one MPI rank per device (rank 0 reports)");
  CLI::Option* save = app.add_option("--save", o.save_dir, "write DIR/checkpoint.h5 at the end");
  CLI::Option* resume = app.add_option("--resume", o.resume_dir, "start from DIR/checkpoint.h5");
  CLI::Option* init = app.add_option("--save-init", o.init_file, "write the initial parameters and batches");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "train_transformer: " << e.what() << " (see --help)\n";
    return 2;
  }
#if !defined(XSHARD_WITH_HDF5)
  for (const CLI::Option* opt : {save, resume, init})
    if (opt->count() > 0) {
      std::cerr << "train_transformer: " << opt->get_name()
                << " needs checkpoints: build with HDF5 (libhdf5-dev, target xshard::hdf5)\n";
      return 2;
    }
#else
  (void)save, (void)resume, (void)init;
#endif
  o.progress = !no_progress;
  o.check_single = !no_check;
  o.layout = layout == "sp" ? layout_kind::sp : layout_kind::tp;
  return std::nullopt;
}

}  // namespace train_transformer
