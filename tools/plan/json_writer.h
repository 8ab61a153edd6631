// Internal to the plan formats: a small streaming JSON writer.
#pragma once

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace fsdp::plan {

// A small streaming JSON writer: a million-unit plan is written without building a DOM.
class JsonOut {
 public:
  // With a sink, the text goes to it in blocks of about kBlock bytes as it is made.
  explicit JsonOut(std::FILE* sink = nullptr) : sink_(sink) {}
  std::string str() { return std::move(out_); }
  // Writes what is buffered to the sink; false once a write has failed.
  bool flush() {
    if (sink_ && !out_.empty() && ok_)
      ok_ = std::fwrite(out_.data(), 1, out_.size(), sink_) == out_.size();
    out_.clear();
    return ok_;
  }
  void open(char c) {
    comma();
    out_ += c;
    first_ = true;
    ++depth_;
  }
  void close(char c) {
    --depth_;
    if (!first_) newline();
    out_ += c;
    first_ = false;
    if (sink_ && out_.size() >= kBlock) flush();
  }
  void key(std::string_view k) {
    comma();
    string(k);
    out_ += ": ";
    pending_key_ = true;
  }
  void value(std::string_view v) {
    comma();
    string(v);
  }
  void value(const std::string& v) { value(std::string_view(v)); }
  void value(const char* v) { value(std::string_view(v)); }
  void value(std::int64_t v) {
    comma();
    char buf[24];
    out_.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  }
  void value(std::size_t v) { value(static_cast<std::int64_t>(v)); }
  void value(int v) { value(static_cast<std::int64_t>(v)); }
  void value(bool v) {
    comma();
    out_ += v ? "true" : "false";
  }
  void raw(const char* text) { out_ += text; }
  void null() {
    comma();
    out_ += "null";
  }
  template <typename T>
  void field(std::string_view k, const T& v) {
    key(k);
    value(v);
  }
  // An inline list whose items come one by one: begin_list(key), item(s)..., end_list().
  void begin_list(std::string_view k) {
    key(k);
    comma();
    out_ += '[';
    list_first_ = true;
  }
  void item(const std::string& s) {
    if (!list_first_) out_ += ", ";
    list_first_ = false;
    string(s);
    if (sink_ && out_.size() >= kBlock) flush();
  }
  void end_list() { out_ += ']'; }
  void strings(std::string_view k, const std::vector<std::string>& v, bool inline_list) {
    key(k);
    if (inline_list) {
      comma();
      out_ += '[';
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) out_ += ", ";
        string(v[i]);
      }
      out_ += ']';
      return;
    }
    open('[');
    for (const auto& s : v) value(s);
    close(']');
  }

 private:
  void newline() {
    out_ += '\n';
    out_.append(static_cast<std::size_t>(depth_), ' ');
  }
  void comma() {
    if (pending_key_) {
      pending_key_ = false;
      return;
    }
    if (!first_) out_ += ',';
    if (depth_ > 0) newline();
    first_ = false;
  }
  void string(std::string_view s) {
    out_ += '"';
    // Runs of plain characters are appended whole (FQNs run to gigabytes on deep chains).
    const char* run = s.data();
    const char* end = s.data() + s.size();
    for (const char* c = run; c != end; ++c) {
      const auto u = static_cast<unsigned char>(*c);
      if (u >= 0x20 && u != '"' && u != '\\') continue;
      out_.append(run, c);
      switch (*c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\t':
          out_ += "\\t";
          break;
        case '\r':
          out_ += "\\r";
          break;
        default:
          out_ += fmt::format("\\u{:04x}", static_cast<int>(u));
      }
      run = c + 1;
    }
    out_.append(run, end);
    out_ += '"';
  }
  static constexpr std::size_t kBlock = 1 << 20;
  std::FILE* sink_;
  bool ok_ = true;
  std::string out_;
  bool first_ = true;
  bool pending_key_ = false;
  bool list_first_ = true;
  int depth_ = 0;
};

}  // namespace fsdp::plan
