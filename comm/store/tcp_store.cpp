#include "comm/store/tcp_store.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <thread>

#include "comm/errors.h"

namespace fsdp::comm {

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kSet = 'S', kGet = 'G', kCheck = 'C';

// Waits until fd is readable/writable or the deadline passes (false) .
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, int(std::min<long long>(left.count(), 100)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

// Moves exactly n bytes; false on EOF, error or deadline.
bool send_all(int fd, const void* data, std::size_t n, Clock::time_point deadline) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    if (!wait_fd(fd, POLLOUT, deadline)) return false;
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= std::size_t(k);
  }
  return true;
}
bool recv_all(int fd, void* data, std::size_t n, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    if (!wait_fd(fd, POLLIN, deadline)) return false;
    ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= std::size_t(k);
  }
  return true;
}

sockaddr_in resolve(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(address.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr)
    throw CommError(
        fmt::format("tcp store: cannot resolve MASTER_ADDR '{}': {}", address, ::gai_strerror(rc)));
  sockaddr_in addr{};
  std::memcpy(&addr, found->ai_addr, sizeof addr);
  ::freeaddrinfo(found);
  addr.sin_port = htons(std::uint16_t(port));
  return addr;
}

const auto kForever = std::chrono::hours(24 * 365);

}  // namespace

// The server: one thread accepting, one per connection; get requests wait for their key.
class TcpStoreServer {
 public:
  TcpStoreServer(const std::string& address, int port) {
    sockaddr_in addr = resolve(address, port);
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listen_fd_ < 0)
      throw CommError(fmt::format("tcp store: socket(): {}", std::strerror(errno)));
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // TIME_WAIT only
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      int err = errno;
      ::close(listen_fd_);
      if (err == EADDRINUSE)
        throw CommError(fmt::format(
            "tcp store: port {} on {} is already in use (another job, or a process of an earlier "
            "run, holds it): set MASTER_PORT to a free port",
            port, address));
      throw CommError(
          fmt::format("tcp store: cannot bind {}:{}: {}", address, port, std::strerror(err)));
    }
    if (::listen(listen_fd_, 128) != 0) {
      int err = errno;
      ::close(listen_fd_);
      throw CommError(
          fmt::format("tcp store: listen on {}:{}: {}", address, port, std::strerror(err)));
    }
    accept_thread_ = std::thread([this] { accept_loop(); });
  }

  ~TcpStoreServer() {
    stopping_ = true;
    cv_.notify_all();
    accept_thread_.join();
    ::close(listen_fd_);
    std::vector<std::thread> connections;
    {
      std::lock_guard lock(mutex_);
      connections.swap(connections_);
    }
    for (auto& t : connections) t.join();
  }

 private:
  void accept_loop() {
    while (!stopping_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard lock(mutex_);
      connections_.emplace_back([this, fd] { serve(fd); });
    }
  }

  bool read_blob(int fd, std::string& out) {
    std::uint32_t n = 0;
    if (!recv_all(fd, &n, 4, Clock::now() + kForever)) return false;
    out.resize(n);
    return n == 0 || recv_all(fd, out.data(), n, Clock::now() + kForever);
  }

  bool reply(int fd, char status, const std::string& data) {
    std::uint32_t n = std::uint32_t(data.size());
    auto deadline = Clock::now() + std::chrono::seconds(30);
    return send_all(fd, &status, 1, deadline) && send_all(fd, &n, 4, deadline) &&
           (n == 0 || send_all(fd, data.data(), n, deadline));
  }

  void serve(int fd) {
    for (;;) {
      char op = 0;
      // Poll in short steps so that shutdown is noticed.
      pollfd p{fd, POLLIN, 0};
      int rc = ::poll(&p, 1, 100);
      if (stopping_) break;
      if (rc <= 0) continue;
      std::string key, value;
      if (!recv_all(fd, &op, 1, Clock::now() + kForever) || !read_blob(fd, key) ||
          !read_blob(fd, value))
        break;
      bool ok = true;
      if (op == kSet) {
        {
          std::lock_guard lock(mutex_);
          data_[key] = value;
        }
        cv_.notify_all();
        ok = reply(fd, 0, "");
      } else if (op == kCheck) {
        std::lock_guard lock(mutex_);
        bool present = data_.count(key) != 0;
        ok = reply(fd, present ? 1 : 0, "");
      } else if (op == kGet) {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || data_.count(key) != 0; });
        if (stopping_) break;
        std::string found = data_[key];
        lock.unlock();
        ok = reply(fd, 0, found);
      } else {
        break;
      }
      if (!ok) break;
    }
    ::close(fd);
  }

  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;
  std::vector<std::thread> connections_;
};

TcpStore::TcpStore(const std::string& address, int port, bool is_host, std::string prefix,
                   std::chrono::milliseconds timeout)
    : address_(address), port_(port), prefix_(std::move(prefix)) {
  if (port <= 0 || port > 65535)
    throw std::invalid_argument(fmt::format("tcp store: invalid MASTER_PORT {}", port));
  if (is_host) server_ = std::make_unique<TcpStoreServer>(address, port);
  const sockaddr_in addr = resolve(address, port);
  const auto deadline = Clock::now() + timeout;
  for (auto pause = std::chrono::milliseconds(10);;
       pause = std::min(pause * 2, std::chrono::milliseconds(500))) {
    socket_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(socket_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) break;
    int err = errno;
    ::close(socket_);
    socket_ = -1;
    if (Clock::now() > deadline)
      throw CommTimeoutError(fmt::format(
          "tcp store: could not connect to rank 0's store at {}:{} within {} ms ({}): is rank 0 "
          "running, and are MASTER_ADDR/MASTER_PORT the same on every rank?",
          address, port, timeout.count(), std::strerror(err)));
    std::this_thread::sleep_for(pause);
  }
  int one = 1;
  ::setsockopt(socket_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

TcpStore::~TcpStore() {
  if (socket_ >= 0) ::close(socket_);
  server_.reset();
}

std::string TcpStore::describe() const {
  return fmt::format("tcp store {}:{}", address_, port_);
}

std::vector<char> TcpStore::request(char op, const std::string& key, const std::vector<char>& value,
                                    std::chrono::milliseconds timeout) {
  std::lock_guard lock(mutex_);
  if (socket_ < 0) throw CommError(fmt::format("{}: connection lost earlier", describe()));
  const std::string full_key = prefix_ + "/" + key;
  const auto deadline = Clock::now() + timeout;
  std::uint32_t key_len = std::uint32_t(full_key.size()), value_len = std::uint32_t(value.size());
  bool sent = send_all(socket_, &op, 1, deadline) && send_all(socket_, &key_len, 4, deadline) &&
              send_all(socket_, full_key.data(), key_len, deadline) &&
              send_all(socket_, &value_len, 4, deadline) &&
              (value_len == 0 || send_all(socket_, value.data(), value_len, deadline));
  char status = 0;
  std::uint32_t n = 0;
  std::vector<char> reply;
  bool received =
      sent && recv_all(socket_, &status, 1, deadline) && recv_all(socket_, &n, 4, deadline);
  if (received) {
    reply.resize(n);
    received = n == 0 || recv_all(socket_, reply.data(), n, deadline);
  }
  if (!received) {
    ::close(socket_);  // the stream is out of step now; later requests fail clearly
    socket_ = -1;
    if (Clock::now() + std::chrono::milliseconds(5) >= deadline)
      throw CommTimeoutError(fmt::format("{}: timed out after {} ms waiting for key '{}'",
                                         describe(), timeout.count(), key));
    throw CommError(fmt::format("{}: connection to rank 0's store lost (request for key '{}')",
                                describe(), key));
  }
  if (op == kCheck) return std::vector<char>(1, status);
  return reply;
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  request(kSet, key, value, std::chrono::minutes(1));
}

std::vector<char> TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return request(kGet, key, {}, timeout);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  for (auto& k : keys)
    if (request(kCheck, k, {}, std::chrono::minutes(1))[0] == 0) return false;
  return true;
}

}  // namespace fsdp::comm
