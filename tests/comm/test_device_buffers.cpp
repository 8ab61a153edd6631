// Collectives on fake_cuda buffers. The threads backend (each rank on its own device,
// fake_cuda:rank, as each rank owns a GPU): every collective gives the bytes the cpu path gives; a
// collective runs in order with its stream's work; Work::block_stream orders another stream after
// it; collectives on several streams and on the host meet their peers' in issue order. The fake
// group of one rank: its identity copy is queued on the stream.
#define BOOST_TEST_MODULE comm_device_buffers
#include <fmt/format.h>

#include <boost/test/unit_test.hpp>
#include <future>
#include <latch>
#include <mutex>

#include "comm/fake/fake_process_group.h"
#include "comm/threads/run_ranks.h"
#include "core/device_copy.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/stream.h"
#include "tests/comm/collective_checks.h"
#include "tests/support/gate.h"
#include "tests/support/queued_like_cuda.h"

using namespace fsdp;
using namespace fsdp::comm;
using fsdp::comm::testing::Bytes;

namespace {

Device device_of(const ProcessGroup& pg) {
  return Device(DeviceType::FakeCUDA, pg.rank());
}

// `bytes` in a fresh storage of `device`, copied on its current stream.
std::unique_ptr<Storage> to_device(const Bytes& bytes, Device device) {
  auto s = std::make_unique<Storage>(std::max<std::size_t>(bytes.size(), 1), device);
  copy_bytes(s->data(), device, bytes.data(), kCPU, bytes.size());
  return s;
}

// Reads it back (after the current stream's work: the copy to the host waits for it).
Bytes to_host(const Storage& s, std::size_t nbytes) {
  Bytes out(nbytes);
  copy_bytes(out.data(), kCPU, s.data(), s.device(), nbytes);
  return out;
}

using fsdp::testing::Gate;  // tests/support/gate.h
using fsdp::testing::QueuedLikeCuda;

// Runs body on every rank; rank threads collect failures, the main thread reports them.
void on_ranks(int world, const std::function<std::vector<std::string>(ProcessGroup&)>& body) {
  std::mutex mutex;
  std::vector<std::string> failures;
  run_ranks(world, [&](std::shared_ptr<ProcessGroup> pg) {
    auto mine = body(*pg);
    device_synchronize(device_of(*pg));  // nothing of this rank is still queued when it returns
    std::lock_guard lock(mutex);
    failures.insert(failures.end(), mine.begin(), mine.end());
  });
  for (const auto& f : failures) BOOST_ERROR(f);
}

void expect_equal(std::vector<std::string>& failures, const ProcessGroup& pg, const char* what,
                  const Bytes& actual, const Bytes& expected, DType dtype) {
  std::string diff = fsdp::comm::testing::compare(actual, expected, dtype);
  if (!diff.empty()) failures.push_back(fmt::format("rank {}: {}: {}", pg.rank(), what, diff));
}

// Each collective on device buffers against the same call on cpu buffers of the same group.
// Where the ranks' buffers live: each rank on its own device (as each owns a GPU), or all on
// fake_cuda:0 as thread ranks sharing one GPU, on their own streams or all on its default stream.
enum class Placement { OwnDevice, SharedDeviceOwnStreams, SharedDeviceOneStream };

void check_collectives_equal_cpu(std::initializer_list<DType> dtypes,
                                 Placement placement = Placement::OwnDevice) {
  for (int world : {2, 3, 4}) {
    on_ranks(world, [&](ProcessGroup& pg) {
      std::vector<std::string> failures;
      const Device dev =
          placement == Placement::OwnDevice ? device_of(pg) : Device(DeviceType::FakeCUDA, 0);
      StreamGuard guard(placement == Placement::SharedDeviceOwnStreams ? new_stream(dev)
                                                                       : current_stream(dev));
      for (DType dtype : dtypes) {
        for (std::size_t count : {std::size_t(1), std::size_t(7), std::size_t(1000)}) {
          const std::size_t bytes = count * dtype_size(dtype);
          const Bytes in = fsdp::comm::testing::make_input(dtype, count, pg.rank(), 1);
          const Bytes wide = fsdp::comm::testing::make_input(dtype, count * world, pg.rank(), 2);
          const std::string label =
              fmt::format("{} x {} at {} ranks", dtype_name(dtype), count, world);

          Bytes cpu_out(bytes * world);
          pg.all_gather(in.data(), cpu_out.data(), count, dtype);
          auto d_in = to_device(in, dev), d_out = to_device(Bytes(bytes * world), dev);
          pg.all_gather(d_in->data(), d_out->data(), count, dtype, dev);
          expect_equal(failures, pg, ("all_gather " + label).c_str(),
                       to_host(*d_out, bytes * world), cpu_out, dtype);

          Bytes cpu_rs(bytes);
          pg.reduce_scatter(wide.data(), cpu_rs.data(), count, dtype, ReduceOp::Avg);
          auto d_wide = to_device(wide, dev), d_rs = to_device(Bytes(bytes), dev);
          pg.reduce_scatter_async(d_wide->data(), d_rs->data(), count, dtype, ReduceOp::Avg, dev)
              ->wait();
          expect_equal(failures, pg, ("reduce_scatter " + label).c_str(), to_host(*d_rs, bytes),
                       cpu_rs, dtype);

          Bytes cpu_ar = wide;
          pg.all_reduce(cpu_ar.data(), count * world, dtype, ReduceOp::Sum);
          auto d_ar = to_device(wide, dev);
          pg.all_reduce(d_ar->data(), count * world, dtype, ReduceOp::Sum, dev);
          expect_equal(failures, pg, ("all_reduce " + label).c_str(), to_host(*d_ar, bytes * world),
                       cpu_ar, dtype);

          Bytes cpu_bc = in;
          pg.broadcast(cpu_bc.data(), count, dtype, world - 1);
          auto d_bc = to_device(in, dev);
          pg.broadcast(d_bc->data(), count, dtype, world - 1, dev);
          expect_equal(failures, pg, ("broadcast " + label).c_str(), to_host(*d_bc, bytes), cpu_bc,
                       dtype);
        }
      }
      current_stream(dev).synchronize();  // this rank's part, before the next world's
      return failures;
    });
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(collectives_on_fake_cuda_equal_cpu) {
  check_collectives_equal_cpu({DType::Float32, DType::BFloat16, DType::Int64});
}

BOOST_AUTO_TEST_CASE(collectives_queued_by_the_host_as_on_cuda_equal_cpu) {
  QueuedLikeCuda queued;
  check_collectives_equal_cpu({DType::Float32, DType::BFloat16, DType::Float16, DType::Float64,
                               DType::Int64, DType::Int32, DType::UInt8});
}

// As on one GPU: every rank on fake_cuda:0, each on its own stream, or all on one stream (where
// work launched on the stream would wait for itself, the host's rendezvous does not).
BOOST_AUTO_TEST_CASE(queued_by_the_host_ranks_share_one_device_and_its_streams) {
  QueuedLikeCuda queued;
  check_collectives_equal_cpu({DType::Float32, DType::BFloat16, DType::Int32},
                              Placement::SharedDeviceOwnStreams);
  check_collectives_equal_cpu({DType::Float32, DType::BFloat16, DType::Int32},
                              Placement::SharedDeviceOneStream);
}

// "" when the two ints a compute stream copied hold the gathered 10 and 11 (ranks 0 and 1's
// values), else what it saw.
static std::string gathered_10_11(const Bytes& got, int rank) {
  int values[2];
  std::memcpy(values, got.data(), sizeof values);
  if (values[0] == 10 && values[1] == 11) return "";
  return fmt::format("rank {}: compute stream saw {} {}, expected 10 11", rank, values[0],
                     values[1]);
}

// CUDA's path: rank 0's input is written on its stream behind a gate. The all_gather is issued
// on every rank without the host waiting for the gate; neither rank's collective completes before
// the gate opens (rank 1's stream waits on rank 0's), and each rank's compute stream, ordered by
// block_stream, then sees both inputs.
BOOST_AUTO_TEST_CASE(queued_by_the_host_a_collective_waits_for_its_peers_streams) {
  QueuedLikeCuda queued;
  std::latch checked(2);
  Gate gate;
  on_ranks(2, [&](ProcessGroup& pg) {
    std::vector<std::string> failures;
    const Device dev = device_of(pg);
    const Stream unshard = new_stream(dev), compute = current_stream(dev);
    const int mine = 10 + pg.rank();
    auto input = to_device(Bytes(sizeof(int)), dev);
    auto output = to_device(Bytes(2 * sizeof(int)), dev);
    auto seen = to_device(Bytes(2 * sizeof(int)), dev);
    device_synchronize(dev);
    std::shared_ptr<Work> work;
    {
      StreamGuard guard(unshard);
      if (pg.rank() == 0) launch(unshard, gate.waiter());
      void* in = QueuedLikeCuda::host_view(input->data());
      launch(unshard, [in, mine] { *static_cast<int*>(in) = mine; });
      work = pg.all_gather_async(input->data(), output->data(), 1, DType::Int32, dev);
    }
    if (work->test())
      failures.push_back(
          fmt::format("rank {}: the all_gather finished before rank 0's input", pg.rank()));
    work->block_stream(compute);
    copy_bytes(seen->data(), dev, output->data(), dev, 2 * sizeof(int));  // on compute
    checked.arrive_and_wait();
    if (pg.rank() == 0) gate.open();
    if (auto why = gathered_10_11(to_host(*seen, 2 * sizeof(int)), pg.rank()); !why.empty())
      failures.push_back(why);
    work->wait();
    return failures;
  });
}

// The collective waits for the work queued before it on its stream (here held back by a gate),
// and a stream that block_stream()ed on it reads the gathered values.
BOOST_AUTO_TEST_CASE(all_gather_is_ordered_in_its_stream_and_block_stream_orders_another) {
  on_ranks(2, [](ProcessGroup& pg) {
    std::vector<std::string> failures;
    const Device dev = device_of(pg);
    const Stream unshard = new_stream(dev), compute = current_stream(dev);
    const int mine = 10 + pg.rank();
    auto input = to_device(Bytes(sizeof(int)), dev);  // zero until the gated kernel writes it
    auto output = to_device(Bytes(2 * sizeof(int)), dev);
    auto seen = to_device(Bytes(2 * sizeof(int)), dev);
    device_synchronize(dev);
    Gate gate;
    std::shared_ptr<Work> work;
    {
      StreamGuard guard(unshard);
      launch(unshard, gate.waiter());
      void* in = launched_address(dev, input->data(), "test");
      launch(unshard, [in, mine] { *static_cast<int*>(in) = mine; });
      work = pg.all_gather_async(input->data(), output->data(), 1, DType::Int32, dev);
    }
    if (work->test()) failures.push_back("the all_gather finished before its stream's input");
    work->block_stream(compute);
    void* out = launched_address(dev, output->data(), "test");
    void* copy = launched_address(dev, seen->data(), "test");
    launch(compute, [out, copy] { std::memcpy(copy, out, 2 * sizeof(int)); });
    gate.open();
    // Read on the compute stream.
    if (auto why = gathered_10_11(to_host(*seen, 2 * sizeof(int)), pg.rank()); !why.empty())
      failures.push_back(why);
    work->wait();
    return failures;
  });
}

// Rank 0 holds back its all_gather's stream; its reduce_scatter, issued later on another stream,
// must still meet the peers' reduce_scatter, not their all_gather (issue order, not readiness).
BOOST_AUTO_TEST_CASE(collectives_on_two_streams_and_the_host_meet_in_issue_order) {
  on_ranks(2, [](ProcessGroup& pg) {
    std::vector<std::string> failures;
    const Device dev = device_of(pg);
    const Stream unshard = new_stream(dev), post_backward = new_stream(dev);
    auto ag_in = to_device(Bytes(4, std::uint8_t(1 + pg.rank())), dev);
    auto ag_out = to_device(Bytes(8), dev);
    auto rs_in = to_device(Bytes(2, std::uint8_t(3)), dev);  // uint8 sums: 3 + 3
    auto rs_out = to_device(Bytes(1), dev);
    device_synchronize(dev);
    Gate gate;
    if (pg.rank() == 0) launch(unshard, gate.waiter());
    Collective ag;
    ag.kind = CollectiveKind::AllGather;
    ag.input = ag_in->data();
    ag.output = ag_out->data();
    ag.count = 4;
    ag.dtype = DType::UInt8;
    ag.device = dev;
    ag.stream = unshard;
    auto ag_work = pg.run_async(ag);
    Collective rs = ag;
    rs.kind = CollectiveKind::ReduceScatter;
    rs.input = rs_in->data();
    rs.output = rs_out->data();
    rs.count = 1;
    rs.stream = post_backward;
    auto rs_work = pg.run_async(rs);
    std::int64_t loss = 1;
    auto host_work = pg.all_reduce_async(&loss, 1, DType::Int64);  // on the host, after both
    if (pg.rank() == 0) {
      if (rs_work->wait_for(std::chrono::milliseconds(50)))
        failures.push_back("the reduce_scatter ran before the earlier all_gather");
      gate.open();
    }
    host_work->wait();
    if (loss != 2) failures.push_back(fmt::format("rank {}: loss {}", pg.rank(), loss));
    ag_work->wait();
    rs_work->wait();
    StreamGuard guard(post_backward);
    if (to_host(*rs_out, 1) != Bytes{6}) failures.push_back("reduce_scatter: expected 6");
    if (to_host(*ag_out, 8) != Bytes{1, 1, 1, 1, 2, 2, 2, 2})
      failures.push_back(fmt::format("rank {}: all_gather's bytes differ", pg.rank()));
    return failures;
  });
}

BOOST_AUTO_TEST_CASE(a_stream_of_another_device_is_refused) {
  on_ranks(2, [](ProcessGroup& pg) {
    std::vector<std::string> failures;
    const Device dev = device_of(pg), other(DeviceType::FakeCUDA, 5);
    auto buf = to_device(Bytes(4), dev);
    Collective c;
    c.kind = CollectiveKind::AllReduce;
    c.output = buf->data();
    c.count = 1;
    c.device = dev;
    c.stream = default_stream(other);
    try {
      pg.run(c);
      failures.push_back("no error");
    } catch (const ValueError& e) {
      const std::string expected = fmt::format(
          "threads rank {}/2: invalid all_reduce(count=1, dtype=float32, op=sum, "
          "device=fake_cuda:{}): "
          "its stream 0 is on fake_cuda:5, not on the buffers' fake_cuda:{}",
          pg.rank(), pg.rank(), pg.rank());
      if (e.what() != expected) failures.push_back(e.what());
    }
    return failures;
  });
}

// CUDA buffers: a build without CUDA refuses them naming the group, the call and why; a CUDA
// build queues the collective on the device (tests/gpu/test_threads_collectives.cpp), so on a
// machine without one the call is the device's one line.
BOOST_AUTO_TEST_CASE(cuda_buffers_without_a_cuda_device_are_one_line) {
#if FSDP_TEST_HAVE_CUDA
  std::string no_device;
  try {
    new_stream(Device(DeviceType::CUDA, 0));
  } catch (const Error& e) {
    no_device = e.what();
  }
  if (no_device.empty()) return;  // a GPU: tests/gpu runs the collectives there
#endif
  on_ranks(1, [&](ProcessGroup& pg) {
    std::vector<std::string> failures;
    const Device cuda(DeviceType::CUDA, 0);
    float x = 0;
    try {
      pg.all_reduce(&x, 1, DType::Float32, ReduceOp::Sum, cuda);
      failures.push_back("no error");
    } catch (const Error& e) {
#if FSDP_TEST_HAVE_CUDA
      if (e.what() != no_device) failures.push_back(e.what());
#else
      const std::string prefix =
          "threads rank 0/1: all_reduce(count=1, dtype=float32, op=sum, device=cuda:0) needs "
          "memory that work on a stream reaches: cuda:0: ";
      if (std::string(e.what()).rfind(prefix, 0) != 0) failures.push_back(e.what());
#endif
    }
    return failures;
  });
}

BOOST_AUTO_TEST_CASE(block_stream_on_a_host_collective) {
  on_ranks(2, [](ProcessGroup& pg) {
    std::vector<std::string> failures;
    float v = float(pg.rank() + 1);
    auto work = pg.all_reduce_async(&v, 1, DType::Float32);
    work->block_stream(current_stream(device_of(pg)));
    if (v != 3.0f) failures.push_back(fmt::format("rank {}: {} after block_stream", pg.rank(), v));
    return failures;
  });
}

// Size 1: all_gather and reduce_scatter copy input to output, in order with the stream's work.
BOOST_AUTO_TEST_CASE(a_fake_group_of_one_rank_copies_on_the_stream) {
  FakeProcessGroup pg(0, 1);
  const Device dev(DeviceType::FakeCUDA, 0);
  const Stream s = new_stream(dev);
  StreamGuard guard(s);
  auto in = to_device(Bytes{1, 2, 3, 4}, dev), out = to_device(Bytes(4), dev);
  Gate gate;
  launch(s, gate.waiter());
  auto work = pg.all_gather_async(in->data(), out->data(), 4, DType::UInt8, dev);
  BOOST_TEST(!work->test());  // queued behind the gate
  gate.open();
  work->wait();
  BOOST_TEST((to_host(*out, 4) == Bytes{1, 2, 3, 4}));
  auto rs_out = to_device(Bytes(4), dev);
  pg.reduce_scatter(in->data(), rs_out->data(), 4, DType::UInt8, ReduceOp::Sum, dev);
  BOOST_TEST((to_host(*rs_out, 4) == Bytes{1, 2, 3, 4}));
}
