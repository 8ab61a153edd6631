#include "bench/common/cli.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <stdexcept>

#include "core/error.h"

namespace fsdp::bench {

CLI::Validator at_least(long long min) {
  return CLI::Validator(
      [min](std::string& s) -> std::string {
        long long v = 0;
        const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (err != std::errc() || end != s.data() + s.size() || v < min)
          return fmt::format("'{}' is not an integer >= {}", s, min);
        return {};
      },
      fmt::format(">={}", min));
}

Cli::Cli(std::string program, const std::string& description)
    : program_(std::move(program)), app_(description, program_) {
  app_.add_option("--json", json_path_, "also write the results as JSON to FILE")
      ->type_name("FILE");
}

void Cli::add_iters(int& iters, const std::string& help) {
  app_.add_option("--iters", iters, help)->check(at_least(1))->capture_default_str();
  iters_ = &iters;
}

void Cli::add_warmup(int& warmup) {
  app_.add_option("--warmup", warmup, "untimed iterations first")
      ->check(at_least(0))
      ->capture_default_str();
  warmup_ = &warmup;
}

void Cli::add_threads(int& threads, const std::string& help) {
  app_.add_option("--threads", threads, help)->check(at_least(1))->capture_default_str();
  threads_ = &threads;
}

void Cli::add_threads(std::vector<int>& threads, const std::string& help) {
  app_.add_option("--threads", threads, help)
      ->delimiter(',')
      ->check(at_least(1))
      ->capture_default_str();
  thread_list_ = &threads;
}

int Cli::parse(int argc, char** argv) {
  argv_.assign(argv, argv + argc);
  try {
    app_.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app_.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app_.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: error: %s\n", program_.c_str(), e.what());
    return 2;
  }
  return -1;
}

nlohmann::ordered_json Cli::options() const {
  nlohmann::ordered_json o;
  o["argv"] = argv_;
  if (iters_) o["iters"] = *iters_;
  if (warmup_) o["warmup"] = *warmup_;
  if (threads_) o["threads"] = *threads_;
  if (thread_list_) o["threads"] = *thread_list_;
  return o;
}

int run_main(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 2;
  } catch (const fsdp::ValueError& e) {  // bad arguments to a library call, or the environment
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 1;
  }
}

}  // namespace fsdp::bench
