#include "comm/agreement.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace fsdp::comm {

namespace {

using Digest = std::array<std::uint64_t, kAgreementDigestWords>;

// Word 0: how many settings (builds that differ may list different ones); then one hash of
// name and value per setting, the last word folding any that do not fit.
Digest digest_of(const std::vector<NamedSetting>& settings) {
  Digest d{};
  d[0] = settings.size();
  for (std::size_t i = 0; i < settings.size(); ++i) {
    const std::size_t word = std::min(i + 1, kAgreementDigestWords - 1);
    d[word] = hash64(settings[i].value, hash64(settings[i].name) ^ d[word]);
  }
  return d;
}

// (A loop, not fmt::join: GCC 12 warns falsely inside fmt 9's join of strings.)
std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// "0", "0-3": a run of consecutive ranks.
std::string rank_run(int first, int last) {
  return first == last ? fmt::format("{}", first) : fmt::format("{}-{}", first, last);
}

// Every rank's values for `mine` (this rank's values of the differing settings, as many on
// every rank), by setting: their lengths gathered first, then their bytes, one block per rank.
std::vector<std::vector<std::string>> gather_values(ProcessGroup& group,
                                                    const std::vector<std::string>& mine) {
  const std::size_t n = mine.size(), world = static_cast<std::size_t>(group.size());
  std::vector<std::uint64_t> lengths(n), all_lengths(n * world);
  std::string bytes;
  for (std::size_t i = 0; i < n; ++i) {
    lengths[i] = mine[i].size();
    bytes += mine[i];
  }
  group.all_gather(lengths.data(), all_lengths.data(), n, DType::Int64);
  std::uint64_t longest = 0;
  for (std::size_t r = 0; r < world; ++r) {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < n; ++i) total += all_lengths[r * n + i];
    longest = std::max(longest, total);
  }
  bytes.resize(longest);
  std::string all_bytes(longest * world, '\0');
  if (longest > 0) group.all_gather(bytes.data(), all_bytes.data(), longest, DType::UInt8);
  std::vector<std::vector<std::string>> by_setting(n, std::vector<std::string>(world));
  for (std::size_t r = 0; r < world; ++r) {
    std::size_t at = r * longest;
    for (std::size_t i = 0; i < n; ++i) {
      by_setting[i][r] = all_bytes.substr(at, all_lengths[r * n + i]);
      at += all_lengths[r * n + i];
    }
  }
  return by_setting;
}

}  // namespace

std::uint64_t hash64(std::string_view bytes, std::uint64_t seed) {
  constexpr std::uint64_t kPrime = 0x100000001b3ULL;
  std::uint64_t h = seed;
  std::size_t i = 0;
  // Each step is a bijection of h, so inputs of one length that differ in one word never collide.
  for (; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, bytes.data() + i, 8);
    h = (h ^ word) * kPrime;
  }
  for (; i < bytes.size(); ++i) h = (h ^ static_cast<unsigned char>(bytes[i])) * kPrime;
  return h;
}

std::string disagreement_message(const std::string& name, const std::vector<std::string>& by_rank) {
  std::string out = fmt::format("ranks disagree on {}:", name);
  std::vector<bool> said(by_rank.size(), false);
  const char* sep = " ";
  for (std::size_t v = 0; v < by_rank.size(); ++v) {
    if (said[v]) continue;
    std::vector<std::string> runs;  // of the ranks holding by_rank[v]: "0", "2-3"
    std::size_t first = v, count = 0;
    for (std::size_t r = v; r < by_rank.size(); ++r) {
      if (by_rank[r] != by_rank[v]) continue;
      said[r] = true;
      ++count;
      const bool run_ends = r + 1 == by_rank.size() || by_rank[r + 1] != by_rank[v];
      if (r > v && by_rank[r - 1] != by_rank[v]) first = r;
      if (run_ends) runs.push_back(rank_run(static_cast<int>(first), static_cast<int>(r)));
    }
    out += fmt::format("{}{} {} {} {}", sep, count == 1 ? "rank" : "ranks", join(runs, ", "),
                       count == 1 ? "has" : "have", by_rank[v]);
    sep = ", ";
  }
  return out;
}

void require_agreement(ProcessGroup& group, const std::vector<NamedSetting>& settings) {
  const int world = group.size();
  if (world == 1) return;
  const Digest mine = digest_of(settings);
  std::vector<std::uint64_t> all(kAgreementDigestWords * static_cast<std::size_t>(world));
  group.all_gather(mine.data(), all.data(), kAgreementDigestWords, DType::Int64);
  // The words that differ between ranks: the same list on every rank, from the same data.
  std::vector<std::size_t> differing;
  for (std::size_t w = 0; w < kAgreementDigestWords; ++w)
    for (int r = 1; r < world; ++r)
      if (all[static_cast<std::size_t>(r) * kAgreementDigestWords + w] != all[w]) {
        differing.push_back(w);
        break;
      }
  if (differing.empty()) return;
  std::vector<std::string> names, values;
  if (differing.front() == 0) {
    names.push_back("the number of settings (different builds?)");
    values.push_back(fmt::format("{}", settings.size()));
  } else {
    for (std::size_t w : differing) {
      // The last word stands for every setting past it.
      const std::size_t last = w + 1 < kAgreementDigestWords ? w : settings.size();
      for (std::size_t i = w - 1; i < last && i < settings.size(); ++i) {
        names.push_back(settings[i].name);
        values.push_back(settings[i].value);
      }
    }
  }
  const auto by_setting = gather_values(group, values);
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto& v = by_setting[i];
    if (std::all_of(v.begin(), v.end(), [&](const std::string& x) { return x == v[0]; }))
      continue;  // equal values: only a name differs, or another setting of a folded word
    parts.push_back(disagreement_message(names[i], v));
  }
  if (parts.empty())  // only folded settings differ, each equal on its own: names or order
    parts.push_back("ranks disagree on the names or order of their settings (different builds?)");
  throw RanksDisagreeError(join(parts, "; "));
}

}  // namespace fsdp::comm
