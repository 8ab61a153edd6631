// Settings that every rank of a job must hold equal (a command line's arguments, a model's
// fingerprint), checked in one exchange: each rank all-gathers a fixed-size digest, one hash per
// setting, and only when some differ, the values of those, so that every rank's error names the
// setting and each rank's value: "ranks disagree on --lr: rank 0 has 0.001, rank 1 has 0.5".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/errors.h"
#include "comm/process_group.h"

namespace fsdp::comm {

// Ranks hold different values of settings that must agree; thrown on every rank alike.
class RanksDisagreeError : public CommMismatchError {
 public:
  using CommMismatchError::CommMismatchError;
};

struct NamedSetting {
  std::string name;   // "--lr"
  std::string value;  // as the user would write it: "0.001"
};

// Settings in the digest's fixed size; a longer list folds the rest into the last hash.
inline constexpr std::size_t kAgreementDigestWords = 64;

// The digest's hash: 64-bit FNV-1a over 8-byte words (bytes for the tail), for the settings'
// short texts (comm stands below core/io's XXH3; a caller names a large file by its own hash);
// equal on every (little-endian) host for equal bytes.
std::uint64_t hash64(std::string_view bytes, std::uint64_t seed = 0xcbf29ce484222325ULL);

// Every rank of `group` calls it with its own values of the same settings, in the same order.
// Returns when all ranks agree; else throws RanksDisagreeError on every rank, naming each
// differing setting with every rank's value (disagreement_message).
void require_agreement(ProcessGroup& group, const std::vector<NamedSetting>& settings);

// "ranks disagree on <name>: rank 0 has A, ranks 1-3 have B" for one setting's values by rank
// (ranks with equal values grouped, runs of ranks as ranges).
std::string disagreement_message(const std::string& name, const std::vector<std::string>& by_rank);

}  // namespace fsdp::comm
