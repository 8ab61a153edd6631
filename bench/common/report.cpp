#include "bench/common/report.h"

#include <fmt/format.h>

#include <fstream>
#include <stdexcept>

namespace fsdp::bench {

Report::Report(const Cli& cli) : path_(cli.json_path()) {
  json_["program"] = cli.program();
  json_["options"] = cli.options();
  json_["rows"] = nlohmann::ordered_json::array();
  json_["ratios"] = nlohmann::ordered_json::object();
}

void Report::write() const {
  if (path_.empty()) return;
  std::ofstream file(path_);
  file << json_.dump(2) << "\n";
  file.close();
  if (!file) throw std::runtime_error(fmt::format("cannot write {}", path_));
}

}  // namespace fsdp::bench
