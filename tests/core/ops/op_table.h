// The ops of tests/fixtures/ops_cases.json by case name, mirroring CASES in
// gen_ops_fixtures.py. Each takes the case's inputs and returns its outputs.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/ops.h"

namespace fsdp::testing {

using OpFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

inline const std::map<std::string, OpFn>& op_table() {
  using V = std::vector<Tensor>;
  static const std::map<std::string, OpFn> table = {
      {"add", [](const V& x) { return V{add(x[0], x[1], 2.0)}; }},
      {"add_bcast", [](const V& x) { return V{x[0] + x[1]}; }},
      {"sub", [](const V& x) { return V{sub(x[0], x[1], 0.5)}; }},
      {"mul", [](const V& x) { return V{x[0] * x[1]}; }},
      {"mul_scalar_tensor", [](const V& x) { return V{x[0] * x[1]}; }},
      {"div", [](const V& x) { return V{x[0] / x[1]}; }},
      {"maximum", [](const V& x) { return V{maximum(x[0], x[1])}; }},
      {"minimum", [](const V& x) { return V{minimum(x[0], x[1])}; }},
      {"add_scalar", [](const V& x) { return V{x[0] + 1.5}; }},
      {"mul_scalar", [](const V& x) { return V{x[0] * -2.5}; }},
      {"div_scalar", [](const V& x) { return V{x[0] / 3.0}; }},
      {"pow3", [](const V& x) { return V{pow(x[0], 3.0)}; }},
      {"pow2", [](const V& x) { return V{pow(x[0], 2.0)}; }},
      {"pow_half", [](const V& x) { return V{pow(x[0], 0.5)}; }},
      {"pow_neg", [](const V& x) { return V{pow(x[0], -1.5)}; }},
      {"neg", [](const V& x) { return V{-x[0]}; }},
      {"exp", [](const V& x) { return V{exp(x[0])}; }},
      {"log", [](const V& x) { return V{log(x[0])}; }},
      {"sqrt", [](const V& x) { return V{sqrt(x[0])}; }},
      {"rsqrt", [](const V& x) { return V{rsqrt(x[0])}; }},
      {"abs", [](const V& x) { return V{abs(x[0])}; }},
      {"where", [](const V& x) { return V{where(x[0], x[1], x[2])}; }},
      {"masked_fill", [](const V& x) { return V{masked_fill(x[0], x[1], -7.0)}; }},
      {"sum_all", [](const V& x) { return V{sum(x[0])}; }},
      {"sum_dim", [](const V& x) { return V{sum(x[0], {1})}; }},
      {"sum_dims_keep",
       [](const V& x) {
         return V{sum(x[0], {0, -1}, true)};
       }},
      {"mean_all", [](const V& x) { return V{mean(x[0])}; }},
      {"mean_dims",
       [](const V& x) {
         return V{mean(x[0], {0, 2})};
       }},
      {"max_all", [](const V& x) { return V{max(x[0])}; }},
      {"max_dim", [](const V& x) { return V{max(x[0], 1).first}; }},
      {"max_dim_keep", [](const V& x) { return V{max(x[0], -1, true).first}; }},
      {"amax",
       [](const V& x) {
         return V{amax(x[0], {0, 2})};
       }},
      {"sum_to",
       [](const V& x) {
         return V{sum_to(x[0], {3, 1})};
       }},
      {"mm", [](const V& x) { return V{mm(x[0], x[1])}; }},
      {"mm_transposed", [](const V& x) { return V{mm(x[0].t(), x[1].t())}; }},
      {"bmm", [](const V& x) { return V{bmm(x[0], x[1])}; }},
      {"matmul_1d_1d", [](const V& x) { return V{matmul(x[0], x[1])}; }},
      {"matmul_2d_1d", [](const V& x) { return V{matmul(x[0], x[1])}; }},
      {"matmul_1d_2d", [](const V& x) { return V{matmul(x[0], x[1])}; }},
      {"matmul_3d_2d", [](const V& x) { return V{matmul(x[0], x[1])}; }},
      {"matmul_3d_1d", [](const V& x) { return V{matmul(x[0], x[1])}; }},
      {"matmul_1d_3d", [](const V& x) { return V{matmul(x[0], x[1])}; }},
      {"matmul_bcast", [](const V& x) { return V{matmul(x[0], x[1])}; }},
      {"linear", [](const V& x) { return V{linear(x[0], x[1], x[2])}; }},
      {"linear_nobias", [](const V& x) { return V{linear(x[0], x[1])}; }},
      {"linear_1d", [](const V& x) { return V{linear(x[0], x[1], x[2])}; }},
      {"view",
       [](const V& x) {
         return V{x[0].view({2, -1, 3})};
       }},
      {"reshape_copy", [](const V& x) { return V{x[0].t().reshape({-1})}; }},
      {"transpose", [](const V& x) { return V{x[0].transpose(0, -1) * 1.0}; }},
      {"permute",
       [](const V& x) {
         return V{x[0].permute({2, 0, 1})};
       }},
      {"unsqueeze", [](const V& x) { return V{x[0].unsqueeze(-2)}; }},
      {"squeeze", [](const V& x) { return V{x[0].squeeze(1)}; }},
      {"expand",
       [](const V& x) {
         return V{x[0].expand({2, -1, 4})};
       }},
      {"flatten", [](const V& x) { return V{x[0].flatten(1)}; }},
      {"narrow", [](const V& x) { return V{x[0].narrow(1, 1, 3)}; }},
      {"select", [](const V& x) { return V{x[0].select(1, -2)}; }},
      {"contiguous", [](const V& x) { return V{contiguous(x[0].t())}; }},
      {"clone", [](const V& x) { return V{clone(x[0])}; }},
      {"cat",
       [](const V& x) {
         return V{cat({x[0], x[1], x[2]}, 1)};
       }},
      {"stack",
       [](const V& x) {
         return V{stack({x[0], x[1]}, 1)};
       }},
      {"split", [](const V& x) { return split(x[0], 2); }},
      {"split_with_sizes",
       [](const V& x) {
         return split_with_sizes(x[0], {1, 3, 2}, 1);
       }},
      {"chunk", [](const V& x) { return chunk(x[0], 3); }},
      {"index_select", [](const V& x) { return V{index_select(x[0], 0, x[1])}; }},
      {"index_select_dim1", [](const V& x) { return V{index_select(x[0], 1, x[1])}; }},
      {"composite",
       [](const V& x) {
         Tensor a = x[0], w = x[1];
         return V{mean(div(exp(matmul(a, w)), sum(mul(a, a), {-1}, true)), {0})};
       }},
  };
  return table;
}

}  // namespace fsdp::testing
