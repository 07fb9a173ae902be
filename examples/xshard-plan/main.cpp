// xshard-plan: the sharding engine on the command line.
//
//   xshard-plan --mesh "data=4,model=2" [--devices 7,6,5,4,3,2,1,0] --spec "data,None" [--shape 8,16]
//   xshard-plan --hybrid --ici 1,4,1 --dcn 2,1,1 --axes data,fsdp,tensor --topology devices.json --spec "fsdp,None"
//
// Prints one JSON object (see DESIGN.md): sharding_type, tile_assignment,
// group_assignment, replication_groups, hlo, hlo_v2, sdy (Shardy's mesh line
// and sharding attribute), mesh, device_ids and, with --shape, shards.
// `--visualize` prints the text picture instead (needs --shape); `--help`
// lists the options. Bad input: one line on stderr, nothing on stdout, exit
// code 2. The command line is read with CLI11, the JSON written with
// nlohmann-json (see plan_cli.hpp).
#include <iostream>
#include <string_view>
#include <vector>

#include "plan_cli.hpp"

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  const xshard_plan::cli_result r = xshard_plan::run_cli(args);
  std::cout << r.out;
  std::cerr << r.err;
  return r.status;
}
