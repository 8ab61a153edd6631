// Sharded checkpoint directories: the files and the index, loading at another world size and
// strategy (model and optimizer), the newest checkpoint, --keep, a save killed at each of its
// stages (the previous checkpoint still loads), and damaged files named in the error.
#define BOOST_TEST_MODULE fsdp_checkpoint
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "comm/threads/run_ranks.h"
#include "core/io/checksum.h"
#include "core/io/safetensors.h"
#include "core/ops.h"
#include "core/optim/optim.h"
#include "fsdp/checkpoint.h"
#include "fsdp/checkpoint_full.h"
#include "fsdp/checkpoint_lock.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/optim_state_dict.h"
#include "tests/support/runtime_harness.h"
#include "tests/support/thread_safe_test.h"

using namespace fsdp;
using namespace fsdp::testing;
namespace fs = std::filesystem;

namespace {

using Values = std::map<std::string, std::vector<double>>;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/fsdp_ckpt_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

RunOptions options(ShardingStrategy s, int world, bool orig) {
  RunOptions o;
  o.strategy = s;
  o.use_orig_params = orig;
  o.node_size = world >= 2 ? world / 2 : 1;
  return o;
}

// The model's and optimizer's full state (rank 0) after `steps` AdamW steps on fixed data, then
// `after(model, optimizer, group)` on every rank.
struct Full {
  Values params, optim;
};
Full train(int world, const RunOptions& o, std::uint64_t seed, int steps,
           const std::function<void(FullyShardedDataParallel&, optim::Optimizer&,
                                    comm::ProcessGroup&)>& before,
           const std::function<void(FullyShardedDataParallel&, optim::Optimizer&,
                                    comm::ProcessGroup&)>& after) {
  Full out;
  on_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = wrap_mlp(mlp(seed), pg, o);
    optim::AdamWOptions ao;
    ao.lr = 0.01;
    optim::AdamW opt(model->parameters(), ao);
    if (before) before(*model, opt, *pg);
    const std::int64_t rows = 12 / world;
    for (int step = 0; step < steps; ++step) {
      auto x = full({12, 6}, 0.1 * (step + 1)), y = full({12, 4}, -0.2);
      opt.zero_grad();
      Tensor out = (*model)(x.narrow(0, pg->rank() * rows, rows).contiguous()).tensor();
      mse_loss(out, y.narrow(0, pg->rank() * rows, rows).contiguous()).backward();
      opt.step();
    }
    if (after) after(*model, opt, *pg);
    auto params = full_state_dict(*model, true);
    auto state = full_optim_state_dict(*model, opt, true);
    if (pg->rank() != 0) return;
    for (const auto& [n, t] : params) out.params[n] = t.to_vector();
    for (const auto& [fqn, m] : state)
      for (const auto& [k, t] : m) out.optim[fqn + "/" + k] = t.to_vector();
  });
  return out;
}

void check_equal(const Values& got, const Values& want) {
  TS_REQUIRE_EQUAL(got.size(), want.size());
  for (const auto& [k, w] : want) {
    TS_REQUIRE(got.count(k) == 1u);
    TS_TEST(got.at(k) == w, k);
  }
}

// Saves a checkpoint of mlp(7) after 2 steps at `world` ranks under `dir`, at step `step`.
Full save(const fs::path& dir, int world, std::int64_t step, const CheckpointOptions& co = {}) {
  return train(world, options(ShardingStrategy::FULL_SHARD, world, false), 7, 2, nullptr,
               [&](FullyShardedDataParallel& m, optim::Optimizer& opt, comm::ProcessGroup& pg) {
                 save_sharded_checkpoint(dir.string(), m, &opt, {step, step + 1, {}}, pg, co);
               });
}

// Loads `path` into mlp(99) at `world` ranks with `strategy`; the full state and the progress.
Full load(const std::string& path, int world, ShardingStrategy strategy, bool orig,
          TrainingProgress* progress = nullptr) {
  return train(
      world, options(strategy, world, orig), 99, 0,
      [&](FullyShardedDataParallel& m, optim::Optimizer& opt, comm::ProcessGroup& pg) {
        auto p = load_sharded_checkpoint(path, m, &opt);
        if (pg.rank() == 0 && progress != nullptr) *progress = p;
      },
      nullptr);
}

// An edited index with its checksum made to match again (as a save computes it).
void reseal(nlohmann::ordered_json& index) {
  index.erase("checksum");
  const std::string text = index.dump();
  index["checksum"] = io::xxh3_hex(text.data(), text.size());
}

// The message of what `f` throws ("" when it returns).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const comm::RankFailedError& e) {  // the rank's own message
    try {
      std::rethrow_exception(e.cause());
    } catch (const std::exception& cause) {
      return cause.what();
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Flips the lowest bit of the byte at `offset` from the end of `path`.
void flip_bit(const fs::path& path, std::uintmax_t from_end) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekg(static_cast<std::streamoff>(fs::file_size(path) - from_end));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(fs::file_size(path) - from_end));
  f.put(static_cast<char>(c ^ 1));
}

}  // namespace

BOOST_AUTO_TEST_CASE(files_index_and_reload_at_other_world_sizes) {
  TempDir tmp;
  const Full saved = save(tmp.path, 2, 2);
  const fs::path ckpt = tmp.path / "step-00000002";
  TS_TEST(latest_checkpoint(tmp.path.string()).value() == ckpt.string());
  for (const char* f :
       {"index.json", "model-rank-00000.safetensors", "model-rank-00001.safetensors",
        "optim-rank-00000.safetensors", "optim-rank-00001.safetensors"})
    TS_TEST(fs::exists(ckpt / f), f);
  std::ifstream in(ckpt / "index.json");
  const auto index = nlohmann::json::parse(in);
  TS_TEST(index.at("world_size").get<int>() == 2);
  // "0.weight" [10, 6] and "0.bias" [10] (70 elements) form the root unit's flat parameter of
  // 35 + 35: rank 0 holds 0.weight[0, 35), rank 1 0.weight[35, 60) and all of 0.bias.
  const auto& w = index.at("model").at("0.weight");
  TS_TEST(w.at("shape").dump() == "[10,6]");
  TS_TEST(w.at("dtype").get<std::string>() == "F32");
  // Each piece's checksum is its file's (the header's, verified when read).
  nlohmann::json pieces = w.at("pieces");
  for (auto& piece : pieces) {
    const auto file = io::load_safetensors((ckpt / piece.at("file").get<std::string>()).string());
    TS_TEST(piece.at("xxh3").get<std::string>() == file.metadata.at("xxh3:0.weight"));
    piece.erase("xxh3");
  }
  TS_TEST(pieces.dump() == R"([{"file":"model-rank-00000.safetensors","numel":35,"offset":0},)"
                           R"({"file":"model-rank-00001.safetensors","numel":25,"offset":35}])");
  TS_TEST(index.at("optim").at("tensors").contains("state.2.0.weight.exp_avg"));
  TS_TEST(index.at("progress").at("step").get<int>() == 2);
  TS_TEST(index.at("progress").at("rng").size() == 2u);
  for (int world : {1, 2, 3, 4})
    for (auto s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::NO_SHARD,
                   ShardingStrategy::SHARD_GRAD_OP, ShardingStrategy::HYBRID_SHARD})
      for (bool orig : {false, true}) {
        BOOST_TEST_CONTEXT("world " << world << " " << policies::to_string(s) << " orig " << orig) {
          TrainingProgress p;
          Full got = load(ckpt.string(), world, s, orig, &p);
          check_equal(got.params, saved.params);
          check_equal(got.optim, saved.optim);
          TS_TEST(p.step == 2);
          TS_TEST(p.data_position == 3);
          TS_TEST(p.rng.size() == 2u);
        }
      }
}

BOOST_AUTO_TEST_CASE(latest_keep_and_leftovers) {
  TempDir tmp;
  TS_TEST(!latest_checkpoint((tmp.path / "none").string()).has_value());
  fs::create_directories(tmp.path / ".tmp-step-00000009");  // an interrupted save
  fs::create_directories(tmp.path / "step-00000008");       // no index: incomplete
  CheckpointOptions keep2;
  keep2.keep = 2;
  for (int step : {1, 2, 3}) save(tmp.path, 2, step, keep2);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.path)) names.insert(e.path().filename());
  // step-00000008 is not a save's (no index): kept.
  TS_TEST((names == std::set<std::string>{"step-00000002", "step-00000003", "step-00000008"}));
  TS_TEST(latest_checkpoint(tmp.path.string()).value() == (tmp.path / "step-00000003").string());
}

BOOST_AUTO_TEST_CASE(a_save_killed_at_any_stage_leaves_the_previous_checkpoint) {
  for (const char* where : {"tmp", "rank files", "index", "rename", "pruned"}) {
    BOOST_TEST_CONTEXT("killed after " << where) {
      TempDir tmp;
      const Full first = save(tmp.path, 2, 1);
      std::fflush(nullptr);
      const pid_t pid = ::fork();
      if (pid == 0) {
        CheckpointOptions co;
        co.keep = 1;
        co.on_stage = [&](const std::string& s) {
          if (s == where) ::_exit(9);
        };
        save(tmp.path, 2, 2, co);
        ::_exit(0);
      }
      int status = 0;
      ::waitpid(pid, &status, 0);
      TS_TEST(WIFEXITED(status));
      TS_TEST(WEXITSTATUS(status) == 9);
      const auto latest = latest_checkpoint(tmp.path.string());
      TS_REQUIRE(latest.has_value());
      const bool renamed = std::string(where) == "rename" || std::string(where) == "pruned";
      TS_TEST(*latest == (tmp.path / (renamed ? "step-00000002" : "step-00000001")).string());
      Full got = load(*latest, 2, ShardingStrategy::FULL_SHARD, false);
      // The second save is of the same state (mlp(7) after 2 steps): both load to it.
      check_equal(got.params, first.params);
      if (!renamed) TS_TEST(fs::exists(tmp.path / "step-00000001" / "index.json"));
    }
  }
}

BOOST_AUTO_TEST_CASE(damaged_files_are_named) {
  TempDir tmp;
  save(tmp.path, 2, 1);
  const fs::path ckpt = tmp.path / "step-00000001";
  const fs::path f = ckpt / "model-rank-00001.safetensors";
  fs::resize_file(f, fs::file_size(f) - 8);
  try {
    load(ckpt.string(), 2, ShardingStrategy::FULL_SHARD, false);
    TS_FAIL("a truncated file loaded");
  } catch (const std::exception& e) {
    TS_TEST(std::string(e.what()).find(f.string()) != std::string::npos, e.what());
  }
  // An index whose piece lies outside its tensor: the error names the file and the tensor.
  save(tmp.path, 2, 2);
  const fs::path ckpt2 = tmp.path / "step-00000002";
  nlohmann::ordered_json index;
  std::ifstream(ckpt2 / "index.json") >> index;
  index["model"]["3.weight"]["pieces"][0]["offset"] = 39;
  reseal(index);  // consistent, but wrong
  std::ofstream(ckpt2 / "index.json") << index.dump();
  try {
    load(ckpt2.string(), 1, ShardingStrategy::FULL_SHARD, false);  // reads every file
    TS_FAIL("an index with a piece outside its tensor loaded");
  } catch (const std::exception& e) {
    const std::string m = e.what();
    TS_TEST(m.find((ckpt2 / "model-rank-00000.safetensors").string() +
                   ": sharded state dict: piece of '3.weight' [39, ") != std::string::npos,
            m);
  }
  std::ofstream(ckpt / "index.json") << "{\"format\": \"other\"}";
  try {
    load(ckpt.string(), 1, ShardingStrategy::FULL_SHARD, false);
    TS_FAIL("a foreign index loaded");
  } catch (const std::exception& e) {
    TS_TEST(std::string(e.what()).find("is not a sharded checkpoint index") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(full_checkpoint_in_hugging_faces_sharded_layout) {
  TempDir tmp;
  // mlp's tensors: 0.weight 240 B, 0.bias 40, 2.0.weight 400, 2.0.bias 40, 3.weight 160, 3.bias 16.
  NamedTensors state;
  for (const auto& [name, t] : mlp(7)->named_parameters()) state.emplace_back(name, t);
  TS_TEST(save_full_checkpoint(tmp.path.string(), state, 300) == 3);
  for (const char* f : {"model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors",
                        "model.safetensors.index.json"})
    TS_TEST(fs::exists(tmp.path / f), f);
  std::ifstream in(tmp.path / "model.safetensors.index.json");
  const auto index = nlohmann::json::parse(in);
  TS_TEST(index.at("metadata").at("total_size").get<int>() == 896);
  TS_TEST(index.at("metadata").at("total_parameters").get<int>() == 224);
  // Files fill in order up to 300 bytes; the 400-byte tensor gets a file of its own, before the
  // file being filled (huggingface_hub's split).
  TS_TEST(index.at("weight_map").at("0.bias").get<std::string>() ==
          "model-00002-of-00003.safetensors");
  TS_TEST(index.at("weight_map").at("2.0.weight").get<std::string>() ==
          "model-00001-of-00003.safetensors");
  TS_TEST(index.at("weight_map").at("3.bias").get<std::string>() ==
          "model-00003-of-00003.safetensors");
  auto check_loaded = [&] {
    std::map<std::string, std::vector<double>> got;
    for (const auto& [n, t] : load_full_checkpoint(tmp.path.string())) got[n] = t.to_vector();
    TS_REQUIRE_EQUAL(got.size(), state.size());
    for (const auto& [n, t] : state) TS_TEST(got.at(n) == t.to_vector(), n);
  };
  check_loaded();
  // Under the limit: one model.safetensors, and the index of the sharded save is gone.
  TS_TEST(save_full_checkpoint(tmp.path.string(), state) == 1);
  TS_TEST(fs::exists(tmp.path / "model.safetensors"));
  TS_TEST(!fs::exists(tmp.path / "model.safetensors.index.json"));
  check_loaded();
  // An index naming a file without the tensor is an error naming both.
  save_full_checkpoint(tmp.path.string(), state, 300);
  nlohmann::json bad = index;
  bad["weight_map"]["3.bias"] = "model-00002-of-00003.safetensors";
  std::ofstream(tmp.path / "model.safetensors.index.json") << bad.dump();
  try {
    load_full_checkpoint(tmp.path.string());
    TS_FAIL("loaded");
  } catch (const std::exception& e) {
    TS_TEST(std::string(e.what()).find("maps '3.bias' to " +
                                       (tmp.path / "model-00002-of-00003.safetensors").string() +
                                       ", which has no such tensor") != std::string::npos,
            e.what());
  }
}

// save_full_state_dict streams each unit's parameters to the file as the unit is gathered: the
// file is byte for byte what gathering the whole state dict and saving it gives, at every world
// size and strategy, in mixed precision too (full precision is saved).
BOOST_AUTO_TEST_CASE(streamed_full_save_equals_gather_then_save) {
  TempDir tmp;
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  int cases = 0;
  for (int world : {1, 2, 3})
    for (auto strategy : {ShardingStrategy::FULL_SHARD, ShardingStrategy::NO_SHARD})
      for (bool bf16 : {false, true}) {
        RunOptions o;
        o.strategy = strategy;
        if (bf16) {
          MixedPrecision mp;
          mp.param_dtype = DType::BFloat16;
          o.mixed_precision = mp;
        }
        const fs::path streamed = tmp.path / fmt::format("streamed{}.safetensors", cases);
        const fs::path gathered = tmp.path / fmt::format("gathered{}.safetensors", cases);
        ++cases;
        on_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
          auto model = wrap_mlp(mlp(7), pg, o);
          save_full_state_dict(*model, streamed.string(), meta);
          NamedTensors state = full_state_dict(*model, /*rank0_only=*/true);
          if (pg->rank() == 0)
            io::save_safetensors(gathered.string(), state, meta, io::Checksums::xxh3);
        });
        TS_TEST(fs::exists(streamed));
        TS_TEST(!fs::exists(streamed.string() + ".tmp"));
        TS_TEST(bytes(streamed) == bytes(gathered), streamed.string());
      }
  // HYBRID_SHARD, 4 ranks in 2 shard groups: both groups' rank 0 hold the values, one writes.
  {
    RunOptions o;
    o.strategy = ShardingStrategy::HYBRID_SHARD;
    o.node_size = 2;
    const fs::path streamed = tmp.path / "hybrid_streamed.safetensors";
    const fs::path gathered = tmp.path / "hybrid_gathered.safetensors";
    on_ranks(4, [&](std::shared_ptr<comm::ProcessGroup> pg) {
      auto model = wrap_mlp(mlp(7), pg, o);
      save_full_state_dict(*model, streamed.string(), meta);
      NamedTensors state = full_state_dict(*model, /*rank0_only=*/true);
      if (pg->rank() == 0)
        io::save_safetensors(gathered.string(), state, meta, io::Checksums::xxh3);
    });
    TS_TEST(bytes(streamed) == bytes(gathered));
  }
  // A file that cannot be created: rank 0 raises, after every unit was gathered (the others
  // return normally instead of waiting in an all-gather rank 0 never joins).
  std::mutex mu;
  std::vector<std::string> errors(2);
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = wrap_mlp(mlp(7), pg, RunOptions{});
    try {
      save_full_state_dict(*model, (tmp.path / "missing" / "x.safetensors").string());
    } catch (const std::exception& e) {
      std::lock_guard lock(mu);
      errors[std::size_t(pg->rank())] = e.what();
    }
  });
  TS_TEST(errors[0].find("save_safetensors: cannot create " +
                         (tmp.path / "missing" / "x.safetensors.tmp").string()) == 0,
          errors[0]);
  TS_TEST(errors[1].empty(), errors[1]);
}

// Issue 22: checkpoints that verify. A bit flipped in a piece is an error naming the file and
// the tensor; a piece from another file is refused against the index.
BOOST_AUTO_TEST_CASE(a_damaged_piece_is_named_with_its_file) {
  TempDir tmp;
  save(tmp.path, 2, 1);
  const fs::path ckpt = tmp.path / "step-00000001";
  const fs::path f = ckpt / "model-rank-00001.safetensors";
  const io::SafetensorsFile before = io::load_safetensors(f.string());
  const std::string last = before.tensors.back().first;  // its bytes end the file
  const std::string recorded = before.metadata.at("xxh3:" + last);
  flip_bit(f, 1);
  const std::string m =
      error_of([&] { load(ckpt.string(), 2, ShardingStrategy::FULL_SHARD, false); });
  const std::string head =
      "load_safetensors: " + f.string() + ": tensor '" + last + "' is damaged: its bytes hash to ";
  const std::string tail = ", the header records " + recorded + " (xxh3)";
  TS_TEST(m.rfind(head, 0) == 0, m);
  TS_TEST(m.size() == head.size() + 16 + tail.size(), m);
  TS_TEST(m.ends_with(tail), m);
  flip_bit(f, 1);  // restored
  TS_TEST(error_of([&] { load(ckpt.string(), 2, ShardingStrategy::FULL_SHARD, false); }) == "");
  // Rank 0's file in rank 1's place: each tensor's checksum differs from the index's.
  fs::copy_file(ckpt / "model-rank-00000.safetensors", f, fs::copy_options::overwrite_existing);
  const std::string swapped =
      error_of([&] { load(ckpt.string(), 2, ShardingStrategy::FULL_SHARD, false); });
  TS_TEST(swapped.find("checkpoint: " + f.string() + ": tensor '") == 0, swapped);
  TS_TEST(swapped.find("' is not the piece index.json records (checksum ") != std::string::npos,
          swapped);
}

// A damaged, unverifiable or foreign index: an error naming it when loaded; not a checkpoint when
// the newest is looked for (the one before it is), and listed as ignored with the reason.
BOOST_AUTO_TEST_CASE(an_index_that_does_not_verify_is_not_a_checkpoint) {
  TempDir tmp;
  save(tmp.path, 2, 1);
  save(tmp.path, 2, 2);
  const fs::path ckpt = tmp.path / "step-00000002", index = ckpt / "index.json";
  std::string text;
  {
    std::ifstream in(index);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string step1 = (tmp.path / "step-00000001").string();
  auto with_index = [&](const std::string& contents, const std::string& why) {
    BOOST_TEST_CONTEXT(why) {
      std::ofstream(index, std::ios::trunc) << contents;
      TS_TEST(error_of([&] { load(ckpt.string(), 1, ShardingStrategy::FULL_SHARD, false); }) ==
              "checkpoint: " + ckpt.string() + ": " + why);
      TS_TEST(latest_checkpoint(tmp.path.string()).value() == step1);
      const CheckpointDirScan scan = scan_checkpoint_dir(tmp.path.string());
      TS_TEST(scan.checkpoints == std::vector<std::string>{step1});
      TS_REQUIRE_EQUAL(scan.ignored.size(), 1u);
      TS_TEST(scan.ignored[0].first == ckpt.string());
      TS_TEST(scan.ignored[0].second == why);
    }
  };
  // One digit changed: still JSON, no longer what was written.
  std::string edited = text;
  const auto at = edited.find("\"numel\": 35");
  TS_REQUIRE(at != std::string::npos);
  edited.replace(at, std::string("\"numel\": 35").size(), "\"numel\": 36");
  with_index(edited, "index.json is damaged: its checksum does not match its contents");
  with_index(text.substr(0, text.size() / 2), "index.json is damaged: not valid JSON");
  auto old = nlohmann::ordered_json::parse(text);
  old["format"] = "fsdp-cpp/sharded-checkpoint/1";
  old.erase("checksum");
  with_index(old.dump(),
             "index.json has format 'fsdp-cpp/sharded-checkpoint/1', written before checkpoints "
             "recorded checksums and the job's identity: it cannot be verified, so it is not "
             "loaded (train afresh)");
  fs::remove(index);
  with_index("", "index.json is damaged: not valid JSON");
  fs::remove(index);
  TS_TEST(error_of([&] { load(ckpt.string(), 1, ShardingStrategy::FULL_SHARD, false); }) ==
          "checkpoint: " + ckpt.string() + ": no index.json (an incomplete save?)");
}

// Only directories a save wrote count, and --keep prunes nothing else: a user's copy named
// step-backup, a step directory without an index, a copy under another step's name, a file.
BOOST_AUTO_TEST_CASE(only_what_a_save_wrote_counts_and_is_pruned) {
  TempDir tmp;
  const fs::path d = tmp.path;
  save(d, 2, 1);
  fs::copy(d / "step-00000001", d / "step-backup");
  fs::copy(d / "step-00000001", d / "step-00000007");
  fs::create_directories(d / "step-00000009");
  std::ofstream(d / "notes.txt") << "mine\n";
  std::ofstream(d / kCheckpointLockFile) << "host 1\n";  // not listed
  const std::vector<std::pair<std::string, std::string>> ignored = {
      {(d / "notes.txt").string(), "not a checkpoint's name (step-NNNNNNNN, a directory)"},
      {(d / "step-00000007").string(), "its index.json is of step 1 (a copy?)"},
      {(d / "step-00000009").string(), "no index.json (an incomplete save?)"},
      {(d / "step-backup").string(), "not a checkpoint's name (step-NNNNNNNN, a directory)"}};
  CheckpointDirScan scan = scan_checkpoint_dir(d.string());
  TS_TEST(scan.checkpoints == std::vector<std::string>{(d / "step-00000001").string()});
  TS_TEST(scan.ignored == ignored);
  CheckpointOptions keep1;
  keep1.keep = 1;
  save(d, 2, 2, keep1);
  save(d, 2, 3, keep1);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(d)) names.insert(e.path().filename());
  TS_TEST((names == std::set<std::string>{".lock", "notes.txt", "step-00000003", "step-00000007",
                                          "step-00000009", "step-backup"}));
  scan = scan_checkpoint_dir(d.string());
  TS_TEST(scan.checkpoints == std::vector<std::string>{(d / "step-00000003").string()});
  TS_TEST(scan.ignored == ignored);
  TS_TEST(error_of([&] { scan_checkpoint_dir((d / "notes.txt").string()); }) ==
          "checkpoint: '" + (d / "notes.txt").string() + "' is not a directory");
  // A save of step 9 does not replace the step-00000009 it did not write.
  TS_TEST(error_of([&] { save(d, 2, 9); }) ==
          "checkpoint: " + (d / "step-00000009").string() +
              " is in the way and was not written by a save (no index.json (an incomplete "
              "save?)): move it away");
  TS_TEST(fs::exists(d / "step-00000009"));
  TS_TEST(fs::is_empty(d / "step-00000009"));
}

// The job's identity goes into the index as given and comes back in order; the first field that
// differs is named with both values, unless it may change.
BOOST_AUTO_TEST_CASE(job_identity_is_recorded_and_compared) {
  TempDir tmp;
  CheckpointOptions co;
  co.job = {{"heads", "2"}, {"lr", "0.001"}, {"world_size", "2"}};
  save(tmp.path, 2, 1, co);
  const JobIdentity saved = read_checkpoint_job((tmp.path / "step-00000001").string());
  TS_TEST(saved == co.job);
  TS_TEST(!first_job_change(saved, saved).has_value());
  const JobIdentity now = {{"heads", "4"}, {"lr", "0.5"}, {"world_size", "1"}};
  auto c = first_job_change(saved, now);
  TS_REQUIRE(c.has_value());
  TS_TEST(c->field == "heads");
  TS_TEST(c->saved == "2");
  TS_TEST(c->current == "4");
  c = first_job_change(saved, now, {"heads"});
  TS_TEST((c && c->field == "lr" && c->saved == "0.001" && c->current == "0.5"));
  TS_TEST(!first_job_change(saved, now, {"heads", "lr", "world_size"}).has_value());
  // A field on one side only reads "(none)" on the other.
  c = first_job_change(saved, {{"heads", "2"}, {"lr", "0.001"}, {"world_size", "2"}, {"x", "1"}});
  TS_TEST((c && c->field == "x" && c->saved == "(none)" && c->current == "1"));
  c = first_job_change(saved, {{"heads", "2"}, {"lr", "0.001"}});
  TS_TEST((c && c->field == "world_size" && c->saved == "2" && c->current == "(none)"));
}

// One job per checkpoint directory: a second lock names the first's host and pid; the lock file
// goes with its job; a stale lock (a pid gone on this host) is taken over and said; one of
// another host is not.
BOOST_AUTO_TEST_CASE(a_second_job_on_a_directory_fails_naming_the_first) {
  TempDir tmp;
  const std::string dir = (tmp.path / "ckpt").string(), lock_file = dir + "/.lock";
  const std::string host = lock_host_name();
  {
    CheckpointDirLock first(dir);
    TS_TEST(fs::exists(lock_file));
    TS_TEST(error_of([&] { CheckpointDirLock second(dir); }) ==
            fmt::format("checkpoint directory '{}' is in use by another job (host {}, pid {}; "
                        "lock file {})",
                        dir, host, ::getpid(), lock_file));
  }
  TS_TEST(!fs::exists(lock_file));
  // A pid that has ended: a child, waited for.
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  std::ofstream(lock_file) << host << " " << child << "\n";
  {
    std::string takeover;
    CheckpointDirLock lock(dir, &takeover);
    TS_TEST(takeover == fmt::format("took over the lock {} of pid {} on this host, which is no "
                                    "longer running",
                                    lock_file, child));
    std::ifstream in(lock_file);
    std::string line;
    std::getline(in, line);
    TS_TEST(line == fmt::format("{} {}", host, ::getpid()));
  }
  std::ofstream(lock_file) << "elsewhere " << child << "\n";
  TS_TEST(error_of([&] { CheckpointDirLock lock(dir); }) ==
          fmt::format("checkpoint directory '{}' is in use by another job (host elsewhere, pid {}; "
                      "lock file {}): if that job has ended, remove the lock file",
                      dir, child, lock_file));
  std::ofstream(lock_file, std::ios::trunc) << "garbage\n";
  TS_TEST(error_of([&] { CheckpointDirLock lock(dir); }) ==
          fmt::format("checkpoint directory '{}' is locked by {}, which does not name a host and a "
                      "pid: if no job writes there, remove it",
                      dir, lock_file));
  const std::string file = (tmp.path / "a-file").string();
  std::ofstream(file) << "x";
  TS_TEST(error_of([&] { CheckpointDirLock lock(file); }) ==
          fmt::format("checkpoint directory '{}' exists and is not a directory", file));
}
