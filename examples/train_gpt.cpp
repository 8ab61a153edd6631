// train_gpt: a GPT trained with FSDP, in one process (ranks as threads) or one process per rank
// under mpirun (--backend mpi|gloo|nccl); byte-level by default, or over llm.c token files or
// synthetic tokens with --vocab. Prints one line per logged step: "step <i> loss <x>" (the mean
// over the global batch), then tokens/s (and MFU on a GPU) and per-rank peak memory.
// The data order is exact (examples/gpt_data.h), so N ranks x batch B print the losses of one
// rank with batch N*B.
#include <fmt/format.h>

#include <algorithm>

#include "comm/env.h"
#include "core/error.h"
#include "examples/job_files.h"
#include "examples/job_main.h"
#include "examples/token_files.h"
#include "tools/plan/model_export.h"
#include "tools/plan/model_file.h"

using namespace fsdp;
using namespace fsdp::examples;

namespace {

// train_gpt's default vocabulary: each byte of --data is a token.
constexpr std::int64_t kByteVocab = 256;

// --data or --eval-data: a text's bytes with the byte vocabulary (256), else a token file's ids.
TokenData read_data(const char* option, const std::string& path, const GPTConfig& model) {
  if (model.vocab != kByteVocab) return read_token_data(option, path, model.seq, model.vocab);
  auto bytes = std::make_shared<const std::string>(read_data_file(option, path));
  FSDP_CHECK(std::int64_t(bytes->size()) > model.seq + 1, ValueError,
             "{}: '{}' has {} bytes; --seq {} needs more than {}", option, path, bytes->size(),
             model.seq, model.seq + 1);
  return bytes;
}

// --synthetic-tokens: enough tokens that no sequence of the run repeats (the data order's
// offsets step by T through count - T - 1 positions), capped at 2^26 (256 MiB; the order wraps).
TokenData synthetic_data(const TrainGptOptions& a) {
  const GPTTrainConfig& cfg = a.cfg;
  // Every rank draws the same tokens: the threads backend's ranks, or the launcher's world.
  const std::int64_t world = a.backend == "threads" ? a.ranks : comm::env::world_size().value_or(1);
  const std::int64_t sequences = std::max<std::int64_t>(1, cfg.steps) * cfg.batch * world;
  const std::int64_t count =
      std::min(sequences * cfg.model.seq + cfg.model.seq + 1, std::int64_t{1} << 26);
  fmt::print("synthetic tokens: {} uniform ids in [0, {}) from seed {}\n", count, cfg.model.vocab,
             cfg.seed);
  return uniform_tokens(count, cfg.model.vocab, cfg.seed);
}

// --export-model, then the training and held-out tokens.
void prepare(TrainGptOptions& a) {
  GPTTrainConfig& cfg = a.cfg;
  if (!a.export_path.empty()) {
    GPT meta_model(cfg.model, TensorOptions(DType::Float32, kMeta));
    plan::write_model_file(meta_model, a.export_path);
    fmt::print("model file: {}\n", a.export_path);
  }
  cfg.data = a.synthetic_tokens ? synthetic_data(a) : read_data("--data", a.data_path, cfg.model);
  if (!a.eval_path.empty()) cfg.eval_data = read_data("--eval-data", a.eval_path, cfg.model);
}

}  // namespace

int main(int argc, char** argv) {
  return job_main(argc, argv, {"train_gpt", parse_train_gpt_options, prepare});
}
