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
#include <string_view>
#include <thread>

#include "comm/errors.h"
#include "comm/store/tcp_store_protocol.h"
#include "core/error.h"

namespace fsdp::comm {

namespace {

using Clock = std::chrono::steady_clock;
namespace wire = tcp_store_protocol;

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

// Whether a wait that ended was ended by the deadline (wait_fd rounds down to milliseconds).
bool expired(Clock::time_point deadline) {
  return Clock::now() + std::chrono::milliseconds(5) >= deadline;
}

// Moves exactly n bytes; false on EOF, error or deadline.
bool send_all(int fd, const void* data, std::size_t n, Clock::time_point deadline) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    if (!wait_fd(fd, POLLOUT, deadline)) return false;
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
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
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
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

// Connects within the deadline (a blocking connect to an address that drops packets would wait
// minutes). Returns the socket, or -1 with errno set.
int connect_by(const sockaddr_in& addr, Clock::time_point deadline) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  int err = 0;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      err = ETIMEDOUT;
      if (wait_fd(fd, POLLOUT, deadline)) {
        socklen_t len = sizeof err;
        if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
  }
  if (err != 0) {
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// What answered a hello: the store, silence until the deadline, or something else.
enum class Hello { Store, Silent, Foreign };

Hello say_hello(int fd, Clock::time_point deadline, std::string& answer) {
  const std::string bytes =
      wire::encode_request({wire::kHello, std::string(wire::kHelloMagic), {}});
  std::string header(wire::kReplyHeaderBytes, '\0');
  if (!send_all(fd, bytes.data(), bytes.size(), deadline)) return Hello::Foreign;
  if (!recv_all(fd, header.data(), header.size(), deadline))
    return expired(deadline) ? Hello::Silent : Hello::Foreign;
  wire::Reply reply;
  auto parsed = wire::parse_reply(header, reply);
  if (parsed.status == wire::ParseStatus::NeedMore && parsed.needed <= 64) {
    header.resize(parsed.needed);
    if (!recv_all(fd, header.data() + wire::kReplyHeaderBytes,
                  parsed.needed - wire::kReplyHeaderBytes, deadline))
      return expired(deadline) ? Hello::Silent : Hello::Foreign;
    parsed = wire::parse_reply(header, reply);
  }
  answer = header;
  return parsed.status == wire::ParseStatus::Complete && reply.data == wire::kHelloMagic
             ? Hello::Store
             : Hello::Foreign;
}

// The first bytes another program sent, printable, for the message.
std::string printable(const std::string& bytes) {
  std::string out;
  for (char c : bytes) out += (c >= 32 && c < 127) ? c : '.';
  return out;
}

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

  bool reply(int fd, char status, const std::string& data) {
    const std::string bytes = wire::encode_reply({status, data});
    return send_all(fd, bytes.data(), bytes.size(), Clock::now() + std::chrono::seconds(30));
  }

  // Answers one request; false ends the connection.
  bool handle(int fd, wire::Request& request) {
    if (request.op == wire::kSet) {
      {
        std::lock_guard lock(mutex_);
        data_[request.key] = std::move(request.value);
      }
      cv_.notify_all();
      return reply(fd, 0, "");
    }
    if (request.op == wire::kHello) return reply(fd, 0, std::string(wire::kHelloMagic));
    if (request.op == wire::kCheck) {
      std::unique_lock lock(mutex_);
      const bool present = data_.count(request.key) != 0;
      lock.unlock();
      return reply(fd, present ? 1 : 0, "");
    }
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return stopping_ || data_.count(request.key) != 0; });
    if (stopping_) return false;
    std::string found = data_[request.key];
    lock.unlock();
    return reply(fd, 0, found);
  }

  // Reads whatever arrives and answers each complete request. Bytes that are not a request (a
  // stray client, a port scanner) end that connection, never the server; a shutdown is noticed
  // within 100 ms even while a client is silent in the middle of a request.
  void serve(int fd) {
    std::string pending;
    std::vector<char> chunk(std::size_t(64) << 10);
    bool open = true;
    while (open && !stopping_) {
      pollfd p{fd, POLLIN, 0};
      const int rc = ::poll(&p, 1, 100);
      if (rc < 0 && errno != EINTR) break;
      if (rc <= 0) continue;
      const ssize_t k = ::recv(fd, chunk.data(), chunk.size(), 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) break;
      pending.append(chunk.data(), std::size_t(k));
      std::size_t used = 0;
      for (;;) {
        wire::Request request;
        const auto parsed = wire::parse_request(std::string_view(pending).substr(used), request);
        if (parsed.status == wire::ParseStatus::NeedMore) break;
        if (parsed.status == wire::ParseStatus::Invalid || !handle(fd, request)) {
          open = false;
          break;
        }
        used += parsed.consumed;
      }
      pending.erase(0, used);
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
    throw ValueError(fmt::format("tcp store: invalid MASTER_PORT {}", port));
  if (is_host) server_ = std::make_unique<TcpStoreServer>(address, port);
  const sockaddr_in addr = resolve(address, port);
  // Connect and handshake share one deadline, FSDP_TIMEOUT_MS: a rank whose rank 0 never started
  // the store, or whose MASTER_PORT another program holds, fails within it naming the address.
  const auto deadline = Clock::now() + timeout;
  for (auto pause = std::chrono::milliseconds(10);;
       pause = std::min(pause * 2, std::chrono::milliseconds(500))) {
    socket_ = connect_by(addr, deadline);
    if (socket_ >= 0) {
      std::string answer;
      const Hello hello = say_hello(socket_, deadline, answer);
      if (hello == Hello::Store) break;
      ::close(socket_);
      socket_ = -1;
      if (hello == Hello::Silent)
        throw CommTimeoutError(fmt::format(
            "tcp store: connected to {}:{}, but no store answered within {} ms: another program "
            "may hold MASTER_PORT (did rank 0 fail to start the store?); set MASTER_PORT to a "
            "free port on every rank",
            address, port, timeout.count()));
      throw CommError(fmt::format(
          "tcp store: the program at {}:{} is not an fsdp-cpp store ({}): another program holds "
          "MASTER_PORT; set MASTER_PORT to a free port on every rank",
          address, port,
          answer.empty() ? std::string("it closed the connection without answering")
                         : fmt::format("it answered '{}'", printable(answer))));
    }
    const int err = errno;
    if (Clock::now() + pause > deadline)
      throw CommTimeoutError(fmt::format(
          "tcp store: could not connect to rank 0's store at {}:{} within {} ms ({}): is rank 0 "
          "running, and are MASTER_ADDR/MASTER_PORT the same on every rank?",
          address, port, timeout.count(), std::strerror(err)));
    std::this_thread::sleep_for(pause);
  }
  int one = 1;
  ::setsockopt(socket_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeout_ = timeout;
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
  const std::string bytes =
      wire::encode_request({op, prefix_ + "/" + key, std::string(value.begin(), value.end())});
  std::lock_guard lock(mutex_);
  if (socket_ < 0) throw CommError(fmt::format("{}: connection lost earlier", describe()));
  const auto deadline = Clock::now() + timeout;
  std::string reply_bytes(wire::kReplyHeaderBytes, '\0');
  wire::Reply reply;
  wire::ParseResult parsed;
  bool received = send_all(socket_, bytes.data(), bytes.size(), deadline) &&
                  recv_all(socket_, reply_bytes.data(), reply_bytes.size(), deadline);
  if (received) {
    parsed = wire::parse_reply(reply_bytes, reply);
    if (parsed.status == wire::ParseStatus::NeedMore) {
      // The header is whole: the data's length is known and within the limit.
      const std::size_t header = reply_bytes.size();
      reply_bytes.resize(parsed.needed);
      received =
          recv_all(socket_, reply_bytes.data() + header, reply_bytes.size() - header, deadline);
      if (received) parsed = wire::parse_reply(reply_bytes, reply);
    }
  }
  if (!received || parsed.status != wire::ParseStatus::Complete) {
    ::close(socket_);  // the stream is out of step now; later requests fail clearly
    socket_ = -1;
    if (received)
      throw CommError(fmt::format("{}: malformed reply to the request for key '{}': {}", describe(),
                                  key, parsed.error));
    if (expired(deadline))
      throw CommTimeoutError(fmt::format("{}: timed out after {} ms waiting for key '{}'",
                                         describe(), timeout.count(), key));
    throw CommError(fmt::format("{}: connection to rank 0's store lost (request for key '{}')",
                                describe(), key));
  }
  if (op == wire::kCheck) return std::vector<char>(1, reply.status);
  return std::vector<char>(reply.data.begin(), reply.data.end());
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  request(wire::kSet, key, value, timeout_);
}

std::vector<char> TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return request(wire::kGet, key, {}, timeout);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  for (auto& k : keys)
    if (request(wire::kCheck, k, {}, timeout_)[0] == 0) return false;
  return true;
}

}  // namespace fsdp::comm
