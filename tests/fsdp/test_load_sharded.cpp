// load_sharded_from (fsdp/load_sharded.h): a model built on the meta device, wrapped with
// allocate_only, filled from a Hugging Face directory on 1, 2 and 4 thread ranks under every
// sharding strategy: the full state dict equals the file's, each local shard equals the one FSDP
// builds from the same values (padding included), each rank reads only its own elements, the
// peak while wrapping and loading is about one unit unsharded plus the shards; missing tensors,
// shape mismatches and unexpected tensors are named.
#define BOOST_TEST_MODULE fsdp_load_sharded
#include <boost/test/unit_test.hpp>
#include <map>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "core/io/safetensors_dir.h"
#include "core/memory_stats.h"
#include "core/nn/nn.h"
#include "core/ops.h"
#include "core/optim/optim.h"
#include "core/random.h"
#include "fsdp/flat_param.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/load_sharded.h"
#include "tests/support/error_message.h"
#include "tests/support/runtime_harness.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_device.h"
#include "tests/support/thread_safe_test.h"

using namespace fsdp;
using namespace fsdp::testing;

namespace {

// Sequential(Linear(6,10), BatchNorm1d(10), Sequential(Linear(10,10), ReLU), Linear(10,4),
// Linear(4,3)): units "2" and "3" and the root; buffers (one int64) in the root's unit.
nn::ModulePtr build(Device device, std::uint64_t seed = 5) {
  manual_seed(seed);
  TensorOptions t(DType::Float32, device);
  auto inner = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(10, 10, true, t), std::make_shared<nn::ReLU>()});
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(6, 10, true, t),
      std::make_shared<nn::BatchNorm1d>(10, 1e-5, 0.1, true, true, t), inner,
      std::make_shared<nn::Linear>(10, 4, true, t), std::make_shared<nn::Linear>(4, 3, true, t)});
}

// The eager model's state dict, its running statistics made distinct from their defaults.
NamedTensors eager_state(std::uint64_t seed = 5) {
  auto m = build(kCPU, seed);
  NamedTensors state;
  for (auto [name, t] : m->state_dict()) {
    if (name == "1.running_mean") t = from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {10});
    if (name == "1.running_var") t = full({10}, 0.5);
    if (name == "1.num_batches_tracked") t = from_vector(std::vector<std::int64_t>{17}, {});
    state.emplace_back(name, t);
  }
  return state;
}

struct Config {
  ShardingStrategy strategy;
  int world;
  bool orig;
  int node_size = 0;  // HYBRID: ranks per shard group
  std::string str() const {
    std::ostringstream os;
    os << policies::to_string(strategy) << " world " << world << " use_orig_params " << orig;
    return os.str();
  }
};

std::shared_ptr<FullyShardedDataParallel> wrap(const nn::ModulePtr& model,
                                               const std::shared_ptr<comm::ProcessGroup>& pg,
                                               const Config& c, bool allocate = true) {
  WrapperOptions w;
  if (policies::is_hybrid(c.strategy))
    w.hybrid_process_groups =
        std::make_shared<const comm::HybridGroups>(comm::split_hybrid(*pg, c.node_size));
  else
    w.process_group = pg;
  w.sharding_strategy = c.strategy;
  w.use_orig_params = c.orig;
  // FSDP_TEST_DEVICE=fake_cuda or cuda: shards on the rank's device, filled through a host copy.
  if (test_device_type() != DeviceType::CPU) w.device_id = test_device(pg->rank());
  if (allocate) w.param_init_fn = allocate_only();
  for (const char* name : {"2", "3"})
    model->replace_child(name, FullyShardedDataParallel::make(model->child(name), w));
  return FullyShardedDataParallel::make(model, w);
}

// Each unit's local shard, in fsdp_units() order.
std::vector<std::vector<double>> local_shards(FullyShardedDataParallel& root) {
  std::vector<std::vector<double>> out;
  for (auto* unit : root.fsdp_units())
    if (auto* h = unit->handle()) out.push_back(h->local_shard().to_vector());
  return out;
}

std::vector<Config> every_strategy() {
  std::vector<Config> out;
  for (bool orig : {false, true}) {
    for (int world : {1, 2, 4})
      for (auto s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                     ShardingStrategy::NO_SHARD})
        out.push_back({s, world, orig});
    for (auto s : {ShardingStrategy::HYBRID_SHARD, ShardingStrategy::_HYBRID_SHARD_ZERO2}) {
      out.push_back({s, 2, orig, 2});
      out.push_back({s, 4, orig, 2});
    }
  }
  return out;
}

std::map<std::string, std::vector<double>> values_of(const NamedTensors& state) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [name, t] : state) out[name] = t.to_vector();
  return out;
}

// Sequential of four Linear(64, 64): four units of 4160 parameters when each is wrapped.
nn::ModulePtr linears(Device device) {
  TensorOptions t(DType::Float32, device);
  std::vector<nn::ModulePtr> layers;
  for (int i = 0; i < 4; ++i) layers.push_back(std::make_shared<nn::Linear>(64, 64, true, t));
  return std::make_shared<nn::Sequential>(layers);
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_strategy_loads_the_files_values) {
  TempDir tmp;
  const NamedTensors state = eager_state();
  io::save_safetensors_dir(tmp.dir.string(), state, 300);  // several files
  BOOST_REQUIRE(io::SafetensorsDir::open(tmp.dir.string()).files().size() > 1u);
  const auto want = values_of(state);
  for (const Config& c : every_strategy()) {
    on_ranks(c.world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
      auto loaded = wrap(build(kMeta), pg, c);
      const auto src = io::SafetensorsDir::open(tmp.dir.string());
      const auto unexpected = load_sharded_from(*loaded, src);
      TS_TEST(unexpected.empty(), c.str());
      for (auto* unit : loaded->fsdp_units())
        TS_TEST(unit->handle()->device() == test_device(pg->rank()), c.str());
      // The shards FSDP builds from the same values (the eager model with the file's values).
      auto eager_model = build(kCPU);
      eager_model->load_state_dict(state);
      auto eager = wrap(eager_model, pg, c, false);
      const auto got_shards = local_shards(*loaded), want_shards = local_shards(*eager);
      const auto full = values_of(full_state_dict(*loaded, false));
      TS_TEST((got_shards == want_shards), c.str() << " rank " << pg->rank());
      TS_TEST((full == want), c.str() << " rank " << pg->rank());
    });
  }
}

// The file's dtype is converted to the shard's (bfloat16 and float64 files into float32).
BOOST_AUTO_TEST_CASE(file_dtype_converted_to_the_shards) {
  for (DType file_dtype : {DType::BFloat16, DType::Float64}) {
    TempDir tmp;
    NamedTensors state;
    for (const auto& [name, t] : eager_state())
      state.emplace_back(name, t.is_floating_point() ? t.to(file_dtype) : t);
    io::save_safetensors_dir(tmp.dir.string(), state);
    std::map<std::string, std::vector<double>> want;
    for (const auto& [name, t] : state)
      want[name] = (t.is_floating_point() ? t.to(DType::Float32) : t).to_vector();
    const Config c{ShardingStrategy::FULL_SHARD, 2, true};
    on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
      auto loaded = wrap(build(kMeta), pg, c);
      load_sharded_from(*loaded, io::SafetensorsDir::open(tmp.dir.string()));
      const auto full = full_state_dict(*loaded, false);
      for (const auto& [name, t] : full) {
        TS_TEST(t.dtype() == (name == "1.num_batches_tracked" ? DType::Int64 : DType::Float32));
        TS_TEST(t.to_vector() == want.at(name), name << " from " << dtype_name(file_dtype));
      }
    });
  }
}

// Each rank reads the bytes of the elements its shards hold and no others: over the ranks, the
// parameters' bytes once (FULL_SHARD), plus the buffers on every rank.
BOOST_AUTO_TEST_CASE(each_rank_reads_only_its_own_bytes) {
  TempDir tmp;
  const NamedTensors state = eager_state();
  io::save_safetensors_dir(tmp.dir.string(), state, 300);
  std::uint64_t param_bytes = 0, buffer_bytes = 0;
  for (const auto& [name, t] : state)
    (name.find("running") != std::string::npos || name.find("num_batches") != std::string::npos
         ? buffer_bytes
         : param_bytes) += t.nbytes();
  BOOST_TEST(param_bytes == 4u * (60 + 10 + 10 + 10 + 110 + 44 + 15));
  for (bool orig : {false, true}) {
    for (int world : {1, 2, 4}) {
      std::vector<std::uint64_t> read(std::size_t(world), 0);
      std::vector<std::int64_t> shard_bytes(std::size_t(world), 0);
      on_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
        auto loaded = wrap(build(kMeta), pg, {ShardingStrategy::FULL_SHARD, world, orig});
        const auto src = io::SafetensorsDir::open(tmp.dir.string());
        load_sharded_from(*loaded, src);
        read[std::size_t(pg->rank())] = src.bytes_read();
        for (auto* unit : loaded->fsdp_units())
          shard_bytes[std::size_t(pg->rank())] += unit->handle()->local_shard().nbytes();
      });
      std::uint64_t total = 0;
      for (int r = 0; r < world; ++r) {
        total += read[std::size_t(r)];
        // At most its shards (padding is never read) and the buffers.
        BOOST_TEST(
            read[std::size_t(r)] <= std::uint64_t(shard_bytes[std::size_t(r)]) + buffer_bytes,
            "world " << world << " rank " << r);
      }
      BOOST_TEST(total == param_bytes + std::uint64_t(world) * buffer_bytes,
                 "world " << world << " use_orig_params " << orig);
    }
  }
}

// Four units of 4160 parameters on 2 ranks, built on meta: wrapping with allocate_only gives one
// unit at a time its flat buffer as its parameters' storage and keeps the shards; loading adds
// nothing that stays.
BOOST_AUTO_TEST_CASE(peak_is_one_unit_unsharded_plus_shards) {
  TempDir tmp;
  auto make = linears;
  manual_seed(3);
  NamedTensors state = make(kCPU)->state_dict();
  io::save_safetensors_dir(tmp.dir.string(), state);
  const std::int64_t unit = 4160 * 4, shards = 4 * unit / 2;
  const auto want = values_of(state);
  std::vector<std::int64_t> peaks(2), kept(2);
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto stats = std::make_shared<MemoryStats>();
    auto model = make(kMeta);
    WrapperOptions w;
    w.process_group = pg;
    w.param_init_fn = allocate_only();
    std::shared_ptr<FullyShardedDataParallel> root;
    {
      MemoryStatsScope scope(stats);
      for (const char* name : {"0", "1", "2", "3"})
        model->replace_child(name, FullyShardedDataParallel::make(model->child(name), w));
      root = FullyShardedDataParallel::make(model, w);
      load_sharded_from(*root, io::SafetensorsDir::open(tmp.dir.string()));
    }
    peaks[std::size_t(pg->rank())] = stats->peak_bytes.load();
    kept[std::size_t(pg->rank())] = stats->current_bytes.load();
    const auto full = values_of(full_state_dict(*root, false));
    TS_TEST((full == want));
  });
  for (int r = 0; r < 2; ++r) {
    BOOST_TEST_MESSAGE("rank " << r << ": peak " << peaks[std::size_t(r)] << " bytes, kept "
                               << kept[std::size_t(r)] << " (a unit is " << unit
                               << " bytes, the shards " << shards << ")");
    BOOST_TEST(kept[std::size_t(r)] == shards);
    // The last unit's flat buffer (its parameters' storage) beside the shards: one unit
    // unsharded, never a second copy of it.
    BOOST_TEST(peaks[std::size_t(r)] <= unit + shards);
  }
}

// An ignored module's parameters are not FSDP's: built on meta, they get storage and are loaded
// whole on every rank.
BOOST_AUTO_TEST_CASE(ignored_module_loaded_whole) {
  TempDir tmp;
  const NamedTensors state = eager_state();
  io::save_safetensors_dir(tmp.dir.string(), state);
  const auto want = values_of(state);
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = build(kMeta);
    const nn::ModulePtr ignored = model->child("4");
    WrapperOptions w;
    w.process_group = pg;
    w.param_init_fn = allocate_only();
    w.ignored_modules = std::vector<nn::ModulePtr>{ignored};
    auto root = FullyShardedDataParallel::make(model, w);
    TS_TEST(ignored->param("weight").is_meta());
    const auto unexpected = load_sharded_from(*root, io::SafetensorsDir::open(tmp.dir.string()));
    TS_TEST(unexpected.empty());
    TS_TEST(!ignored->param("weight").is_meta());
    TS_TEST(ignored->param("weight").to_vector() == want.at("4.weight"));
    TS_TEST(ignored->param("bias").to_vector() == want.at("4.bias"));
    const auto full = values_of(full_state_dict(*root, false));
    TS_TEST(full.at("0.weight") == want.at("0.weight"));
  });
}

// A parameter tied to another in the same unit is loaded under either of its names (transformers
// keeps the embedding's and drops the head's).
BOOST_AUTO_TEST_CASE(tied_parameter_under_either_name) {
  auto make = [](Device device) {
    TensorOptions t(DType::Float32, device);
    auto emb = std::make_shared<nn::Embedding>(8, 4, nn::EmbeddingOptions{.tensor = t});
    auto head = std::make_shared<nn::Linear>(4, 8, false, t);
    head->set_parameter("weight", emb->param("weight"));
    return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{emb, head});
  };
  std::vector<double> values;
  for (int i = 0; i < 32; ++i) values.push_back(0.25 * i - 3);
  const Tensor weight = from_vector(values, {8, 4});
  for (const char* kept : {"0.weight", "1.weight"}) {
    TempDir tmp;
    io::save_safetensors_dir(tmp.dir.string(), {{kept, weight}});
    on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
      WrapperOptions w;
      w.process_group = pg;
      w.param_init_fn = allocate_only();
      auto root = FullyShardedDataParallel::make(make(kMeta), w);
      const auto unexpected = load_sharded_from(*root, io::SafetensorsDir::open(tmp.dir.string()));
      TS_TEST(unexpected.empty(), kept);
      const auto full = full_state_dict(*root, false);
      TS_TEST(full.size() == 1u);
      TS_TEST(full.at(0).second.to_vector() == weight.to_vector(), kept);
    });
  }
}

BOOST_AUTO_TEST_CASE(errors_and_unexpected_tensors) {
  const NamedTensors state = eager_state();
  const Config c{ShardingStrategy::FULL_SHARD, 2, false};
  // Runs the load on 2 ranks; each rank's error message ("" when none) and unexpected list.
  TempDir tmp;
  auto load = [&](const NamedTensors& file, const LoadShardedOptions& o = {}) {
    io::save_safetensors_dir(tmp.dir.string(), file, 300);
    std::vector<std::string> errors(2);
    std::vector<std::vector<std::string>> unexpected(2);
    on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
      auto loaded = wrap(build(kMeta), pg, c);
      const auto src = io::SafetensorsDir::open(tmp.dir.string());
      errors[std::size_t(pg->rank())] = error_message<ValueError>(
          [&] { unexpected[std::size_t(pg->rank())] = load_sharded_from(*loaded, src, o); });
    });
    return std::make_tuple(tmp.dir.string(), errors, unexpected);
  };
  NamedTensors missing;
  for (const auto& [name, t] : state)
    if (name != "3.bias") missing.emplace_back(name, t);
  {
    auto [dir, errors, unexpected] = load(missing);
    for (int r = 0; r < 2; ++r)
      BOOST_TEST(errors[std::size_t(r)] ==
                 fmt::format("load_sharded_from: rank {}: parameter '3.bias' is missing from {} "
                             "(no tensor '3.bias')",
                             r, dir));
  }
  NamedTensors wrong = missing;
  wrong.emplace_back("3.bias", zeros({5}));
  {
    auto [dir, errors, unexpected] = load(wrong);
    const std::string file = io::SafetensorsDir::open(dir).info("3.bias").file;
    for (int r = 0; r < 2; ++r)
      BOOST_TEST(errors[std::size_t(r)] ==
                 fmt::format("load_sharded_from: rank {}: parameter '3.bias' has shape [4] in "
                             "the model, but tensor '3.bias' in {} has shape [5]",
                             r, file));
  }
  NamedTensors buffer_missing;
  for (const auto& [name, t] : state)
    if (name != "1.running_var") buffer_missing.emplace_back(name, t);
  {
    auto [dir, errors, unexpected] = load(buffer_missing);
    BOOST_TEST(errors[1] == fmt::format("load_sharded_from: rank 1: buffer '1.running_var' is "
                                        "missing from {} (no tensor '1.running_var')",
                                        dir));
  }
  // Tensors the model lacks: reported, unless an ignore pattern matches (GPT-2's).
  NamedTensors extra = state;
  extra.emplace_back("h.0.attn.bias", zeros({1}));
  extra.emplace_back("h.0.attn.masked_bias", zeros({1}));
  extra.emplace_back("junk", zeros({1}));
  {
    auto [dir, errors, unexpected] = load(extra);
    BOOST_TEST(errors[0] == "no error");
    BOOST_TEST(unexpected[0] ==
                   (std::vector<std::string>{"h.0.attn.bias", "h.0.attn.masked_bias", "junk"}),
               boost::test_tools::per_element());
  }
  {
    LoadShardedOptions o;
    o.ignore_unexpected = {R"(attn\.masked_bias)", R"(attn\.bias)"};
    auto [dir, errors, unexpected] = load(extra, o);
    BOOST_TEST(errors[1] == "no error");
    BOOST_TEST(unexpected[1] == (std::vector<std::string>{"junk"}),
               boost::test_tools::per_element());
  }
  // Other names in the file: the mapping from the model's FQNs.
  NamedTensors prefixed;
  for (const auto& [name, t] : state) prefixed.emplace_back("model." + name, t);
  {
    LoadShardedOptions o;
    o.name_in_file = [](const std::string& fqn) { return "model." + fqn; };
    auto [dir, errors, unexpected] = load(prefixed, o);
    BOOST_TEST(errors[0] == "no error");
    BOOST_TEST(unexpected[0].empty());
    auto [dir2, errors2, unexpected2] = load(prefixed);
    BOOST_TEST(errors2[0] == fmt::format("load_sharded_from: rank 0: parameter '0.weight' is "
                                         "missing from {} (no tensor '0.weight')",
                                         dir2));
  }
}

// A loaded model trains as the model FSDP wrapped from the same values: the same losses and
// parameters after two SGD steps, with and without mixed precision.
BOOST_AUTO_TEST_CASE(trains_as_the_model_wrapped_from_the_values) {
  TempDir tmp;
  manual_seed(9);
  const NamedTensors state = linears(kCPU)->state_dict();
  io::save_safetensors_dir(tmp.dir.string(), state);
  for (bool orig : {false, true}) {
    for (bool mp : {false, true}) {
      std::vector<std::vector<double>> losses(2);
      std::vector<std::map<std::string, std::vector<double>>> params(2);
      on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
        for (int loaded = 0; loaded < 2; ++loaded) {
          auto model = linears(loaded ? kMeta : kCPU);
          if (!loaded) model->load_state_dict(state);
          WrapperOptions w;
          w.process_group = pg;
          w.use_orig_params = orig;
          if (mp) w.mixed_precision = MixedPrecision{.param_dtype = DType::BFloat16};
          if (loaded) w.param_init_fn = allocate_only();
          for (const char* name : {"0", "1", "2", "3"})
            model->replace_child(name, FullyShardedDataParallel::make(model->child(name), w));
          auto root = FullyShardedDataParallel::make(model, w);
          if (loaded) load_sharded_from(*root, io::SafetensorsDir::open(tmp.dir.string()));
          optim::SGD opt(root->parameters(), optim::SGDOptions{.lr = 0.1});
          Generator data(1 + std::uint64_t(pg->rank()));
          std::vector<double> l;
          for (int step = 0; step < 2; ++step) {
            Tensor x = randn({3, 64}, {}, &data);
            Tensor loss = mse_loss((*root)(x).tensor().to(DType::Float32), x);
            opt.zero_grad();
            loss.backward();
            opt.step();
            l.push_back(loss.item());
          }
          const auto full = values_of(full_state_dict(*root, false));
          if (pg->rank() == 0) {
            losses[std::size_t(loaded)] = l;
            params[std::size_t(loaded)] = full;
          }
        }
      });
      BOOST_TEST(losses[1] == losses[0], boost::test_tools::per_element());
      BOOST_TEST((params[1] == params[0]), "use_orig_params " << orig << " mixed precision " << mp);
    }
  }
}
