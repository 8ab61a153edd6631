// The one command line of every bench program (CLI11): the program's own flags plus the common
// ones, spelled and checked alike everywhere:
//   --iters N     timed iterations (or rounds, runs: what the program medians over), N >= 1
//   --warmup N    untimed iterations first, N >= 0
//   --threads N   (or a comma list where the program sweeps thread counts), N >= 1
//   --json FILE   also write the results as JSON (bench/common/report.h) beside the table
// and how a program ends: a bad command line or environment is one line on stderr,
// "<program>: error: <message>", exit 2; any other error the same line, exit 1.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fsdp::bench {

// A CLI11 check for an integer flag: "'<value>' is not an integer >= <min>" when it is not.
CLI::Validator at_least(long long min);

class Cli {
 public:
  Cli(std::string program, const std::string& description);

  CLI::App& app() { return app_; }
  const std::string& program() const { return program_; }
  const std::string& json_path() const { return json_path_; }

  // The common flags; each one's default is the variable's value before parsing.
  void add_iters(int& iters, const std::string& help = "timed iterations (median)");
  void add_warmup(int& warmup);
  void add_threads(int& threads, const std::string& help);
  void add_threads(std::vector<int>& threads, const std::string& help);  // --threads 1,2

  // Parses the command line: -1 to go on, otherwise the exit code (0 after --help; 2 after a bad
  // command line, said in one line on stderr).
  int parse(int argc, char** argv);

  // The command line and the common flags' values, as the report records them.
  nlohmann::ordered_json options() const;

 private:
  std::string program_;
  CLI::App app_;
  std::string json_path_;
  std::vector<std::string> argv_;
  const int* iters_ = nullptr;
  const int* warmup_ = nullptr;
  const int* threads_ = nullptr;
  const std::vector<int>* thread_list_ = nullptr;
};

// Runs a program's body and turns what it throws into one line on stderr and an exit code: 2 for
// a bad command line (std::invalid_argument) or environment (fsdp::ValueError), 1 for anything
// else. Without it an uncaught exception ends the benchmark in SIGABRT and a core dump.
int run_main(const std::string& program, const std::function<int()>& body);

}  // namespace fsdp::bench
