// The example programs' command-line checks (CLI11 validators) and their one error contract: a bad
// command line is one line on stderr, "<program>: error: <what> (see <program> --help)", and exit
// status 2, before any work. Shared by train_lm and train_gpt.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace fsdp::examples {

// An integer option's range, said in one line ("--batch: expected an integer from 1 to 65536,
// got '0'"); CLI11 prefixes the option's name.
inline CLI::Validator int_range(std::int64_t lo, std::int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        std::int64_t v = 0;
        const char* end = s.data() + s.size();
        auto [p, ec] = std::from_chars(s.data(), end, v);
        if (ec == std::errc() && p == end && v >= lo && v <= hi) return "";
        return fmt::format("expected an integer from {} to {}, got '{}'", lo, hi, s);
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}

// Any unsigned 64-bit integer (a seed), refusing a sign or a value past 2^64 - 1 that would
// otherwise wrap around.
inline CLI::Validator uint64_any() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::uint64_t v = 0;
        const char* end = s.data() + s.size();
        auto [p, ec] = std::from_chars(s.data(), end, v);
        if (ec == std::errc() && p == end) return "";
        return fmt::format("expected an integer from 0 to {}, got '{}'",
                           std::numeric_limits<std::uint64_t>::max(), s);
      },
      "INT in [0, 2^64-1]");
}

// A finite number above 0 (a learning rate), or of 0 or more with `zero_allowed` (0: off).
inline CLI::Validator finite_number(bool zero_allowed = false) {
  const char* want = zero_allowed ? "a finite number of 0 or more" : "a finite number above 0";
  return CLI::Validator(
      [zero_allowed, want](std::string& s) -> std::string {
        double v = 0;
        std::size_t used = 0;
        try {
          v = std::stod(s, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == s.size() && std::isfinite(v) && (v > 0 || (zero_allowed && v == 0))) return "";
        return fmt::format("expected {}, got '{}'", want, s);
      },
      zero_allowed ? "FLOAT >= 0" : "FLOAT > 0");
}

// Reports a bad command line in the one-line form and returns 2.
inline int usage_error(const char* program, const std::string& what) {
  fmt::print(stderr, "{}: error: {} (see {} --help)\n", program, what, program);
  return 2;
}

// Parses the command line: nullopt to go on; else the exit status (0 after --help, 2 after a bad
// command line, reported by usage_error).
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv,
                                             const char* program) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(program, e.what());
  }
  return std::nullopt;
}

}  // namespace fsdp::examples
