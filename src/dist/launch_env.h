// Where this process sits in a multi-process launch, read from the launcher's environment:
// torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK) or OpenMPI's mpirun
// (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK). A process
// started alone is rank 0 of 1. The NCCL communicator uses this to pick its GPU
// (local_rank) and rank; the in-process communicator does not need it.
#pragma once

#include <functional>
#include <string>

namespace tf {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string launcher = "none";  // none | torchrun | mpirun
};

// `getenv` returns nullptr for unset variables (std::getenv by default). Throws tf::Error
// naming the variable when one is malformed or the rank lies outside the world.
LaunchEnv read_launch_env(const std::function<const char*(const char*)>& getenv = nullptr);

}  // namespace tf
