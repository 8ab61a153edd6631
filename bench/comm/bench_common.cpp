#include "bench/comm/bench_common.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>

#include "bench/common/report.h"
#include "bench/common/timing.h"
#include "comm/env.h"

namespace fsdp::comm::bench {

namespace {
// "64K", "16M", "1G" or a plain byte count: at least 1 byte, at most 1 TiB.
std::size_t parse_size(const std::string& flag, const std::string& s) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  std::string unit = end;
  if (unit == "K" || unit == "KiB")
    v *= 1 << 10;
  else if (unit == "M" || unit == "MiB")
    v *= 1 << 20;
  else if (unit == "G" || unit == "GiB")
    v *= 1 << 30;
  else if (!unit.empty() || end == s.c_str())
    throw std::invalid_argument(
        fmt::format("{} '{}' is not a size (use a byte count or 64K, 16M, 1G)", flag, s));
  if (!(v >= 1 && v <= double(std::size_t(1) << 40)))
    throw std::invalid_argument(fmt::format("{} '{}' is out of range: 1 to 1024G", flag, s));
  return std::size_t(v);
}

int parse_ranks(const std::string& s) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || errno == ERANGE || v < 1 || v > 1024)
    throw std::invalid_argument(fmt::format("--ranks '{}' is not an integer from 1 to 1024", s));
  return int(v);
}
}  // namespace

void add_flags(::fsdp::bench::Cli& cli, Args& args, bool with_ranks) {
  CLI::App& app = cli.app();
  app.add_option("--min-size", args.min_size, "smallest collective: bytes, or 64K, 16M, 1G")
      ->capture_default_str();
  app.add_option("--max-size", args.max_size, "largest collective (sizes grow by 4x)")
      ->capture_default_str();
  cli.add_iters(args.rounds, "rounds (each contender's best round is kept)");
  if (with_ranks) app.add_option("--ranks", args.ranks_arg, "thread ranks")->capture_default_str();
}

void finish(Args& a) {
  a.min_bytes = parse_size("--min-size", a.min_size);
  a.max_bytes = parse_size("--max-size", a.max_size);
  a.ranks = parse_ranks(a.ranks_arg);
  if (a.min_bytes > a.max_bytes)
    throw std::invalid_argument(fmt::format("--min-size ({} bytes) is above --max-size ({} bytes)",
                                            a.min_bytes, a.max_bytes));
}

std::vector<std::size_t> sweep(const Args& args) {
  std::vector<std::size_t> sizes;
  for (std::size_t s = args.min_bytes; s <= args.max_bytes; s *= 4) sizes.push_back(s);
  return sizes;
}

int iterations_for(std::size_t bytes) {
  return int(
      std::clamp<std::size_t>((std::size_t(1) << 30) / std::max<std::size_t>(bytes, 1), 5, 400));
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::AllGather:
      return "all_gather";
    case Kind::ReduceScatter:
      return "reduce_scatter";
    case Kind::AllReduce:
      return "all_reduce";
  }
  return "?";
}

double bus_factor(Kind k, int n) {
  double f = double(n - 1) / double(n);
  return k == Kind::AllReduce ? 2 * f : f;
}

std::vector<Result> time_contenders(ProcessGroup& pg, const std::string& backend, std::size_t bytes,
                                    const std::vector<Contender>& contenders, int rounds) {
  const int iters = iterations_for(bytes);
  std::vector<double> best(contenders.size(), 1e300);
  for (const auto& c : contenders) {
    c.op();
    c.op();
  }
  for (int round = 0; round < rounds; ++round)
    for (std::size_t i = 0; i < contenders.size(); ++i) {
      pg.barrier();
      const double start = ::fsdp::bench::wall_now_ms();
      for (int k = 0; k < iters; ++k) contenders[i].op();
      double seconds = (::fsdp::bench::wall_now_ms() - start) * 1e-3 / iters;
      pg.all_reduce(&seconds, 1, DType::Float64, ReduceOp::Max);
      best[i] = std::min(best[i], seconds);
    }
  std::vector<Result> out;
  for (std::size_t i = 0; i < contenders.size(); ++i)
    out.push_back({backend, contenders[i].impl, contenders[i].kind, pg.size(), bytes, best[i]});
  return out;
}

double time_memcpy(std::size_t bytes, int rounds) {
  std::vector<char> from(bytes, 1), to(bytes, 0);
  const int iters = iterations_for(bytes);
  std::memcpy(to.data(), from.data(), bytes);
  double best = 1e300;
  for (int round = 0; round < rounds; ++round) {
    const double start = ::fsdp::bench::wall_now_ms();
    for (int i = 0; i < iters; ++i) {
      std::memcpy(to.data(), from.data(), bytes);
      asm volatile("" : : "r"(to.data()) : "memory");  // keep every copy
    }
    best = std::min(best, (::fsdp::bench::wall_now_ms() - start) * 1e-3 / iters);
  }
  return best;
}

namespace {
std::string human(std::size_t bytes) {
  if (bytes >= (1u << 20)) return fmt::format("{}M", bytes >> 20);
  if (bytes >= (1u << 10)) return fmt::format("{}K", bytes >> 10);
  return fmt::format("{}B", bytes);
}
}  // namespace

void report(const std::vector<Result>& results, const ::fsdp::bench::Cli& cli) {
  // Index: (kind, bytes) -> the ours, the raw library's, and memcpy's times.
  std::map<std::pair<int, std::size_t>, std::vector<const Result*>> rows;
  for (auto& r : results) rows[{int(r.kind), r.bytes}].push_back(&r);
  std::printf("%-15s %6s  %-28s %11s %9s %9s %10s %10s\n", "collective", "size", "impl", "time(us)",
              "algbw", "busbw", "vs fsdp", "vs memcpy");
  for (auto& [key, group] : rows) {
    const Result* ours = nullptr;
    const Result* copy = nullptr;
    for (auto* r : group) {
      if (r->impl == "fsdp") ours = r;
      if (r->impl == "memcpy") copy = r;
    }
    for (auto* r : group) {
      std::string vs_ours =
          ours && r != ours ? fmt::format("{:.2f}x", r->seconds / ours->seconds) : "";
      // fraction of memcpy speed: memcpy time of the same bytes / this time
      std::string vs_copy =
          copy && r != copy ? fmt::format("{:.0f}%", 100 * copy->seconds / r->seconds) : "";
      std::printf("%-15s %6s  %-28s %11.1f %9.2f %9.2f %10s %10s\n", kind_name(r->kind),
                  human(r->bytes).c_str(), r->impl.c_str(), r->seconds * 1e6, r->algbw(),
                  r->impl == "memcpy" ? r->algbw() : r->busbw(), vs_ours.c_str(), vs_copy.c_str());
    }
  }
  std::printf(
      "(algbw/busbw in GB/s; 'vs fsdp' = that time / ours, >1 means ours is faster; "
      "'vs memcpy' = single-core memcpy time of the same bytes / that time)\n");
  if (cli.json_path().empty()) return;
  ::fsdp::bench::Report out(cli);
  for (auto& r : results)
    out.row({{"backend", r.backend},
             {"impl", r.impl},
             {"collective", kind_name(r.kind)},
             {"ranks", r.ranks},
             {"bytes", r.bytes},
             {"seconds", r.seconds},
             {"algbw_gbps", r.algbw()},
             {"busbw_gbps", r.busbw()}});
  // The table's ratios: each other implementation's time / ours, at each size.
  for (auto& [key, group] : rows) {
    const Result* ours = nullptr;
    for (auto* r : group)
      if (r->impl == "fsdp") ours = r;
    if (!ours) continue;
    for (auto* r : group)
      if (r != ours)
        out.ratio(fmt::format("{} {} {} vs fsdp", kind_name(r->kind), human(r->bytes), r->impl),
                  r->seconds / ours->seconds);
  }
  out.write();
  std::printf("wrote %s\n", cli.json_path().c_str());
}

}  // namespace fsdp::comm::bench

namespace fsdp::comm::bench {

Buffers::Buffers(std::size_t bytes, int n)
    : shard_count(std::max<std::size_t>(1, bytes / (4 * std::size_t(n)))),
      total_count(shard_count * std::size_t(n)),
      shard(shard_count, 1.f),
      full(total_count, 1.f) {}

std::vector<Contender> our_contenders(ProcessGroup& pg, Buffers& b) {
  return {
      {Kind::AllGather, "fsdp",
       [&] { pg.all_gather(b.shard.data(), b.full.data(), b.shard_count, DType::Float32); }},
      {Kind::ReduceScatter, "fsdp",
       [&] { pg.reduce_scatter(b.full.data(), b.shard.data(), b.shard_count, DType::Float32); }},
      {Kind::AllReduce, "fsdp",
       [&] { pg.all_reduce(b.full.data(), b.total_count, DType::Float32); }},
  };
}

std::vector<Result> bench_memcpy(const std::string& backend, int ranks,
                                 const std::vector<std::size_t>& sizes, int rounds) {
  std::vector<Result> out;
  for (std::size_t bytes : sizes) {
    Buffers b(bytes, ranks);
    const std::size_t total = b.total_count * 4;
    double s = time_memcpy(total, rounds);
    for (Kind k : {Kind::AllGather, Kind::ReduceScatter, Kind::AllReduce})
      out.push_back({backend, "memcpy", k, ranks, total, s});
  }
  return out;
}

}  // namespace fsdp::comm::bench
