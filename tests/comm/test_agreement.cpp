// comm/agreement: ranks holding different values of settings that must agree all fail, each
// naming the setting and every rank's value; ranks that agree pass after one all-gather.
#define BOOST_TEST_MODULE comm_agreement
#include <boost/test/unit_test.hpp>
#include <mutex>
#include <string>
#include <vector>

#include "comm/agreement.h"
#include "comm/threads/run_ranks.h"

using namespace fsdp::comm;

namespace {

// Runs require_agreement on `world` thread ranks, rank r holding settings_of(r); returns each
// rank's error message ("" where it returned).
template <class SettingsOf>
std::vector<std::string> messages(int world, SettingsOf settings_of) {
  std::vector<std::string> out(static_cast<std::size_t>(world));
  std::mutex m;
  run_ranks(world, [&](std::shared_ptr<ProcessGroup> pg) {
    try {
      require_agreement(*pg, settings_of(pg->rank()));
    } catch (const RanksDisagreeError& e) {
      std::lock_guard<std::mutex> lock(m);
      out[static_cast<std::size_t>(pg->rank())] = e.what();
    }
  });
  return out;
}

std::vector<NamedSetting> job(const std::string& lr, const std::string& seed = "0") {
  return {{"--layers", "2"}, {"--lr", lr}, {"--seed", seed}, {"--optimizer", "adamw"}};
}

}  // namespace

BOOST_AUTO_TEST_CASE(message_groups_ranks_by_value) {
  BOOST_TEST(disagreement_message("--lr", {"0.001", "0.5"}) ==
             "ranks disagree on --lr: rank 0 has 0.001, rank 1 has 0.5");
  BOOST_TEST(disagreement_message("--seed", {"1", "2", "1", "1", "3"}) ==
             "ranks disagree on --seed: ranks 0, 2-3 have 1, rank 1 has 2, rank 4 has 3");
  BOOST_TEST(disagreement_message("--heads", {"2", "4", "4", "4"}) ==
             "ranks disagree on --heads: rank 0 has 2, ranks 1-3 have 4");
}

BOOST_AUTO_TEST_CASE(agreeing_ranks_pass) {
  for (int world : {1, 2, 3})
    for (const auto& m : messages(world, [](int) { return job("0.001"); })) BOOST_TEST(m == "");
}

BOOST_AUTO_TEST_CASE(every_rank_names_the_setting_and_each_value) {
  const auto m = messages(2, [](int r) { return job(r == 0 ? "0.001" : "0.5"); });
  for (const auto& s : m)
    BOOST_TEST(s == "ranks disagree on --lr: rank 0 has 0.001, rank 1 has 0.5");
}

BOOST_AUTO_TEST_CASE(several_settings_differ) {
  const auto m =
      messages(3, [](int r) { return job(r == 2 ? "0.5" : "0.001", r == 1 ? "7" : "0"); });
  for (const auto& s : m)
    BOOST_TEST(s ==
               "ranks disagree on --lr: ranks 0-1 have 0.001, rank 2 has 0.5; ranks disagree on "
               "--seed: ranks 0, 2 have 0, rank 1 has 7");
}

BOOST_AUTO_TEST_CASE(a_different_number_of_settings) {
  const auto m = messages(2, [](int r) {
    auto s = job("0.001");
    if (r == 1) s.push_back({"--new-flag", "1"});
    return s;
  });
  for (const auto& s : m)
    BOOST_TEST(s ==
               "ranks disagree on the number of settings (different builds?): rank 0 has 4, "
               "rank 1 has 5");
}

// Past the digest's fixed size, settings share its last hash; a difference there is still
// named exactly.
BOOST_AUTO_TEST_CASE(settings_past_the_digest_size) {
  const auto m = messages(2, [](int r) {
    std::vector<NamedSetting> s;
    for (std::size_t i = 0; i < kAgreementDigestWords + 10; ++i)
      s.push_back(
          {"--s" + std::to_string(i), i == kAgreementDigestWords + 5 && r == 1 ? "b" : "a"});
    return s;
  });
  for (const auto& s : m) BOOST_TEST(s == "ranks disagree on --s69: rank 0 has a, rank 1 has b");
}

// The tail is plain FNV-1a (its published value for "a"); a flipped bit anywhere changes the hash.
BOOST_AUTO_TEST_CASE(hash64_sees_every_bit) {
  BOOST_TEST(hash64("") == 0xcbf29ce484222325ULL);
  BOOST_TEST(hash64("a") == 0xaf63dc4c8601ec8cULL);
  std::string bytes(4099, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 31 % 251);
  const std::uint64_t h = hash64(bytes);
  BOOST_TEST(hash64(bytes) == h);
  for (std::size_t i = 0; i < bytes.size(); ++i)
    for (int bit : {0, 7}) {
      std::string changed = bytes;
      changed[i] = static_cast<char>(changed[i] ^ (1 << bit));
      if (hash64(changed) == h) BOOST_TEST_FAIL("byte " << i << " bit " << bit << " unseen");
    }
}
