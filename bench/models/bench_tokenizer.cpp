// bench_tokenizer: encoding speed (MB/s) of models/tokenizer against Hugging Face tokenizers (its
// Rust encoder, called once from Python on the whole batch, parallelism off) on the same
// documents and one thread, in the same run; the ids must agree (a hash of them).
//   bench_tokenizer [--tokenizer FILE] [--text FILE] [--kb 4096] [--iters 3] [--no-hf]
//                   [--json FILE]
// The text: --text, or Debian's license texts repeated to --kb KiB; one document per paragraph
// (blank-line separated), each encoded without special tokens. Cold: a fresh tokenizer (empty
// word cache) per timed run, as HF's side is; warm: the same tokenizer again.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/common/cli.h"
#include "bench/common/report.h"
#include "bench/common/timing.h"
#include "bench/common/torch_python.h"
#include "models/tokenizer/tokenizer.h"

using namespace fsdp;
namespace fs = std::filesystem;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(fmt::format("cannot read '{}'", path));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string license_texts(std::size_t bytes) {
  std::string one;
  for (const auto& e : fs::directory_iterator("/usr/share/common-licenses"))
    if (e.is_regular_file()) one += read_file(e.path().string()) + "\n\n";
  if (one.empty()) throw std::runtime_error("no text in /usr/share/common-licenses; give --text");
  std::string text;
  while (text.size() < bytes) text += one;
  return text.substr(0, bytes);
}

std::vector<std::string> paragraphs(const std::string& text) {
  std::vector<std::string> docs;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find("\n\n", start);
    end = end == std::string::npos ? text.size() : end + 2;
    docs.push_back(text.substr(start, end - start));
    start = end;
  }
  return docs;
}

// A hash of every id in order, the same on both sides: (h * 1000003 + id) mod 2^61.
std::uint64_t hash_ids(std::uint64_t h, const std::vector<std::uint32_t>& ids) {
  constexpr std::uint64_t kMod = std::uint64_t(1) << 61;
  for (std::uint32_t id : ids) h = std::uint64_t((__uint128_t(h) * 1000003 + id) % kMod);
  return h;
}

// HF's seconds per run (median of `iters`, a fresh tokenizer each) and the hash of its ids.
std::pair<double, std::uint64_t> hf_encode(const std::string& tokenizer,
                                           const std::vector<std::string>& docs, int iters) {
  std::string python;
  for (const std::string& py : bench::default_torch_pythons())
    if (bench::run_command("'" + py + "' -c 'import tokenizers; print(1)' 2>/dev/null") == "1\n") {
      python = py;
      break;
    }
  if (python.empty()) throw std::runtime_error("no python imports tokenizers; use --no-hf");
  const fs::path docs_file =
      fs::temp_directory_path() / fmt::format("bench_tokenizer_{}.json", ::getpid());
  std::ofstream(docs_file) << nlohmann::json(docs).dump();
  const std::string script = fmt::format(
      "import json,time,statistics\n"
      "from tokenizers import Tokenizer\n"
      "docs=json.load(open('{}'))\n"
      "ts=[];n=0\n"
      "for _ in range({}):\n"
      "  t=Tokenizer.from_file('{}')\n"
      "  t0=time.perf_counter();enc=t.encode_batch_fast(docs,add_special_tokens=False)\n"
      "  ts.append(time.perf_counter()-t0)\n"
      "h=0\n"
      "for e in enc:\n"
      "  for i in e.ids: h=(h*1000003+i)%(1<<61)\n"
      "print(json.dumps({{'seconds':statistics.median(ts),'hash':h}}))\n",
      docs_file.string(), iters, tokenizer);
  const std::string out = bench::run_command("TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 '" +
                                             python + "' -c \"" + script + "\"");
  fs::remove(docs_file);
  try {
    const auto j = nlohmann::json::parse(out);
    return {j["seconds"].get<double>(), j["hash"].get<std::uint64_t>()};
  } catch (const std::exception&) {
    throw std::runtime_error(fmt::format("HF's side printed no result: '{}'", out));
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::Cli cli("bench_tokenizer",
                 "models/tokenizer's encoding speed against HF tokenizers on one thread");
  std::string tokenizer = FSDP_SOURCE_ROOT "/tests/fixtures/tokenizers/gpt2_style/tokenizer.json";
  std::string text_path;
  int kb = 4096, iters = 3;
  bool no_hf = false;
  cli.add_iters(iters, "timed runs (median)");
  cli.app().add_option("--tokenizer", tokenizer, "a tokenizer.json")->capture_default_str();
  cli.app().add_option("--text", text_path, "the text (default: Debian's license texts)");
  cli.app()
      .add_option("--kb", kb, "KiB of license text")
      ->check(bench::at_least(1))
      ->capture_default_str();
  cli.app().add_flag("--no-hf", no_hf, "ours only, no HF baseline");
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  return bench::run_main(cli.program(), [&] {
    const std::string text =
        text_path.empty() ? license_texts(std::size_t(kb) << 10) : read_file(text_path);
    const std::vector<std::string> docs = paragraphs(text);
    const double mb = double(text.size()) / 1e6;
    std::size_t ours_tokens = 0;
    std::uint64_t ours_hash = 0;
    auto encode_all = [&](const models::Tokenizer& tok) {
      ours_tokens = 0;
      ours_hash = 0;
      for (const std::string& d : docs) {
        const auto ids = tok.encode(d, {.add_special_tokens = false});
        ours_tokens += ids.size();
        ours_hash = hash_ids(ours_hash, ids);
      }
    };
    std::vector<double> cold, warm;
    for (int i = 0; i < iters; ++i) {
      const auto tok = models::Tokenizer::from_file(tokenizer);
      double t0 = bench::wall_now_ms();
      encode_all(tok);
      cold.push_back((bench::wall_now_ms() - t0) * 1e-3);
      t0 = bench::wall_now_ms();
      encode_all(tok);
      warm.push_back((bench::wall_now_ms() - t0) * 1e-3);
    }
    bench::Report report(cli);
    report["text"] = {{"bytes", text.size()},
                      {"documents", docs.size()},
                      {"tokens", ours_tokens},
                      {"tokenizer", tokenizer}};
    fmt::print("{:.2f} MB in {} documents, {} tokens ({})\n", mb, docs.size(), ours_tokens,
               tokenizer);
    fmt::print("{:<12} {:>10} {:>10}\n", "impl", "seconds", "MB/s");
    auto row = [&](const char* impl, double seconds) {
      fmt::print("{:<12} {:>10.4f} {:>10.2f}\n", impl, seconds, mb / seconds);
      report.row({{"impl", impl}, {"seconds", seconds}, {"mb_per_s", mb / seconds}});
    };
    const double cold_s = bench::median(cold), warm_s = bench::median(warm);
    row("ours_cold", cold_s);
    row("ours_warm", warm_s);
    if (!no_hf) {
      const auto [hf_s, hf_hash] = hf_encode(tokenizer, docs, iters);
      if (hf_hash != ours_hash)
        throw std::runtime_error("HF's ids differ from ours (their hashes differ)");
      row("hf", hf_s);
      report.ratio("ours_cold_vs_hf_speed", hf_s / cold_s);
      report.ratio("ours_warm_vs_hf_speed", hf_s / warm_s);
      fmt::print("ours / HF speed: cold {:.2f}x, warm {:.2f}x\n", hf_s / cold_s, hf_s / warm_s);
    }
    report.write();
    return 0;
  });
}
