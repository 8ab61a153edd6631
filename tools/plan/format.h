// The planner's outputs: a terminal table (the module tree with units marked, then per-rank
// totals), JSON for scripts (fields documented in tools/README.md), and a Graphviz graph.
#pragma once

#include <cstdio>
#include <string>

#include "tools/plan/planner.h"

namespace fsdp::plan {

std::string format_table(const Plan& plan);
std::string format_json(const Plan& plan);
// format_json written to `out` as it is made, in blocks: a plan whose JSON lists 10^10
// characters of parameter FQNs (a 100 000-deep chain) never holds it whole. False when a write
// failed (errno says why).
bool write_json(const Plan& plan, std::FILE* out);
std::string format_dot(const Plan& plan);

// "1.50 GiB", "12.0 KiB", "512 B".
std::string human_bytes(std::int64_t bytes);
// "124.4M", "3.1K", "512".
std::string human_count(std::int64_t n);

}  // namespace fsdp::plan
