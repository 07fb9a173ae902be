// train_mlp's command line, read with CLI11 (options.hpp says why it has a
// translation unit of its own).
#include <CLI/CLI.hpp>  // command line (libcli11-dev)
#include <iostream>
#include <string>

#include "options.hpp"

namespace train_mlp {

std::optional<int> parse_command_line(int argc, char** argv, options& o) {
  bool no_progress = false;
  std::string optimizer = "sgd";
  std::string remat = "dots_saveable";
  CLI::App app{"train_mlp: 8 residual MLP blocks trained data x model on a 2x2 thread mesh", "train_mlp"};
  app.add_option("--steps", o.steps, "training steps")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}))
      ->capture_default_str();
  app.add_option("--trace", o.trace_path, "Chrome trace of the last steps")->capture_default_str();
  app.add_flag("--no-progress", no_progress, "no progress bar");
  app.add_option("--optimizer", optimizer, "sgd (lr 0.1) or adamw (lr 1e-3, weight decay 0.01)")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  app.add_option("--devices", o.devices, "4 (the 2x2 mesh) or 1 (plain tensors)")
      ->check(CLI::IsMember({4, 1}))
      ->capture_default_str();
  app.add_flag("--print-losses", o.print_losses, "every step's loss with 9 digits");
  app.add_option("--remat", remat,
                 "what each layer's forward keeps: dots_saveable (x and h; gelu recomputed), save_all (everything the "
                 "backward reads, as PyTorch eager) or recompute (x only)")
      ->check(CLI::IsMember({"dots_saveable", "save_all", "recompute"}))
      ->capture_default_str();
  CLI::Option* save = app.add_option("--save", o.save_dir, "write DIR/checkpoint.h5 at the end");
  CLI::Option* resume = app.add_option("--resume", o.resume_dir, "start from DIR/checkpoint.h5");
  CLI::Option* compare = app.add_option("--compare", o.compare_file, "check the final parameters against a checkpoint");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "train_mlp: " << e.what() << " (see --help)\n";
    return 2;
  }
#if !defined(XSHARD_WITH_HDF5)
  for (const CLI::Option* opt : {save, resume, compare})
    if (opt->count() > 0) {
      std::cerr << "train_mlp: " << opt->get_name()
                << " needs checkpoints: build with HDF5 (libhdf5-dev, target xshard::hdf5)\n";
      return 2;
    }
#else
  (void)save, (void)resume, (void)compare;
#endif
  o.progress = !no_progress;
  o.opt = optimizer == "adamw" ? optimizer_kind::adamw : optimizer_kind::sgd;
  for (const xshard::remat p : xshard::remat_policies)
    if (xshard::remat_name(p) == remat) o.policy = p;
  return std::nullopt;
}

}  // namespace train_mlp
