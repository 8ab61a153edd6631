// The traversal engine: post-order apply, post-order names, managed parameters, recursive wrap
// (checked call by call against a literal recursive transcription of upstream), deep chains.
#include <fmt/format.h>

#include <boost/test/unit_test.hpp>
#include <functional>
#include <random>
#include <tuple>

#include "core/error.h"
#include "core/traversal/managed_params.h"
#include "core/traversal/post_order.h"
#include "core/traversal/pre_order.h"
#include "core/traversal/recursive_wrap.h"
#include "core/traversal/unit_modules.h"
#include "core/traversal/wrapper_marker.h"
#include "tests/policies/wrap_models.h"

using namespace fsdp;
using nn::ModulePtr;

namespace {

class Node : public nn::Module {
 public:
  FSDP_MODULE_CLASS(Node, nn::Module)
  Node() : nn::Module(static_class()) {}
};

class Wrapped : public nn::Module {
 public:
  FSDP_MODULE_CLASS(Wrapped, nn::Module)
  explicit Wrapped(ModulePtr m) : nn::Module(static_class()) {
    register_module("inner", std::move(m));
    traversal::mark_as_wrapper(*this, "Wrapped");
  }
};

ModulePtr node() {
  return std::make_shared<Node>();
}
ModulePtr add(const ModulePtr& parent, const std::string& name, ModulePtr child) {
  parent->register_module(name, child);
  return child;
}
Tensor meta_param(std::int64_t n) {
  return empty({n}, TensorOptions(DType::Float32, kMeta));
}

std::vector<std::string> names_of(const std::vector<std::pair<std::string, ModulePtr>>& v) {
  std::vector<std::string> out;
  for (const auto& [n, m] : v) out.push_back(n);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(engine)

// fsdp-plan's module table is built on this order: the first path to each module and the index.
BOOST_AUTO_TEST_CASE(pre_order_first_paths_and_index) {
  auto root = node();
  auto a = add(root, "a", node());
  auto x = add(a, "x", node());
  auto b = add(root, "b", node());
  b->register_module("again", a);  // reached a second time: not a new entry
  traversal::PreOrderModules order(root);
  BOOST_TEST_REQUIRE(order.size() == 4u);
  const std::vector<const nn::Module*> expected{root.get(), a.get(), x.get(), b.get()};
  std::vector<std::string> names;
  for (std::size_t i = 0; i < order.size(); ++i) {
    BOOST_TEST(order.module(i).get() == expected[i]);
    names.push_back(order.name(i));
  }
  BOOST_TEST(names == (std::vector<std::string>{"", "a", "a.x", "b"}),
             boost::test_tools::per_element());
  BOOST_TEST(order.parent(0) == -1);
  BOOST_TEST(order.segment(0) == nullptr);
  BOOST_TEST(order.parent(2) == 1);
  BOOST_TEST(*order.segment(2) == "x");
  BOOST_TEST(order.parent(3) == 0);
  const traversal::PointerIndex index = order.take_index();
  BOOST_TEST(index.size() == 4u);
  for (std::size_t i = 0; i < expected.size(); ++i)
    BOOST_TEST(index.find(expected[i]) == static_cast<std::int64_t>(i));
  BOOST_TEST(index.find(node().get()) == traversal::PointerIndex::kAbsent);
}

BOOST_AUTO_TEST_CASE(unit_walks_stop_at_nested_units_and_ignored_modules) {
  // root(a(x, w=Wrapped(y)), b(z), s=a again): pre-order with repeats, FQNs below the root; the
  // wrapper and the ignored `z` are left out with their subtrees.
  auto root = node();
  auto a = add(root, "a", node());
  add(a, "x", node());
  auto y = node();
  add(a, "w", std::make_shared<Wrapped>(y));
  auto b = add(root, "b", node());
  auto z = add(b, "z", node());
  add(z, "under_z", node());
  root->register_module("s", a);  // a shared module: reached twice
  traversal::ModuleSet ignored{z.get()};
  std::vector<std::string> fqns;
  std::vector<const nn::Module*> modules;
  for (const auto& [m, fqn] : traversal::unit_own_modules(*root, ignored)) {
    fqns.push_back(fqn);
    modules.push_back(m);
  }
  const std::vector<std::string> expected{"", "a", "a.x", "b", "s", "s.x"};
  BOOST_TEST(fqns == expected, boost::test_tools::per_element());
  BOOST_TEST_REQUIRE(modules.size() == 6u);
  BOOST_TEST(modules[1] == a.get());
  BOOST_TEST(modules[4] == a.get());
  // A unit's own wrapper is no module of it; an ignored root owns nothing.
  BOOST_TEST(traversal::unit_own_modules(*root->get_submodule("a.w"), {}).empty());
  BOOST_TEST(traversal::unit_own_modules(*z, ignored).empty());
  // The units of the tree: the wrapper once (named_modules de-duplicates the shared `a`).
  const auto units = traversal::named_units(*root);
  BOOST_TEST_REQUIRE(units.size() == 1u);
  BOOST_TEST(units[0].first == "a.w");
  BOOST_TEST(units[0].second == root->get_submodule("a.w").get());
  auto top = std::make_shared<Wrapped>(root);
  const auto all = traversal::named_units(*top);
  BOOST_TEST_REQUIRE(all.size() == 2u);
  BOOST_TEST(all[0].first == "");
  BOOST_TEST(all[1].first == "inner.a.w");
}

BOOST_AUTO_TEST_CASE(post_order_named_modules_docstring_example) {
  // M(S1(), S2(SS1(), SS2()), S3()) -> [S1, SS1, SS2, S2, S3, M]
  auto m = node();
  auto s1 = add(m, "S1", node());
  auto s2 = add(m, "S2", node());
  auto ss1 = add(s2, "SS1", node());
  auto ss2 = add(s2, "SS2", node());
  auto s3 = add(m, "S3", node());
  auto order = traversal::post_order_named_modules(m);
  std::vector<std::string> expected{"S1", "S2.SS1", "S2.SS2", "S2", "S3", ""};
  BOOST_TEST(names_of(order) == expected, boost::test_tools::per_element());
  std::vector<ModulePtr> mods{s1, ss1, ss2, s2, s3, m};
  for (std::size_t i = 0; i < mods.size(); ++i) BOOST_TEST(order[i].second == mods[i]);
}

BOOST_AUTO_TEST_CASE(post_order_named_modules_shared_module_named_by_later_parent) {
  // Names are claimed at push time and later siblings are expanded first: X shared by S1 and S3
  // is "S3.X" and is not listed under S1.
  auto m = node();
  auto s1 = add(m, "S1", node());
  auto x = add(s1, "X", node());
  auto s3 = add(m, "S3", node());
  add(s3, "X", x);
  auto order = traversal::post_order_named_modules(m);
  std::vector<std::string> expected{"S1", "S3.X", "S3", ""};
  BOOST_TEST(names_of(order) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(post_order_apply_order_replacement_and_root) {
  auto root = node();
  auto a = add(root, "a", node());
  auto a1 = add(a, "a1", node());
  auto b = add(root, "b", node());
  add(b, "shared", a1);  // a1 is reached first under a
  std::vector<nn::Module*> calls;
  traversal::post_order_apply(root, [&](const ModulePtr& m) -> ModulePtr {
    calls.push_back(m.get());
    if (m == a1) return std::make_shared<Wrapped>(m);
    return nullptr;
  });
  std::vector<nn::Module*> expected{a1.get(), a.get(), b.get(), root.get()};
  BOOST_TEST(calls == expected, boost::test_tools::per_element());
  BOOST_TEST(traversal::is_wrapper(*a->child("a1")));
  // Upstream quirk kept: the second parent keeps the unwrapped module.
  BOOST_TEST(b->child("shared") == a1);

  // Returning a module for the root has no parent slot to put it in.
  auto lone = node();
  try {
    traversal::post_order_apply(lone,
                                [](const ModulePtr& m) { return std::make_shared<Wrapped>(m); });
    BOOST_FAIL("expected AssertionError");
  } catch (const AssertionError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "Non-root modules should have their parent module set but got None for Node()");
  }
}

BOOST_AUTO_TEST_CASE(managed_param_to_fqn_bfs_and_visited) {
  // root(p0) -> a(pa, tied) -> a.c(pc); root -> b(tied again): the tied parameter keeps its
  // first position and its last FQN.
  auto root = node();
  root->register_parameter("p0", meta_param(2));
  auto a = add(root, "a", node());
  Tensor tied = meta_param(3);
  a->register_parameter("w", tied);
  auto c = add(a, "c", node());
  c->register_parameter("pc", meta_param(4));
  auto b = add(root, "b", node());
  b->register_parameter("w2", tied);
  traversal::ModuleSet visited;
  auto got = traversal::managed_param_to_fqn(root, {}, visited, "");
  BOOST_TEST_REQUIRE(got.size() == 3u);
  BOOST_TEST(got[0].second == "p0");
  BOOST_TEST(got[1].second == "b.w2");  // BFS: a, b, then c; the last FQN wins
  BOOST_TEST(got[1].first.impl() == tied.impl());
  BOOST_TEST(got[2].second == "a.c.pc");
  BOOST_TEST(visited.size() == 4u);

  // Modules already visited (an inner unit found earlier in post-order) are not traversed.
  traversal::ModuleSet visited2{c.get()};
  traversal::ParamSet ignored{root->param("p0").impl()};
  auto got2 = traversal::managed_param_to_fqn(a, ignored, visited2, "a");
  BOOST_TEST_REQUIRE(got2.size() == 1u);
  BOOST_TEST(got2[0].second == "a.w");
}

// --- recursive_wrap against a literal recursive transcription of upstream's _recursive_wrap

namespace {

using Call = std::tuple<const nn::Module*, bool, std::int64_t>;

std::pair<ModulePtr, std::int64_t> reference_recursive_wrap(
    const ModulePtr& module, const traversal::WrapDecision& policy, const traversal::WrapOne& wrap,
    const traversal::ModuleSet& ignored, const traversal::ParamSet& ignored_params,
    bool only_wrap_children) {
  std::int64_t nonwrapped = 0;
  for (const auto& p : module->parameters())
    if (!ignored_params.count(p.impl())) nonwrapped += p.numel();
  if (!policy(*module, true, nonwrapped)) return {module, 0};
  std::int64_t total = 0;
  for (const auto& [name, child] : module->named_children()) {
    if (ignored.count(child.get())) continue;
    auto [w, n] = reference_recursive_wrap(child, policy, wrap, ignored, ignored_params, false);
    module->replace_child(name, w);
    total += n;
  }
  std::int64_t remainder = nonwrapped - total;
  if (!only_wrap_children && policy(*module, false, remainder)) return {wrap(module), nonwrapped};
  return {module, total};
}

// A random tree (as built by `seed`), optionally with shared modules and tied parameters. Only
// the tree owns its modules and parameters (`modules` does not hold them), so each object has as
// many owners as slots hold it: the engine's single-owner fast path is exercised as users see it.
struct RandomModel {
  ModulePtr root;
  std::vector<const nn::Module*> modules;  // creation order
};

RandomModel random_model(unsigned seed, bool share_modules, bool tie_params) {
  std::mt19937 rng(seed);
  RandomModel r;
  r.root = node();
  std::vector<ModulePtr> modules{r.root};  // dropped on return
  std::vector<Tensor> params;
  for (int i = 0; i < 40; ++i) {
    auto parent = modules[rng() % modules.size()];
    ModulePtr child;
    if (share_modules && i > 5 && rng() % 6 == 0) {
      child = modules[1 + rng() % (modules.size() - 1)];
      if (child == parent) continue;
      // Avoid cycles: only share modules that are not ancestors (approximation: leaves).
      if (!child->child_slots().empty()) continue;
    } else {
      child = node();
      modules.push_back(child);
      int np = static_cast<int>(rng() % 3);
      for (int k = 0; k < np; ++k) {
        Tensor p;
        if (tie_params && !params.empty() && rng() % 4 == 0)
          p = params[rng() % params.size()];
        else
          p = meta_param(1 + static_cast<std::int64_t>(rng() % 50));
        child->register_parameter(fmt::format("p{}", k), p);
        params.push_back(p);
      }
    }
    parent->register_module(fmt::format("c{}", i), child);
  }
  for (const auto& m : modules) r.modules.push_back(m.get());
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(recursive_wrap_matches_literal_upstream_call_by_call) {
  for (unsigned seed = 1; seed <= 60; ++seed) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool share = variant & 1, tie = variant & 2;
      const std::int64_t threshold = 20 + seed % 60;
      auto run = [&](bool reference) {
        RandomModel model = random_model(seed, share, tie);
        traversal::ModuleSet ignored;
        traversal::ParamSet ignored_params;
        if (seed % 3 == 0 && model.modules.size() > 3) {
          auto* third = const_cast<nn::Module*>(model.modules[3]);
          for (const auto& m : third->modules()) ignored.insert(m.get());
          for (const auto& p : third->parameters()) ignored_params.insert(p.impl());
        }
        std::vector<Call> calls;
        std::vector<const nn::Module*> wrapped;
        traversal::WrapDecision policy = [&](nn::Module& m, bool recurse, std::int64_t n) {
          calls.emplace_back(&m, recurse, n);
          return n >= threshold;
        };
        traversal::WrapOne wrap = [&](const ModulePtr& m) -> ModulePtr {
          wrapped.push_back(m.get());
          return std::make_shared<Wrapped>(m);
        };
        std::int64_t total;
        if (reference) {
          total = reference_recursive_wrap(model.root, policy, wrap, ignored, ignored_params, true)
                      .second;
        } else {
          total = traversal::recursive_wrap(model.root, policy, wrap, ignored, ignored_params, true)
                      .wrapped_numel;
        }
        // Describe calls by module position, since the two runs build separate models.
        std::vector<std::tuple<std::size_t, bool, std::int64_t>> described;
        auto pos = [&](const nn::Module* m) {
          for (std::size_t i = 0; i < model.modules.size(); ++i)
            if (model.modules[i] == m) return i;
          return std::size_t(-1);
        };
        for (const auto& [m, r, n] : calls) described.emplace_back(pos(m), r, n);
        std::vector<std::size_t> wrapped_pos;
        for (auto* m : wrapped) wrapped_pos.push_back(pos(m));
        return std::make_tuple(described, wrapped_pos, total);
      };
      auto expected = run(true);
      auto got = run(false);
      BOOST_TEST_INFO("seed " << seed << " variant " << variant);
      BOOST_TEST((std::get<0>(got) == std::get<0>(expected)));
      BOOST_TEST((std::get<1>(got) == std::get<1>(expected)));
      BOOST_TEST(std::get<2>(got) == std::get<2>(expected));
    }
  }
}

BOOST_AUTO_TEST_CASE(recursive_wrap_tied_parameters_counted_once) {
  // root -> a(Linear-like: w), b(w tied): root sees 10, not 20; each child sees 10.
  auto root = node();
  auto a = add(root, "a", node());
  auto b = add(root, "b", node());
  Tensor w = meta_param(10);
  a->register_parameter("w", w);
  b->register_parameter("w", w);
  std::vector<Call> calls;
  traversal::recursive_wrap(
      root,
      [&](nn::Module& m, bool r, std::int64_t n) {
        calls.emplace_back(&m, r, n);
        return true;
      },
      [](const ModulePtr& m) -> ModulePtr { return std::make_shared<Wrapped>(m); }, {}, {}, true);
  // Upstream's remainder double-counts across siblings: 10 - (10 + 10) = -10 for the root.
  std::vector<Call> expected{{root.get(), true, 10},
                             {a.get(), true, 10},
                             {a.get(), false, 10},
                             {b.get(), true, 10},
                             {b.get(), false, 10}};
  BOOST_TEST((calls == expected));
}

BOOST_AUTO_TEST_CASE(recursive_wrap_errors) {
  auto root = node();
  auto inner = add(root, "x", std::make_shared<Wrapped>(node()));
  auto policy = [](nn::Module&, bool, std::int64_t) { return true; };
  auto wrap = [](const ModulePtr& m) -> ModulePtr { return std::make_shared<Wrapped>(m); };
  BOOST_CHECK_THROW(traversal::recursive_wrap(root, nullptr, wrap, {}, {}), AssertionError);
  BOOST_CHECK_THROW(traversal::recursive_wrap(root, policy, nullptr, {}, {}), AssertionError);
  const std::string cls = "Wrapped";
  try {
    traversal::recursive_wrap(root, policy, wrap, {}, {}, true, &cls);
    BOOST_FAIL("expected AssertionError");
  } catch (const AssertionError& e) {
    BOOST_TEST(std::string(e.what()).rfind("Child module Wrapped(", 0) == 0);
    BOOST_TEST(std::string(e.what()).find("is already wrapped by Wrapped") != std::string::npos);
  }
  // Ignored wrappers are not checked; a wrapper "function" (no class) skips the check.
  traversal::recursive_wrap(root, policy, wrap, {inner.get(), inner->child("inner").get()}, {},
                            true, &cls);
  auto root2 = node();
  add(root2, "x", std::make_shared<Wrapped>(node()));
  traversal::recursive_wrap(root2, policy, wrap, {}, {}, true, nullptr);
}

BOOST_AUTO_TEST_CASE(chain_100000_deep) {
  const std::int64_t depth = 100000;
  auto chain = testing::nested_chain(depth);
  // Post-order names (kept as links: materialised, they would take O(depth^2) memory).
  traversal::PostOrderNamedModules order(chain);
  BOOST_TEST(order.size() == static_cast<std::size_t>(2 * depth));
  BOOST_TEST(order.name(order.size() - 1) == "");
  BOOST_TEST(order.name(order.size() - 2) == "1");
  BOOST_TEST(order.name(order.size() - 3) == "1.1");
  BOOST_TEST(order.name(0) == "0");
  BOOST_TEST(order.name(1) == "1.0");
  BOOST_TEST(order.name(depth - 1).size() == static_cast<std::size_t>(2 * depth - 1));
  // size_based-like policy with a huge threshold: nothing wrapped, nothing recursed.
  int calls = 0;
  auto none = traversal::recursive_wrap(
      chain,
      [&](nn::Module&, bool, std::int64_t n) {
        ++calls;
        BOOST_TEST(n == 20 * depth);
        return n >= 1'000'000'000;
      },
      [](const ModulePtr& m) { return m; }, {}, {}, true);
  BOOST_TEST(calls == 1);
  BOOST_TEST(none.wrapped_numel == 0);
  // Always wrap: every module below the root becomes a wrapper.
  std::int64_t wrapped = 0;
  auto all = traversal::recursive_wrap(
      chain, [](nn::Module&, bool, std::int64_t) { return true; },
      [&](const ModulePtr& m) -> ModulePtr {
        ++wrapped;
        return std::make_shared<Wrapped>(m);
      },
      {}, {}, true);
  BOOST_TEST(wrapped == 2 * depth - 1);
  BOOST_TEST(all.wrapped_numel == 20 * depth);
  BOOST_TEST(traversal::is_wrapper(*chain->child("0")));
  BOOST_TEST(traversal::is_wrapper(*chain->child("1")));
  // Post-order apply over the wrapped chain (now 3 * depth - 1 modules) works too.
  std::int64_t visited = 0;
  traversal::post_order_apply(chain, [&](const ModulePtr&) -> ModulePtr {
    ++visited;
    return nullptr;
  });
  BOOST_TEST(visited == 4 * depth - 1);
  chain.reset();  // destruction of the deep chain must not overflow the stack either
}

BOOST_AUTO_TEST_SUITE_END()
