// Stores in one process: file store and TCP store semantics and their error messages.
#define BOOST_TEST_MODULE comm_store
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
