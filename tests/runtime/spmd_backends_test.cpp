// The sharded-tensor cases that the MPI test program also runs
// (tests/spmd/sharded_cases.hpp), here on the thread backend.
#include <gtest/gtest.h>

#include <xshard/spmd/thread_mesh.hpp>

#include "../spmd/sharded_cases.hpp"

namespace {

TEST(SpmdBackends, ShardedCasesOnThreads) {
  xshard::thread_mesh<xshard::mesh<"x=2, y=2">> devices;
  for (const std::string& f : xshard_test::run_sharded_cases(devices)) ADD_FAILURE() << f;
  xshard::thread_mesh<xshard::mesh<"x=2, y=2", 3, 1, 2, 0>> shuffled;
  for (const std::string& f : xshard_test::run_sharded_cases(shuffled)) ADD_FAILURE() << f;
}

}  // namespace
