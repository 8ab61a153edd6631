// train_gpt: a byte-level GPT trained with FSDP, in one process (ranks as threads) or one
// process per rank under mpirun (--backend mpi|gloo|nccl). Prints one line per logged step:
// "step <i> loss <x>" (the mean over the global batch), then tokens/s and per-rank peak memory.
// The data order is exact (examples/gpt_data.h), so N ranks x batch B print the losses of one
// rank with batch N*B.
#include <fmt/format.h>

#include "core/error.h"
#include "examples/job_files.h"
#include "examples/job_main.h"
#include "tools/plan/model_export.h"
#include "tools/plan/model_file.h"

using namespace fsdp;

namespace {

// The bytes of `path`, which must hold one sequence of `seq` bytes and its next byte.
std::shared_ptr<const std::string> read_file(const char* option, const std::string& path,
                                             std::int64_t seq) {
  auto bytes = std::make_shared<const std::string>(examples::read_data_file(option, path));
  FSDP_CHECK(std::int64_t(bytes->size()) > seq + 1, ValueError,
             "{}: '{}' has {} bytes; --seq {} needs more than {}", option, path, bytes->size(), seq,
             seq + 1);
  return bytes;
}

// --export-model, then the text files.
void prepare(examples::TrainGptOptions& a) {
  examples::GPTTrainConfig& cfg = a.cfg;
  if (!a.export_path.empty()) {
    examples::GPT meta_model(cfg.model, TensorOptions(DType::Float32, kMeta));
    plan::write_model_file(meta_model, a.export_path);
    fmt::print("model file: {}\n", a.export_path);
  }
  cfg.data = read_file("--data", a.data_path, cfg.model.seq);
  if (!a.eval_path.empty()) cfg.eval_data = read_file("--eval-data", a.eval_path, cfg.model.seq);
}

}  // namespace

int main(int argc, char** argv) {
  return examples::job_main(argc, argv, {"train_gpt", examples::parse_train_gpt_options, prepare});
}
