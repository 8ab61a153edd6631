// torch.optim.Adam and AdamW: adaptive moment estimation with bias correction; Adam adds
// weight decay to the gradient (L2), AdamW decays the parameter directly (decoupled).
#pragma once

#include <utility>

#include "core/optim/optimizer.h"

namespace fsdp::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;

  void validate() const;                         // ValueError with torch's messages
  std::map<std::string, double> to_map() const;  // betas as "beta1", "beta2"
  static AdamOptions from_map(const std::map<std::string, double>& m);
};

// AdamW's options: Adam's with weight_decay 1e-2 by default.
struct AdamWOptions : AdamOptions {
  AdamWOptions() { weight_decay = 1e-2; }
  AdamWOptions(const AdamOptions& o) : AdamOptions(o) {}  // NOLINT: explicit values kept
  static AdamWOptions from_map(const std::map<std::string, double>& m) {
    return AdamWOptions(AdamOptions::from_map(m));
  }
};

// State per parameter: step, exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad).
class Adam : public OptimizerWith<AdamOptions> {
 public:
  explicit Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  explicit Adam(std::vector<ParamGroup<AdamOptions>> groups);
  void step() override;

 protected:
  bool counts_steps() const override { return true; }
};

class AdamW : public OptimizerWith<AdamWOptions> {
 public:
  explicit AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});
  explicit AdamW(std::vector<ParamGroup<AdamWOptions>> groups);
  void step() override;

 protected:
  bool counts_steps() const override { return true; }
};

}  // namespace fsdp::optim
