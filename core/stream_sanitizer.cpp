#include "core/stream_sanitizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

namespace fsdp::stream_sanitizer {

namespace detail {
std::atomic<int> enabled_count{0};
}

namespace {

// A stream as a key: (device type, index, id).
struct StreamKey {
  int type = 0, index = 0;
  std::uint64_t id = 0;
  auto operator<=>(const StreamKey&) const = default;
};
StreamKey key(const Stream& s) {
  return {static_cast<int>(s.device.type), s.device.index, s.id};
}
std::string stream_name(const StreamKey& k) {
  return fmt::format("stream {} of {}", k.id,
                     Device(static_cast<DeviceType>(k.type), k.index).str());
}

// The last item of each stream known to run before the next item of the clock's owner.
using Clock = std::map<StreamKey, std::uint64_t>;
void join(Clock& into, const Clock& other) {
  for (const auto& [s, item] : other) {
    auto& mine = into[s];
    mine = std::max(mine, item);
  }
}

struct Recorded {  // one access of one item, device addresses [begin, end)
  StreamKey stream;
  std::uint64_t item = 0;
  std::uintptr_t begin = 0, end = 0;
  bool write = false;
  std::string what;
};

struct State {
  std::mutex mutex;
  std::map<StreamKey, Clock> clocks;  // per stream, including its own last item
  Clock host;                         // what the host has waited for
  std::map<std::pair<StreamKey, std::uint64_t>, Clock> events;
  std::vector<Recorded> accesses;  // the live ones: a write drops those it covers and follows
  std::unordered_map<const void*, std::vector<StreamKey>> recorded_streams;
  std::map<std::uintptr_t, std::pair<std::uintptr_t, std::string>> owners;  // begin -> end, who
  std::vector<Report> reports;
  // Backends that number events (on_work): each stream's last item, and the item each of its
  // events follows.
  std::map<StreamKey, std::uint64_t> work_items;
  std::map<std::pair<StreamKey, std::uint64_t>, std::uint64_t> item_of_event;

  Clock& clock(const StreamKey& s) { return clocks[s]; }
  bool ordered(const Clock& c, const Recorded& r) const {
    auto it = c.find(r.stream);
    return it != c.end() && it->second >= r.item;
  }
  std::string owner(std::uintptr_t address) const {
    auto it = owners.upper_bound(address);
    if (it != owners.begin() && (--it)->second.first > address) return it->second.second;
    return fmt::format("device memory at {:#x}", address);
  }
};

State& state() {
  static State* s = new State;  // never destroyed: worker threads may report at exit
  return *s;
}

thread_local const char* t_current_op = nullptr;
thread_local int t_within_work = 0;  // WithinWork's depth

const char* kind(bool write) {
  return write ? "writes" : "reads";
}

}  // namespace

namespace {

void launch_locked(State& st, const Stream& stream, std::uint64_t item) {
  Clock& c = st.clock(key(stream));
  join(c, st.host);  // work queued after a host wait runs after what the host waited for
  c[key(stream)] = item;
}

void record_locked(State& st, const Stream& stream, std::uint64_t item) {
  Clock c = st.clock(key(stream));
  c[key(stream)] = std::max(c[key(stream)], item);
  st.events[{key(stream), item}] = std::move(c);
}

void wait_locked(State& st, const Stream& waiter, const Stream& stream, std::uint64_t item) {
  Clock& c = st.clock(key(waiter));
  auto it = st.events.find({key(stream), item});
  if (it != st.events.end()) join(c, it->second);
  auto& direct = c[key(stream)];
  direct = std::max(direct, item);
}

void synchronize_locked(State& st, const Stream& stream, std::uint64_t item) {
  auto it = st.events.find({key(stream), item});
  if (it != st.events.end()) join(st.host, it->second);
  auto& direct = st.host[key(stream)];
  direct = std::max(direct, item);
}

void accesses_locked(State& st, const Stream& stream, const char* what,
                     const std::vector<Access>& accesses) {
  const StreamKey s = key(stream);
  const Clock& c = st.clock(s);
  const auto own = c.find(s);
  const std::uint64_t item = own != c.end() ? own->second : 0;
  const std::string op = t_current_op ? fmt::format("{} ({})", t_current_op, what) : what;
  for (const Access& a : accesses) {
    if (a.ptr == nullptr || a.bytes == 0) continue;
    const auto begin = reinterpret_cast<std::uintptr_t>(a.ptr), end = begin + a.bytes;
    for (const Recorded& r : st.accesses) {
      if (r.stream == s || (!a.write && !r.write) || r.end <= begin || end <= r.begin) continue;
      if (st.ordered(c, r)) continue;
      st.reports.push_back({fmt::format(
          "stream sanitizer: unsynchronized access to {}: {} on {} {} {} bytes at {:#x} while {} "
          "on {} {} {} bytes at {:#x}, with nothing ordering them (an event, wait_stream or a "
          "synchronize)",
          st.owner(begin), op, stream_name(s), kind(a.write), a.bytes, begin, r.what,
          stream_name(r.stream), kind(r.write), r.end - r.begin, r.begin)});
    }
    // A write hides the accesses it covers that it runs after.
    if (a.write)
      std::erase_if(st.accesses, [&](const Recorded& r) {
        return r.begin >= begin && r.end <= end && (r.stream == s || st.ordered(c, r));
      });
    st.accesses.push_back({s, item, begin, end, a.write, op});
  }
}

// The item event `sequence` of `stream` follows (on_work's numbering); 0 if it was recorded
// while the sanitizer was off.
std::uint64_t item_of(const State& st, const Stream& stream, std::uint64_t sequence) {
  auto it = st.item_of_event.find({key(stream), sequence});
  return it != st.item_of_event.end() ? it->second : 0;
}

}  // namespace

void on_launch(const Stream& stream, std::uint64_t item) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard lock(st.mutex);
  launch_locked(st, stream, item);
}

void on_record(const Stream& stream, std::uint64_t item) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard lock(st.mutex);
  record_locked(st, stream, item);
}

void on_wait(const Stream& waiter, const Stream& stream, std::uint64_t item) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard lock(st.mutex);
  wait_locked(st, waiter, stream, item);
}

void on_synchronize(const Stream& stream, std::uint64_t item) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard lock(st.mutex);
  synchronize_locked(st, stream, item);
}

void on_synchronize_device(Device device) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard lock(st.mutex);
  for (const auto& [s, c] : st.clocks)
    if (s.type == static_cast<int>(device.type) && s.index == device.index) join(st.host, c);
}

void on_accesses(const Stream& stream, const char* what, const std::vector<Access>& accesses) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard lock(st.mutex);
  accesses_locked(st, stream, what, accesses);
}

void on_work(const Stream& stream, const char* what, const std::vector<Access>& accesses) {
  if (!enabled() || t_within_work > 0) return;
  State& st = state();
  std::lock_guard lock(st.mutex);
  launch_locked(st, stream, ++st.work_items[key(stream)]);
  accesses_locked(st, stream, what, accesses);
}

void on_record_sequence(const Stream& stream, std::uint64_t sequence) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard lock(st.mutex);
  const std::uint64_t item = st.work_items[key(stream)];
  st.item_of_event[{key(stream), sequence}] = item;
  record_locked(st, stream, item);
}

void on_wait_sequence(const Stream& waiter, const Stream& stream, std::uint64_t sequence) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard lock(st.mutex);
  wait_locked(st, waiter, stream, item_of(st, stream, sequence));
}

void on_synchronize_sequence(const Stream& stream, std::uint64_t sequence) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard lock(st.mutex);
  synchronize_locked(st, stream, item_of(st, stream, sequence));
}

void on_record_stream(const void* base, const Stream& stream) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard lock(st.mutex);
  st.recorded_streams[base].push_back(key(stream));
}

void on_free(const void* base, std::size_t bytes, const Stream& stream) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard lock(st.mutex);
  const StreamKey s = key(stream);
  const Clock& c = st.clock(s);
  const auto begin = reinterpret_cast<std::uintptr_t>(base), end = begin + bytes;
  auto recorded = st.recorded_streams.find(base);
  auto was_recorded = [&](const StreamKey& k) {
    return recorded != st.recorded_streams.end() &&
           std::find(recorded->second.begin(), recorded->second.end(), k) != recorded->second.end();
  };
  for (const Recorded& r : st.accesses) {
    if (r.end <= begin || end <= r.begin) continue;
    if (r.stream == s || st.ordered(c, r) || st.ordered(st.host, r) || was_recorded(r.stream))
      continue;
    st.reports.push_back(
        {fmt::format("stream sanitizer: {} freed on {} while {} on {} may still use it (neither "
                     "record_stream on that stream nor a wait orders them)",
                     st.owner(begin), stream_name(s), r.what, stream_name(r.stream))});
  }
  std::erase_if(st.accesses, [&](const Recorded& r) { return r.begin >= begin && r.end <= end; });
  if (recorded != st.recorded_streams.end()) st.recorded_streams.erase(recorded);
  auto o = st.owners.lower_bound(begin);
  while (o != st.owners.end() && o->first < end) o = st.owners.erase(o);
}

void set_owner(const void* base, std::size_t bytes, std::string owner) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard lock(st.mutex);
  const auto begin = reinterpret_cast<std::uintptr_t>(base);
  st.owners[begin] = {begin + bytes, std::move(owner)};
}

WithinWork::WithinWork() {
  ++t_within_work;
}

WithinWork::~WithinWork() {
  --t_within_work;
}

Enable::Enable() {
  detail::enabled_count.fetch_add(1, std::memory_order_relaxed);
}

Enable::~Enable() {
  if (detail::enabled_count.fetch_sub(1, std::memory_order_relaxed) == 1) {
    State& st = state();
    std::lock_guard lock(st.mutex);
    st.clocks.clear();
    st.host.clear();
    st.events.clear();
    st.accesses.clear();
    st.recorded_streams.clear();
    st.owners.clear();
    st.work_items.clear();
    st.item_of_event.clear();
  }
}

std::vector<Report> reports() {
  State& st = state();
  std::lock_guard lock(st.mutex);
  return st.reports;
}

void clear_reports() {
  State& st = state();
  std::lock_guard lock(st.mutex);
  st.reports.clear();
}

const char* current_op() {
  return t_current_op;
}

void set_current_op(const char* op) {
  t_current_op = op;
}

}  // namespace fsdp::stream_sanitizer
