// The MPI backend's use of the same-host direct path (comm/direct_access.h): the probe over
// MPI when a group is made, and MPI messages as the path's descriptor transport.
#include "comm/direct_access.h"

#include <fmt/format.h>

#include "comm/algorithms/signature_check.h"
#include "comm/env.h"
#include "comm/mpi/mpi_process_group.h"

namespace fsdp::comm::mpi {

bool probe_direct_access(MPI_Comm comm, direct::Path& path) {
  path = direct::Path();
  const bool wanted = env::mpi_direct();
  std::lock_guard lock(mpi_mutex());
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (size < 2) return false;
  MPI_Comm node = MPI_COMM_NULL;
  int node_size = 0;
  FSDP_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
                 "mpi backend: probing shared memory");
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);

  const direct::Probe probe(rank, size);
  const direct::ProbeWord mine = probe.mine();
  std::vector<direct::ProbeWord> all(static_cast<std::size_t>(size));
  FSDP_MPI_CHECK(
      MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, comm),
      "mpi backend: probing shared memory");
  int ok = wanted && node_size == size && probe.can_read_all(all, rank);
  // Every rank has read every word it needed before anyone leaves (and frees its word).
  FSDP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm),
                 "mpi backend: probing shared memory");
  if (!ok) return false;
  path = direct::Path(std::move(all), probe.mailbox());
  return true;
}

std::string MpiProcessGroup::transport() const {
  if (!direct_.on()) return "mpi: messages";
  return direct::Path::describe("mpi", "messages below");
}

void MpiProcessGroup::direct_collective(const Collective& c) {
  direct::Transport t;
  t.require_matching = [&](const CollectiveSignature& mine,
                           const std::vector<CollectiveSignature>& theirs) {
    algorithms::require_matching(where(), rank(), mine, theirs);
  };
  t.fail = [&](const std::string& reason, bool timed_out) { fail(reason, timed_out); };
  t.where = where();
  t.name_ranks = [&](const std::vector<int>& ranks) { return name_ranks(ranks); };
  t.timeout = options_.timeout;
  direct_.run(c, rank(), t);
}

}  // namespace fsdp::comm::mpi
