// Stores in one process: file store and TCP store semantics and their error messages.
#define BOOST_TEST_MODULE comm_store
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <thread>

#include "comm/errors.h"
#include "comm/store/file_store.h"
#include "comm/store/tcp_store.h"

using namespace fsdp::comm;
using namespace std::chrono_literals;

namespace {
bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
std::string fresh_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "fsdp-store.XXXXXX").string();
  return ::mkdtemp(tmpl.data());
}
void exercise(Store& writer, Store& reader) {
  std::thread late([&] {
    std::this_thread::sleep_for(50ms);
    writer.set("late", {'o', 'k'});
  });
  BOOST_TEST(std::string(reader.get("late", 5s).data(), 2) == "ok");  // waits for the key
  late.join();
  writer.set("empty", {});
  BOOST_TEST(reader.get("empty", 1s).empty());
  BOOST_TEST(reader.check({"late", "empty"}));
  BOOST_TEST(!reader.check({"late", "never"}));
  try {
    reader.wait({"late", "never"}, 100ms);
    BOOST_ERROR("expected a timeout");
  } catch (const CommTimeoutError& e) {
    BOOST_TEST(has(e.what(), "never"));
  }
}
}  // namespace

BOOST_AUTO_TEST_CASE(file_store_round_trip_and_in_use_error) {
  std::string dir = fresh_dir();
  FileStore host(dir, "job", 0), peer(dir, "job", 1);
  exercise(host, peer);
  try {
    FileStore again(dir, "job", 0);
    BOOST_ERROR("expected an error");
  } catch (const CommError& e) {
    BOOST_TEST(has(e.what(), "already in use"));
  }
  FileStore other_job(dir, "job2", 0);  // another prefix in the same directory is fine
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(tcp_store_round_trip_port_in_use_and_timeout) {
  const int port = 30000 + int(::getpid() % 10000);
  TcpStore host("127.0.0.1", port, true, "job", 5s);
  TcpStore client("127.0.0.1", port, false, "job", 5s);
  exercise(host, client);
  try {
    TcpStore clash("127.0.0.1", port, true, "job", 1s);
    BOOST_ERROR("expected an error");
  } catch (const CommError& e) {
    BOOST_TEST(has(e.what(), "already in use"));
  }
  try {
    client.get("nobody-sets-this", 200ms);
    BOOST_ERROR("expected a timeout");
  } catch (const CommTimeoutError& e) {
    BOOST_TEST(has(e.what(), "nobody-sets-this"));
  }
  BOOST_CHECK_THROW(TcpStore("127.0.0.1", port + 1, false, "job", 300ms), CommTimeoutError);
}

namespace {
// A listening socket on loopback that is not a store: accepts (the kernel does) and either
// stays silent or answers `reply` to whatever it receives.
class NotAStore {
 public:
  NotAStore(int port, std::string reply) : reply_(std::move(reply)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(std::uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    BOOST_REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    BOOST_REQUIRE(::listen(fd_, 8) == 0);
    if (!reply_.empty())
      server_ = std::thread([this] {
        const int c = ::accept(fd_, nullptr, nullptr);
        char buf[64];
        if (c >= 0 && ::recv(c, buf, sizeof buf, 0) > 0)
          ::send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
        std::this_thread::sleep_for(200ms);
        if (c >= 0) ::close(c);
      });
  }
  ~NotAStore() {
    if (server_.joinable()) server_.join();
    ::close(fd_);
  }

 private:
  int fd_ = -1;
  std::string reply_;
  std::thread server_;
};
}  // namespace

// FSDP_TIMEOUT_MS bounds the handshake: a port that accepts and never answers (another program
// holds MASTER_PORT, rank 0 failed to start the store) fails within the timeout, naming the
// address; a program that answers something else is named as not a store.
BOOST_AUTO_TEST_CASE(tcp_store_handshake_with_a_program_that_is_not_a_store) {
  const int port = 40000 + int(::getpid() % 10000);
  {
    NotAStore silent(port, "");
    const auto start = std::chrono::steady_clock::now();
    try {
      TcpStore("127.0.0.1", port, false, "job", 300ms);
      BOOST_ERROR("expected a timeout");
    } catch (const CommTimeoutError& e) {
      BOOST_TEST(has(e.what(), fmt::format("connected to 127.0.0.1:{}, but no store answered "
                                           "within 300 ms",
                                           port)),
                 e.what());
    }
    BOOST_TEST((std::chrono::steady_clock::now() - start < 5s));  // bounded, not forever
  }
  {
    NotAStore http(port + 1, "HTTP/1.0 400 Bad Request\r\n\r\n");
    try {
      TcpStore("127.0.0.1", port + 1, false, "job", 5s);
      BOOST_ERROR("expected an error");
    } catch (const CommTimeoutError& e) {
      BOOST_ERROR("not a timeout: " << e.what());
    } catch (const CommError& e) {
      BOOST_TEST(has(e.what(), fmt::format("the program at 127.0.0.1:{} is not an fsdp-cpp store "
                                           "(it answered 'HTTP/",
                                           port + 1)),
                 e.what());
    }
  }
}
