// Deterministic mutation tests of everything in comm/ that parses bytes from another process:
// the TcpStore protocol (parser and a live server fed hostile streams) and the collective
// signatures ranks exchange. Run under ASan/UBSan (.ci/sanitize.sh) they also catch reads past a
// buffer. The libFuzzer targets beside this file explore further (tests/fuzz/README.md).
#define BOOST_TEST_MODULE fuzz_comm
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "comm/collective.h"
#include "comm/store/tcp_store.h"
#include "comm/store/tcp_store_protocol.h"
#include "tests/fuzz/comm_mutations.h"

using namespace fsdp::comm;
using namespace fsdp::comm::fuzz;
using namespace std::chrono_literals;
namespace wire = fsdp::comm::tcp_store_protocol;

namespace {

constexpr int kMutants = 20000;

// A port nobody listens on now (the kernel's pick for port 0).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(std::uint16_t(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads until the server closes the connection or `wait` passes; true when it closed.
bool closed_by_peer(int fd, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const ssize_t k = ::recv(fd, buf, sizeof buf, 0);
    if (k <= 0) return true;
  }
  return false;
}

}  // namespace

BOOST_AUTO_TEST_CASE(request_parser_accepts_exactly_the_encodings) {
  const auto seeds = tcp_store_request_seeds();
  Rng rng(12);
  int complete = 0, need_more = 0, invalid = 0;
  for (int i = 0; i < kMutants; ++i) {
    const std::string m =
        mutate(seeds[rng.below(seeds.size())], seeds[rng.below(seeds.size())], rng);
    wire::Request r;
    const auto res = wire::parse_request(m, r);
    switch (res.status) {
      case wire::ParseStatus::Complete:
        ++complete;
        BOOST_REQUIRE_LE(res.consumed, m.size());
        // What was parsed re-encodes to the very bytes it came from.
        BOOST_REQUIRE(wire::encode_request(r) == m.substr(0, res.consumed));
        break;
      case wire::ParseStatus::NeedMore:
        ++need_more;
        BOOST_REQUIRE(res.needed == 0 || res.needed > m.size());
        break;
      case wire::ParseStatus::Invalid:
        ++invalid;
        BOOST_REQUIRE(!res.error.empty());
        break;
    }
  }
  // The mutations reach every outcome (otherwise the test explores nothing).
  BOOST_TEST(complete > 100);
  BOOST_TEST(need_more > 100);
  BOOST_TEST(invalid > 100);
}

BOOST_AUTO_TEST_CASE(requests_split_anywhere_parse_the_same) {
  const std::string stream = tcp_store_request_seeds().back();  // three requests
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    std::string pending = stream.substr(0, cut);
    std::vector<wire::Request> got;
    for (const std::string& more : {std::string(), stream.substr(cut)}) {
      pending += more;
      for (;;) {
        wire::Request r;
        const auto res = wire::parse_request(pending, r);
        BOOST_REQUIRE((res.status != wire::ParseStatus::Invalid));
        if (res.status == wire::ParseStatus::NeedMore) break;
        got.push_back(r);
        pending.erase(0, res.consumed);
      }
    }
    BOOST_REQUIRE_EQUAL(got.size(), 3u);
    BOOST_TEST(got[0].key == "world/0");
    BOOST_TEST(got[2].op == wire::kCheck);
  }
}

BOOST_AUTO_TEST_CASE(limits_are_refused_before_allocating) {
  wire::Request r;
  std::string huge_key("G\x01\x00\x01\x00", 5);  // key length 65537
  auto res = wire::parse_request(huge_key, r);
  BOOST_TEST((res.status == wire::ParseStatus::Invalid));
  BOOST_TEST(res.error == "key length 65537 above the limit 65536");
  std::string huge_value = wire::encode_request({wire::kSet, "k", ""});
  huge_value.replace(huge_value.size() - 4, 4, std::string("\xff\xff\xff\xff", 4));
  res = wire::parse_request(huge_value, r);
  BOOST_TEST(res.error == "value length 4294967295 above the limit 268435456");
  res = wire::parse_request(std::string("X"), r);
  BOOST_TEST(res.error == "unknown request type 0x58");
  res = wire::parse_request(std::string("G\x01\0\0\0k\x01\0\0\0v", 11), r);
  BOOST_TEST(res.error == "a get request carries a value");
  wire::Reply reply;
  res = wire::parse_reply(std::string("\0\xff\xff\xff\x7f", 5), reply);
  BOOST_TEST(res.error == "reply length 2147483647 above the limit 268435456");
  BOOST_CHECK_THROW(wire::encode_request({wire::kSet, std::string(70000, 'k'), ""}),
                    fsdp::ValueError);
}

BOOST_AUTO_TEST_CASE(reply_parser_accepts_exactly_the_encodings) {
  const auto seeds = tcp_store_reply_seeds();
  Rng rng(34);
  for (int i = 0; i < kMutants; ++i) {
    const std::string m =
        mutate(seeds[rng.below(seeds.size())], seeds[rng.below(seeds.size())], rng);
    wire::Reply r;
    const auto res = wire::parse_reply(m, r);
    if (res.status == wire::ParseStatus::Complete)
      BOOST_REQUIRE(wire::encode_reply(r) == m.substr(0, res.consumed));
    if (res.status == wire::ParseStatus::NeedMore)
      BOOST_REQUIRE(res.needed == 0 || res.needed > m.size());
  }
}

BOOST_AUTO_TEST_CASE(collective_signatures_of_any_bytes_describe_themselves) {
  Rng rng(56);
  for (int i = 0; i < kMutants; ++i) {
    CollectiveSignature s;
    unsigned char bytes[sizeof s];
    for (auto& b : bytes) b = static_cast<unsigned char>(rng.next());
    std::memcpy(&s, bytes, sizeof s);  // as a peer's 16 bytes arrive
    BOOST_REQUIRE(!s.str().empty());
  }
}

// A live server fed mutated streams on many connections keeps serving the honest client, closes
// connections whose bytes are not requests, and shuts down while a client is silent mid-request.
BOOST_AUTO_TEST_CASE(tcp_store_server_survives_hostile_streams) {
  const int port = free_port();
  auto host = std::make_unique<TcpStore>("127.0.0.1", port, true, "job", 5s);
  host->set("before", {'o', 'k'});
  const auto seeds = tcp_store_request_seeds();
  Rng rng(78);
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string m =
        mutate(seeds[rng.below(seeds.size())], seeds[rng.below(seeds.size())], rng);
    const int fd = connect_to(port);
    BOOST_REQUIRE(fd >= 0);
    ::send(fd, m.data(), m.size(), MSG_NOSIGNAL);
    wire::Request r;
    if (wire::parse_request(m, r).status == wire::ParseStatus::Invalid) {
      // Bytes that are not a request end the connection at once.
      BOOST_REQUIRE(closed_by_peer(fd, 5s));
      ++refused;
    }
    ::close(fd);
  }
  BOOST_TEST(refused > 10);
  // A length of 4 GiB is refused as soon as it arrives, with nothing allocated.
  const int greedy = connect_to(port);
  ::send(greedy, "S\x01\0\0\0k\xff\xff\xff\xff", 10, MSG_NOSIGNAL);
  BOOST_TEST(closed_by_peer(greedy, 5s));
  ::close(greedy);
  // The honest client still gets its keys.
  TcpStore client("127.0.0.1", port, false, "job", 5s);
  BOOST_TEST(std::string(client.get("before", 5s).data(), 2) == "ok");
  client.set("after", {'y'});
  BOOST_TEST(host->check({"after"}));
  // A client silent in the middle of a request does not hold up the shutdown.
  const int silent = connect_to(port);
  ::send(silent, "S\x05\0\0\0ke", 7, MSG_NOSIGNAL);
  std::this_thread::sleep_for(50ms);
  host.reset();  // returns: the server notices the shutdown within 100 ms
  BOOST_TEST(closed_by_peer(silent, 5s));
  ::close(silent);
}
