// The plan as JSON for scripts (fields documented in tools/README.md), streamed.
#include <fmt/format.h>

#include <algorithm>

#include "policies/sharding_strategy_names.h"
#include "tools/plan/format.h"
#include "tools/plan/json_writer.h"

namespace fsdp::plan {

namespace {

void memory_fields(JsonOut& j, const RankMemory& m) {
  j.field("params_bytes", m.params);
  j.field("grads_bytes", m.grads);
  j.field("optimizer_bytes", m.optimizer);
  j.field("total_bytes", m.total());
}

void json_into(const Plan& plan, JsonOut& j) {
  const auto& o = plan.options;
  j.open('{');
  j.field("format", "fsdp-plan/1");
  j.key("config");
  j.open('{');
  j.field("policy", plan.policy_str);
  j.field("world_size", o.world_size);
  j.field("sharding", policies::strategy_name(o.sharding));
  j.field("effective_sharding", policies::strategy_name(plan.sharding));
  j.field("shard_group_size", plan.shard_group_size);
  j.field("mixed_precision", o.mixed_precision);
  j.field("param_dtype", o.mixed_precision ? std::string(dtype_name(o.mp_dtype)) : "");
  j.field("use_orig_params", o.use_orig_params);
  j.strings("ignored_modules", o.ignore, true);
  j.field("optimizer", "Adam");
  j.close('}');
  j.key("model");
  j.open('{');
  j.field("root_type", plan.root->type_name());
  j.field("modules", plan.num_modules);
  j.field("numel", plan.model_numel);
  j.field("param_bytes", plan.model_param_bytes);
  j.field("ignored_numel", plan.ignored_numel);
  j.close('}');
  j.key("units");
  j.open('[');
  for (const auto& u : plan.units) {
    j.open('{');
    j.field("index", u.index);
    j.field("fqn", plan.unit_fqn(u));
    j.field("type", u.type);
    j.key("parent");
    if (u.parent < 0)
      j.null();
    else
      j.value(u.parent);
    j.begin_list("params");
    for (const auto& p : u.params) j.item(plan.param_fqn(p));
    j.end_list();
    j.field("numel", u.numel);
    j.field("trainable_numel", u.trainable_numel);
    j.key("bytes_per_dtype");
    j.open('{');
    for (const auto& [d, b] : u.bytes_per_dtype) j.field(std::string(dtype_name(d)), b);
    j.close('}');
    j.field("sharding", policies::strategy_name(u.sharding));
    j.field("mixed_precision", u.mixed_precision);
    j.field("flat_numel", u.flat_numel);
    j.field("shard_numel", u.shard_numel);
    j.field("padded_numel", u.padded_numel);
    j.field("padding", u.padding);
    j.key("per_rank");
    j.open('{');
    memory_fields(j, u.per_rank);
    j.close('}');
    j.field("unsharded_bytes", u.unsharded_bytes);
    j.field("unsharded_grad_bytes", u.unsharded_grad_bytes);
    j.field("all_gathers_per_step", u.all_gathers_per_step);
    j.field("all_gather_bytes", u.all_gather_bytes);
    j.field("reduce_scatter_bytes", u.reduce_scatter_bytes);
    j.field("all_reduce_bytes", u.all_reduce_bytes);
    j.close('}');
  }
  j.close(']');
  const auto& t = plan.totals;
  j.key("per_rank");
  j.open('{');
  memory_fields(j, t.per_rank);
  j.field("peak_unsharded_param_bytes", t.peak_unsharded_param_bytes);
  j.field("peak_unsharded_grad_bytes", t.peak_unsharded_grad_bytes);
  j.field("peak_bytes", t.peak_bytes);
  if (const auto& a = plan.activations) {
    j.field("activation_bytes", t.activation_bytes);
    j.field("peak_with_activations_bytes", t.peak_with_activations_bytes);
    j.key("activations");
    j.open('{');
    j.field("batch", a->batch);
    j.field("seq", a->seq);
    j.key("by_type");
    j.open('{');
    for (const auto& [type, bytes] : a->by_type) j.field(type, bytes);
    j.close('}');
    j.strings("assumed", a->assumed, false);
    j.strings("not_estimated", a->not_estimated, false);
    j.close('}');
  }
  j.close('}');
  j.key("per_step");
  j.open('{');
  j.field("all_gather_bytes", t.all_gather_bytes);
  j.field("reduce_scatter_bytes", t.reduce_scatter_bytes);
  j.field("all_reduce_bytes", t.all_reduce_bytes);
  j.close('}');
  j.strings("warnings", plan.warnings, false);
  j.close('}');
  j.raw("\n");
}

}  // namespace

std::string format_json(const Plan& plan) {
  JsonOut j;
  json_into(plan, j);
  return j.str();
}

bool write_json(const Plan& plan, std::FILE* out) {
  JsonOut j(out);
  json_into(plan, j);
  return j.flush();
}

}  // namespace fsdp::plan
