// Shared by the collective benchmarks: their flags, size sweep, timing across ranks, the
// single-core memcpy baseline, nccl-tests' bus bandwidth, the table and the JSON report. The
// command line, the exit codes and the report's layout are bench/common's.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "bench/common/cli.h"
#include "comm/process_group.h"

namespace fsdp::comm::bench {

struct Args {
  std::size_t min_bytes = 1 << 10;
  std::size_t max_bytes = std::size_t(256) << 20;
  int ranks = 2;   // threads backend only; process backends take the launcher's
  int rounds = 5;  // --iters: each contender's result is its best round
  std::string min_size = "1K", max_size = "256M", ranks_arg = "2";  // as given
};

// Adds --min-size, --max-size, --iters (rounds) and, for the threads backend, --ranks to `cli`.
void add_flags(::fsdp::bench::Cli& cli, Args& args, bool with_ranks);
// Checks and converts the sizes and ranks given; throws std::invalid_argument naming the flag
// and the value.
void finish(Args& args);

// Sizes min..max by factors of 4 (the total bytes of the collective, nccl-tests' S).
std::vector<std::size_t> sweep(const Args& args);
// Iterations for a collective of `bytes` (identical on every rank).
int iterations_for(std::size_t bytes);

enum class Kind { AllGather, ReduceScatter, AllReduce };
const char* kind_name(Kind k);
// nccl-tests: busbw = algbw * factor; AG and RS (n-1)/n, AR 2(n-1)/n.
double bus_factor(Kind k, int n);

struct Result {
  std::string backend;  // "mpi", "threads", ...
  std::string impl;     // "fsdp" (ours), "MPI_Allgather", "memcpy", ...
  Kind kind;
  int ranks;
  std::size_t bytes;
  double seconds;  // per call, slowest rank
  double algbw() const { return double(bytes) / seconds / 1e9; }
  double busbw() const { return algbw() * bus_factor(kind, ranks); }
};

// One implementation of a collective at one size: ours ("fsdp") or the raw library's.
struct Contender {
  Kind kind;
  std::string impl;
  std::function<void()> op;
};

// Times contenders of one size (`bytes`, the collective's total) on every rank of pg: 2 warm-up
// calls each, then `rounds` rounds, each running every contender for `iterations_for(bytes)`
// calls in turn, so that a busy machine slows them alike. A round's time is the slowest rank's
// mean; each contender's result is its best round. pg also carries the barriers and the
// max-reduction of the times.
std::vector<Result> time_contenders(ProcessGroup& pg, const std::string& backend, std::size_t bytes,
                                    const std::vector<Contender>& contenders, int rounds);
// Single-core memcpy of `bytes` (the baseline: seconds per copy, best of `rounds` rounds).
double time_memcpy(std::size_t bytes, int rounds);

// Prints the table (each implementation beside ours and memcpy) and writes the JSON report when
// --json was given.
void report(const std::vector<Result>& results, const ::fsdp::bench::Cli& cli);

}  // namespace fsdp::comm::bench

namespace fsdp::comm::bench {

// Float32 buffers for one size: per-rank count = bytes / (4 * n) (all_gather input,
// reduce_scatter output); all_reduce works on bytes / 4 elements.
struct Buffers {
  Buffers(std::size_t bytes, int n);
  std::size_t shard_count;   // elements per rank
  std::size_t total_count;   // shard_count * n
  std::vector<float> shard;  // shard_count
  std::vector<float> full;   // total_count
};

// Our all_gather, reduce_scatter and all_reduce through pg on b ("fsdp" rows).
std::vector<Contender> our_contenders(ProcessGroup& pg, Buffers& b);
// The memcpy rows (measured on the calling thread).
std::vector<Result> bench_memcpy(const std::string& backend, int ranks,
                                 const std::vector<std::size_t>& sizes, int rounds);

}  // namespace fsdp::comm::bench
