// Launcher environment variables; see launch_env.h.
#include "dist/launch_env.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace tf {
namespace {

int parse_int(const char* name, const char* value) {
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || value[used] != '\0' || v < 0) fail("environment variable {}='{}' is not a non-negative integer", name, value);
  return v;
}

}  // namespace

LaunchEnv read_launch_env(const std::function<const char*(const char*)>& getenv_fn) {
  auto get = [&](const char* name) -> const char* { return getenv_fn ? getenv_fn(name) : std::getenv(name); };
  struct Names {
    const char *rank, *size, *local, *launcher;
  };
  for (const Names n : {Names{"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun"},
                        Names{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun"}}) {
    const char* rank = get(n.rank);
    const char* size = get(n.size);
    if (!rank && !size) continue;
    if (!rank || !size) fail("{} is set without {} (both come from the launcher)", rank ? n.rank : n.size, rank ? n.size : n.rank);
    LaunchEnv e{.rank = parse_int(n.rank, rank), .world_size = parse_int(n.size, size), .launcher = n.launcher};
    const char* local = get(n.local);
    e.local_rank = local ? parse_int(n.local, local) : e.rank;
    if (e.world_size < 1 || e.rank >= e.world_size)
      fail("{}={} is outside {}={}", n.rank, e.rank, n.size, e.world_size);
    return e;
  }
  return LaunchEnv{};
}

}  // namespace tf
