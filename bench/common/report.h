// The one JSON report of every bench program, written beside its human table when --json FILE
// is given. Its layout, the same everywhere (tests/bench/bench_smoke.py checks it):
//   {"program": name, "options": {"argv": [...], "iters": .., ...},
//    "rows": [one object per row of the table], "ratios": {name: value, ...}, ...}
// plus whatever else the program records at the top level (its model, its bound).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "bench/common/cli.h"

namespace fsdp::bench {

class Report {
 public:
  explicit Report(const Cli& cli);

  // A row of the table, appended to "rows".
  void row(nlohmann::ordered_json r) { json_["rows"].push_back(std::move(r)); }
  // A ratio against the program's baseline (>1 or <1 as its table says), in "ratios".
  void ratio(const std::string& name, double value) { json_["ratios"][name] = value; }
  // Any other top-level field.
  nlohmann::ordered_json& operator[](const std::string& key) { return json_[key]; }
  const nlohmann::ordered_json& json() const { return json_; }

  // Writes the report to --json's FILE (nothing without --json); throws std::runtime_error
  // "cannot write FILE" when it cannot.
  void write() const;

 private:
  std::string path_;
  nlohmann::ordered_json json_;
};

}  // namespace fsdp::bench
