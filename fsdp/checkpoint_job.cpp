#include "fsdp/checkpoint_job.h"

#include <map>

namespace fsdp {

std::optional<JobFieldChange> first_job_change(const JobIdentity& saved, const JobIdentity& current,
                                               const std::set<std::string>& may_change) {
  constexpr const char* kAbsent = "(none)";
  const std::map<std::string, std::string> before(saved.begin(), saved.end());
  const std::map<std::string, std::string> now(current.begin(), current.end());
  for (const auto& [field, value] : current) {
    if (may_change.count(field)) continue;
    auto it = before.find(field);
    if (it == before.end()) return JobFieldChange{field, kAbsent, value};
    if (it->second != value) return JobFieldChange{field, it->second, value};
  }
  for (const auto& [field, value] : saved)
    if (!may_change.count(field) && !now.count(field)) return JobFieldChange{field, value, kAbsent};
  return std::nullopt;
}

}  // namespace fsdp
