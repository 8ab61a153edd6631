// SHARDED and LOCAL state dicts and the state_dict_type selection: each rank's pieces are the
// parameters' exact slices, pieces saved at one world size and strategy load at another, a local
// state dict refuses another world size, and the type is the same on every unit.
#define BOOST_TEST_MODULE fsdp_state_dict
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <map>
#include <mutex>
#include <set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/nn/nn.h"
#include "core/optim/optim.h"
#include "core/random.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/optim_state_dict.h"
#include "fsdp/state_dict.h"
#include "fsdp/state_dict_local.h"
#include "fsdp/state_dict_sharded.h"
#include "fsdp/state_dict_type.h"
#include "ops/checkpoint_wrapper.h"
#include "policies/module_wrap_policy.h"
#include "tests/support/runtime_harness.h"
#include "tests/support/thread_safe_test.h"

using namespace fsdp;
using namespace fsdp::testing;
namespace bdata = boost::unit_test::data;

namespace fsdp {
std::ostream& operator<<(std::ostream& os, StateDictType t) {
  return os << to_string(t);
}
}  // namespace fsdp

namespace {

using Values = std::map<std::string, std::vector<double>>;

// The plain model's parameters and buffers by FQN.
Values plain_values(std::uint64_t seed) {
  Values v;
  auto m = mlp(seed);
  for (const auto& [name, t] : m->named_parameters()) v[name] = t.to_vector();
  return v;
}

// Runs `world` ranks; each wraps mlp(seed) with `o` and calls body; rank 0's full state dict.
Values run_wrapped(int world, std::uint64_t seed, const RunOptions& o,
                   const std::function<void(FullyShardedDataParallel&, int)>& body) {
  Values out;
  on_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = wrap_mlp(mlp(seed), pg, o);
    body(*model, pg->rank());
    auto full = full_state_dict(*model, false);
    if (pg->rank() != 0) return;  // (HYBRID: every shard group has a rank 0)
    for (const auto& [n, t] : full) out[n] = t.to_vector();
  });
  return out;
}

// Every rank's sharded state dict of mlp(seed) wrapped with `o` at `world` ranks.
ShardedStateDict save_sharded(int world, std::uint64_t seed, const RunOptions& o) {
  ShardedStateDict all;
  std::mutex mu;
  run_wrapped(world, seed, o, [&](FullyShardedDataParallel& m, int) {
    auto pieces = sharded_state_dict(m);
    std::lock_guard<std::mutex> lock(mu);
    for (auto& p : pieces) all.push_back(std::move(p));
  });
  return all;
}

RunOptions with(ShardingStrategy s, bool orig, int world) {
  RunOptions o;
  o.strategy = s;
  o.use_orig_params = orig;
  o.node_size = world >= 2 ? world / 2 : 1;
  return o;
}

const std::vector<ShardingStrategy> kStrategies = {
    ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP, ShardingStrategy::NO_SHARD,
    ShardingStrategy::HYBRID_SHARD};

template <typename F>
void check_message(F&& f, const std::string& needle) {
  try {
    f();
    TS_FAIL("no exception; expected one containing: " + needle);
  } catch (const std::exception& e) {
    TS_CONTEXT(e.what()) {
      TS_TEST(std::string(e.what()).find(needle) != std::string::npos);
    }
  }
}

}  // namespace

BOOST_DATA_TEST_CASE(pieces_are_the_parameters_slices,
                     bdata::make(kStrategies) * bdata::make({1, 2, 3, 4}) *
                         bdata::make({false, true}),
                     strategy, world, orig) {
  const Values want = plain_values(7);
  auto pieces = save_sharded(world, 7, with(strategy, orig, world));
  // Non-replica pieces tile each parameter exactly once, with the plain model's values.
  std::map<std::string, std::vector<int>> hits;
  for (const auto& p : pieces) {
    if (p.replica) continue;
    BOOST_TEST_CONTEXT(p.fqn << " at " << p.offset) {
      TS_REQUIRE(want.count(p.fqn) == 1u);
      const auto& w = want.at(p.fqn);
      TS_TEST(shape_numel(p.global_shape) == static_cast<std::int64_t>(w.size()));
      auto& h = hits[p.fqn];
      h.resize(w.size());
      const auto got = p.local.to_vector();
      for (std::size_t i = 0; i < got.size(); ++i) {
        TS_TEST(got[i] == w[p.offset + i]);
        ++h[p.offset + i];
      }
    }
  }
  TS_TEST(hits.size() == want.size());
  for (const auto& [fqn, h] : hits)
    for (int n : h) TS_TEST(n == 1, fqn);
}

BOOST_DATA_TEST_CASE(sharded_loads_at_another_world_size_and_strategy,
                     bdata::make({1, 2, 3, 4}) * bdata::make(kStrategies) *
                         bdata::make({1, 2, 3, 4}) * bdata::make(kStrategies),
                     save_world, save_strategy, load_world, load_strategy) {
  const Values want = plain_values(7);
  const PieceSet saved(save_sharded(save_world, 7, with(save_strategy, false, save_world)));
  Values got =
      run_wrapped(load_world, 99, with(load_strategy, true, load_world),
                  [&](FullyShardedDataParallel& m, int) { load_sharded_state_dict(m, saved); });
  TS_TEST(got.size() == want.size());
  for (const auto& [fqn, w] : want) TS_TEST(got[fqn] == w, fqn);
}

BOOST_AUTO_TEST_CASE(sharded_load_errors) {
  ShardedStateDict pieces = save_sharded(2, 7, with(ShardingStrategy::FULL_SHARD, false, 2));
  // Drop rank 1's piece of "3.weight": rank 1 of a 2-rank load misses those elements.
  ShardedStateDict partial;
  for (const auto& p : pieces)
    if (!(p.fqn == "3.weight" && p.offset > 0)) partial.push_back(p);
  check_message(
      [&] {
        PieceSet s(partial);
        on_ranks(1, [&](std::shared_ptr<comm::ProcessGroup> pg) {
          auto m = wrap_mlp(mlp(1), pg, with(ShardingStrategy::FULL_SHARD, false, 1));
          load_sharded_state_dict(*m, s);
        });
      },
      "of '3.weight' (shape [4, 10]) is in no saved piece");
  check_message(
      [&] {
        PieceSet s;
        s.add({"x", {2, 3}, 4, zeros({3}), false});
      },
      "piece of 'x' [4, 7) lies outside its 6 elements (shape [2, 3])");
  ShardedStateDict extra = pieces;
  extra.push_back({"nope", {1}, 0, zeros({1}), false});
  check_message(
      [&] {
        PieceSet s(extra);
        on_ranks(1, [&](std::shared_ptr<comm::ProcessGroup> pg) {
          auto m = wrap_mlp(mlp(1), pg, with(ShardingStrategy::FULL_SHARD, false, 1));
          load_sharded_state_dict(*m, s);
        });
      },
      "unexpected key 'nope'");
}

BOOST_AUTO_TEST_CASE(local_round_trip_and_refusal) {
  const Values want = plain_values(7);
  std::vector<LocalStateDict> saved(2);
  run_wrapped(2, 7, with(ShardingStrategy::FULL_SHARD, false, 2),
              [&](FullyShardedDataParallel& m, int rank) { saved[rank] = local_state_dict(m); });
  TS_TEST(saved[0].tensors.front().first == "_flat_param");
  TS_TEST(saved[0].metadata.count("2._flat_param") == 1u);
  Values got = run_wrapped(
      2, 99, with(ShardingStrategy::FULL_SHARD, false, 2),
      [&](FullyShardedDataParallel& m, int rank) { load_local_state_dict(m, saved[rank]); });
  for (const auto& [fqn, w] : want) TS_TEST(got[fqn] == w, fqn);
  check_message(
      [&] {
        run_wrapped(3, 99, with(ShardingStrategy::FULL_SHARD, false, 3),
                    [&](FullyShardedDataParallel& m, int rank) {
                      load_local_state_dict(m, saved[rank % 2]);
                    });
      },
      "a LOCAL_STATE_DICT loads only into the same wrapping and world size; use "
      "SHARDED_STATE_DICT to load at another");
}

BOOST_AUTO_TEST_CASE(state_dict_type_selection) {
  on_ranks(1, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto m = wrap_mlp(mlp(1), pg, with(ShardingStrategy::FULL_SHARD, false, 1));
    TS_TEST(to_string(state_dict_type(*m)) == "StateDictType.FULL_STATE_DICT");
    {
      StateDictTypeGuard g(*m, StateDictType::SHARDED_STATE_DICT);
      TS_TEST(to_string(state_dict_type(*m)) == "StateDictType.SHARDED_STATE_DICT");
    }
    TS_TEST(to_string(state_dict_type(*m)) == "StateDictType.FULL_STATE_DICT");
    auto* inner = m->fsdp_units().at(1);
    set_state_dict_type(*inner, StateDictType::LOCAL_STATE_DICT);
    check_message([&] { state_dict_type(*m); },
                  "All FSDP modules should have the same state_dict_type.");
    set_state_dict_type(*m, StateDictType::LOCAL_STATE_DICT);
    TS_TEST(to_string(state_dict_type(*m)) == "StateDictType.LOCAL_STATE_DICT");
  });
}

BOOST_DATA_TEST_CASE(state_dict_follows_the_type,
                     bdata::make({StateDictType::FULL_STATE_DICT, StateDictType::SHARDED_STATE_DICT,
                                  StateDictType::LOCAL_STATE_DICT}),
                     type) {
  const Values want = plain_values(7);
  std::vector<StateDict> saved(2);
  run_wrapped(2, 7, with(ShardingStrategy::FULL_SHARD, false, 2),
              [&](FullyShardedDataParallel& m, int rank) {
                set_state_dict_type(m, type);
                saved[rank] = state_dict(m);
              });
  TS_TEST((saved[0].type == type));
  TS_TEST(saved[0].full.empty() == (type != StateDictType::FULL_STATE_DICT));
  TS_TEST(saved[0].sharded.empty() == (type != StateDictType::SHARDED_STATE_DICT));
  TS_TEST(saved[0].local.tensors.empty() == (type != StateDictType::LOCAL_STATE_DICT));
  Values got = run_wrapped(2, 99, with(ShardingStrategy::FULL_SHARD, false, 2),
                           [&](FullyShardedDataParallel& m, int rank) {
                             StateDictTypeGuard g(m, type);
                             StateDict s = saved[rank];
                             // Each rank loads its own pieces (a sharded state of one rank).
                             load_state_dict(m, s);
                           });
  for (const auto& [fqn, w] : want) TS_TEST(got[fqn] == w, fqn);
  check_message(
      [&] {
        run_wrapped(2, 99, with(ShardingStrategy::FULL_SHARD, false, 2),
                    [&](FullyShardedDataParallel& m, int rank) {
                      StateDict s = saved[rank];
                      s.type = type == StateDictType::LOCAL_STATE_DICT
                                   ? StateDictType::FULL_STATE_DICT
                                   : StateDictType::LOCAL_STATE_DICT;
                      set_state_dict_type(m, type);
                      load_state_dict(m, s);
                    });
      },
      "load_state_dict: the model's state_dict_type is " + to_string(type));
}

// An ignored module's parameters belong to the model's state dict of every type, whole on every
// rank, and load back, as upstream's (FSDP1 in torch 2.15 keeps them in FULL, SHARDED and LOCAL;
// they were missing here, and loading them was an unexpected key).
// A non-persistent buffer (transformers' GPT-2 attention mask, Llama's inv_freq) is in no state
// dict, as in torch's model.state_dict(), and a state dict that names one is refused (unexpected
// key); persistent buffers are in every type.
BOOST_DATA_TEST_CASE(non_persistent_buffers_are_in_no_state_dict, bdata::make({1, 2}), world) {
  on_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto m = mlp(7);
    m->child("0")->register_buffer("kept", ones({3}));
    m->child("0")->register_buffer("computed", ones({4}), /*persistent=*/false);
    WrapperOptions w;
    w.process_group = pg;
    auto model = FullyShardedDataParallel::make(m, w);
    auto keys_of = [](const auto& named) {
      std::set<std::string> keys;
      for (const auto& [k, t] : named) keys.insert(k);
      return keys;
    };
    const auto full = full_state_dict(*model, false);
    std::set<std::string> sharded;
    for (const auto& p : sharded_state_dict(*model)) sharded.insert(p.fqn);
    const LocalStateDict local = local_state_dict(*model);
    for (const auto& keys : {keys_of(full), sharded, keys_of(local.tensors)}) {
      TS_TEST(keys.count("0.kept") == 1u);
      TS_TEST(keys.count("0.computed") == 0u);
    }
    auto with_computed = full;
    with_computed.emplace_back("0.computed", ones({4}));
    check_message([&] { load_full_state_dict(*model, with_computed); },
                  "unexpected key '0.computed'");
    LocalStateDict local_with = local;
    local_with.tensors.emplace_back("0.computed", ones({4}));
    check_message([&] { load_local_state_dict(*model, local_with); },
                  "unexpected key '0.computed'");
  });
}

BOOST_DATA_TEST_CASE(ignored_modules_parameters_are_in_every_state_dict,
                     bdata::make({1, 2, 3}) * bdata::make({false, true}), world, orig) {
  const Values want = plain_values(7);
  on_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto m = mlp(7);
    const nn::ModulePtr ignored = m->child("2");  // Sequential(Linear(10, 10), ReLU)
    WrapperOptions w;
    w.process_group = pg;
    w.use_orig_params = orig;
    w.ignored_modules = std::vector<nn::ModulePtr>{ignored};
    m->replace_child("3", FullyShardedDataParallel::make(m->child("3"), w));
    auto model = FullyShardedDataParallel::make(m, w);
    Tensor weight = ignored->child("0")->param("weight");
    auto spoil = [&] {
      autograd::NoGradGuard no_grad;
      weight.zero_();
    };
    auto check_restored = [&](const char* what) {
      TS_TEST(weight.to_vector() == want.at("2.0.weight"), what);
    };

    Values full;
    for (const auto& [n, t] : full_state_dict(*model, false)) full[n] = t.to_vector();
    TS_TEST((full == want));
    const auto full_state = full_state_dict(*model, false);
    spoil();
    load_full_state_dict(*model, full_state);
    check_restored("FULL");

    const ShardedStateDict pieces = sharded_state_dict(*model);
    std::size_t found = 0;
    for (const auto& p : pieces) {
      if (p.fqn != "2.0.weight") continue;
      ++found;
      TS_TEST((p.global_shape == Shape{10, 10}));
      TS_TEST(p.offset == 0);
      TS_TEST(p.local.to_vector() == want.at("2.0.weight"));
      TS_TEST(p.replica == (pg->rank() != 0));
    }
    TS_TEST(found == 1u);
    spoil();
    load_sharded_state_dict(*model, PieceSet(pieces));
    check_restored("SHARDED");

    const LocalStateDict local = local_state_dict(*model);
    std::set<std::string> keys;
    for (const auto& [k, t] : local.tensors) keys.insert(k);
    // NO_SHARD units (world size 1) as upstream's: their parameters by FQN.
    const std::set<std::string> want_keys =
        world == 1
            ? std::set<std::string>{"0.weight", "0.bias",   "2.0.weight",
                                    "2.0.bias", "3.weight", "3.bias"}
            : std::set<std::string>{"_flat_param", "2.0.weight", "2.0.bias", "3._flat_param"};
    TS_TEST((keys == want_keys));
    spoil();
    load_local_state_dict(*model, local);
    check_restored("LOCAL");
  });
}

// A tied parameter is in the model's FULL and SHARDED state dicts under each of its names, as in
// upstream's model.state_dict() (and the plain module's state_dict), and either name loads it;
// the state dicts held it once, under its first FQN. (full_state_dict(), for checkpoints in
// Hugging Face's layout, keeps it once.)
BOOST_DATA_TEST_CASE(tied_parameters_under_every_name,
                     bdata::make({1, 2, 3}) * bdata::make({false, true}), world, orig) {
  auto make_tied = [] {
    manual_seed(3);
    auto a = std::make_shared<nn::Linear>(4, 4);
    auto b = std::make_shared<nn::Linear>(4, 4);
    b->set_parameter("weight", a->param("weight"));
    return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{a, b});
  };
  Values want;
  for (const auto& [name, t] : make_tied()->state_dict()) want[name] = t.to_vector();
  TS_REQUIRE(want.count("1.weight") == 1u);
  on_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    WrapperOptions w;
    w.process_group = pg;
    w.use_orig_params = orig;
    auto model = FullyShardedDataParallel::make(make_tied(), w);
    auto full_values = [&] {
      StateDictTypeGuard g(*model, StateDictType::FULL_STATE_DICT);
      Values v;
      for (const auto& [name, t] : state_dict(*model).full) v[name] = t.to_vector();
      return v;
    };
    auto spoil = [&] {  // zeros everywhere, through the first names only
      StateDictTypeGuard g(*model, StateDictType::FULL_STATE_DICT);
      StateDict zeros;
      for (const auto& [name, t] : make_tied()->named_parameters())
        zeros.full.emplace_back(name, zeros_like(t));
      load_state_dict(*model, zeros);
    };

    const StateDict full = state_dict(*model);
    Values got = full_values();  // collectives outside TS_TEST's lock
    TS_TEST((got == want));
    spoil();
    load_state_dict(*model, full);
    got = full_values();
    TS_TEST((got == want), "FULL");

    set_state_dict_type(*model, StateDictType::SHARDED_STATE_DICT);
    const StateDict sharded = state_dict(*model);
    std::map<std::string, std::pair<std::int64_t, std::vector<double>>> pieces;
    for (const auto& p : sharded.sharded) pieces[p.fqn] = {p.offset, p.local.to_vector()};
    TS_REQUIRE(pieces.count("1.weight") == 1u);
    TS_TEST((pieces.at("1.weight") == pieces.at("0.weight")));
    spoil();
    load_state_dict(*model, sharded);
    got = full_values();
    TS_TEST((got == want), "SHARDED");
  });
}

// A module met twice (Sequential(a, bn, a, bn)): an ignored one's parameters and a shared
// module's persistent buffers are in every state dict under each of its names, as upstream's
// model.state_dict() (nn.Module.state_dict recurses without a memo); they were there once, under
// the first name. Each state dict loads back, and one holding only the first names loads too.
BOOST_DATA_TEST_CASE(a_module_met_twice_is_under_every_name,
                     bdata::make({1, 2}) * bdata::make({false, true}), world, orig) {
  auto make = [] {
    manual_seed(5);
    auto a = std::make_shared<nn::Linear>(4, 4);
    auto bn = std::make_shared<nn::BatchNorm1d>(4);
    return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{a, bn, a, bn});
  };
  Values want;
  for (const auto& [name, t] : make()->state_dict()) want[name] = t.to_vector();
  TS_REQUIRE(want.count("2.weight") == 1u);
  TS_REQUIRE(want.count("3.running_var") == 1u);
  on_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto m = make();
    WrapperOptions w;
    w.process_group = pg;
    w.use_orig_params = orig;
    w.ignored_modules = std::vector<nn::ModulePtr>{m->child("0")};
    auto model = FullyShardedDataParallel::make(m, w);
    Tensor weight = m->child("0")->param("weight"), var = m->child("1")->buffer("running_var");
    auto spoil = [&] {
      autograd::NoGradGuard no_grad;
      weight.zero_();
      var.zero_();
    };
    auto restored = [&] {
      return weight.to_vector() == want.at("0.weight") &&
             var.to_vector() == want.at("1.running_var");
    };

    const StateDict full = state_dict(*model);
    Values got;
    for (const auto& [name, t] : full.full) got[name] = t.to_vector();
    TS_TEST((got == want));
    spoil();
    load_state_dict(*model, full);
    TS_TEST(restored(), "FULL");
    StateDict first_names = full;  // the old state dicts: each tensor once
    std::erase_if(first_names.full,
                  [](const auto& e) { return e.first[0] == '2' || e.first[0] == '3'; });
    spoil();
    load_state_dict(*model, first_names);
    TS_TEST(restored(), "FULL, first names only");

    set_state_dict_type(*model, StateDictType::SHARDED_STATE_DICT);
    const StateDict sharded = state_dict(*model);
    std::set<std::string> fqns;
    for (const auto& p : sharded.sharded) fqns.insert(p.fqn);
    std::set<std::string> want_fqns;
    for (const auto& [name, v] : want) want_fqns.insert(name);
    TS_TEST((fqns == want_fqns));
    spoil();
    load_state_dict(*model, sharded);
    TS_TEST(restored(), "SHARDED");

    set_state_dict_type(*model, StateDictType::LOCAL_STATE_DICT);
    const StateDict local = state_dict(*model);
    std::set<std::string> keys;
    for (const auto& [k, t] : local.local.tensors) keys.insert(k);
    for (const char* k : {"2.weight", "2.bias", "3.running_mean", "3.running_var"})
      TS_TEST(keys.count(k) == 1u, k);
    spoil();
    load_state_dict(*model, local);
    TS_TEST(restored(), "LOCAL");
  });
}

// Activation checkpointing applied before FSDP (FSDP(CheckpointWrapper(Linear)) and FSDP inside
// a CheckpointWrapper): every state dict and the optimizer state dict name the parameters
// without "_checkpoint_wrapped_module." (upstream cleans each key after joining it), as the plain
// model does, and each loads back. They kept the segment, so a checkpoint of such a model did
// not load into the model without activation checkpointing, nor into torch's.
BOOST_DATA_TEST_CASE(checkpoint_wrappers_are_not_in_state_dict_keys,
                     bdata::make({1, 2}) * bdata::make({false, true}), world, orig) {
  auto make = [] {
    manual_seed(4);
    return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::Linear>(4, 2),
        std::make_shared<nn::LayerNorm>(2)});
  };
  Values want;
  for (const auto& [name, t] : make()->state_dict()) want[name] = t.to_vector();
  on_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto m = make();
    nn::Module* ln = m->child("2").get();
    ops::apply_activation_checkpointing(
        m, {}, [ln](nn::Module& mod) { return mod.type_name() == "Linear" || &mod == ln; });
    WrapperOptions w;
    w.process_group = pg;
    w.use_orig_params = orig;
    w.auto_wrap_policy = policies::ModuleWrapPolicy::make(nn::ClassSet{"Linear"});
    auto model = FullyShardedDataParallel::make(m, w);  // LayerNorm in the root unit
    const Tensor x = from_vector(std::vector<double>(8, 0.5), {2, 4});
    optim::SGD opt(model->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    (*model)(x).tensor().sum().backward();
    opt.step();
    std::vector<double> trained;  // LayerNorm's weight after the step
    std::set<std::string> want_keys;
    for (const auto& [name, v] : want) want_keys.insert(name);

    const StateDict full = state_dict(*model);
    std::set<std::string> keys;
    for (const auto& [name, t] : full.full) {
      keys.insert(name);
      if (name == "2.weight") trained = t.to_vector();
    }
    TS_TEST((keys == want_keys), "FULL");
    TS_TEST(trained.size() == 2u);
    load_state_dict(*model, full);

    std::set<std::string> optim_keys;
    for (const auto& [fqn, states] : full_optim_state_dict(*model, opt, false))
      optim_keys.insert(fqn);
    TS_TEST((optim_keys == want_keys), "optimizer");

    set_state_dict_type(*model, StateDictType::SHARDED_STATE_DICT);
    const StateDict sharded = state_dict(*model);
    keys.clear();
    for (const auto& p : sharded.sharded) keys.insert(p.fqn);
    TS_TEST((keys == want_keys), "SHARDED");
    load_state_dict(*model, sharded);

    set_state_dict_type(*model, StateDictType::LOCAL_STATE_DICT);
    const StateDict local = state_dict(*model);
    keys.clear();
    for (const auto& [k, t] : local.local.tensors) keys.insert(k);
    const std::set<std::string> want_local =
        world == 1 ? want_keys
                   : std::set<std::string>{"_flat_param", "0._flat_param", "1._flat_param"};
    TS_TEST((keys == want_local), "LOCAL");
    load_state_dict(*model, local);
    set_state_dict_type(*model, StateDictType::FULL_STATE_DICT);
    std::vector<double> loaded;
    for (const auto& [name, t] : state_dict(*model).full)
      if (name == "2.weight") loaded = t.to_vector();
    TS_TEST(loaded == trained, boost::test_tools::per_element());
  });
}

// A NO_SHARD unit's LOCAL_STATE_DICT is its full state dict, as upstream's (torch 2.15 swaps in
// FULL_STATE_DICT for NO_SHARD units, with a warning): its parameters by FQN, whole, which load
// back by FQN. It was the flat parameter ("_flat_param"), which torch's models cannot read.
BOOST_DATA_TEST_CASE(local_state_dict_of_no_shard_units_is_by_fqn,
                     bdata::make({1, 2}) * bdata::make({false, true}), world, orig) {
  const Values want = plain_values(7);
  std::vector<LocalStateDict> saved(world);
  run_wrapped(world, 7, with(ShardingStrategy::NO_SHARD, orig, world),
              [&](FullyShardedDataParallel& m, int rank) { saved[rank] = local_state_dict(m); });
  Values got_saved;
  for (const auto& [name, t] : saved[0].tensors) got_saved[name] = t.to_vector();
  TS_TEST((got_saved == want));
  Values got = run_wrapped(
      world, 99, with(ShardingStrategy::NO_SHARD, orig, world),
      [&](FullyShardedDataParallel& m, int rank) { load_local_state_dict(m, saved[rank]); });
  TS_TEST((got == want));
  LocalStateDict missing = saved[0];
  missing.tensors.erase(missing.tensors.begin());
  check_message(
      [&] {
        run_wrapped(1, 99, with(ShardingStrategy::NO_SHARD, orig, 1),
                    [&](FullyShardedDataParallel& m, int) { load_local_state_dict(m, missing); });
      },
      "load_local_state_dict: missing key '0.weight' (a parameter of NO_SHARD FSDP unit '', "
      "saved by FQN as upstream's)");
}
