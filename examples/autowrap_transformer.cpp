// The README's auto-wrap example: torch.nn.Transformer() wrapped with ModuleWrapPolicy over a
// fake 8-rank group. Construction only (a fake group moves no data, so nothing is trained here;
// examples/train_gpt trains). Prints the FSDP units, as PyTorch would create them.
#include <fmt/format.h>
#include <fsdp/comm/fake/fake_process_group.h>
#include <fsdp/fsdp.h>

int main() {
  auto model = std::make_shared<fsdp::nn::Transformer>();  // torch.nn.Transformer(), same FQNs
  fsdp::WrapperOptions opts;
  opts.process_group = std::make_shared<fsdp::comm::FakeProcessGroup>(0, 8);
  auto policy = std::make_shared<fsdp::policies::ModuleWrapPolicy>(
      fsdp::nn::ClassSet{"TransformerEncoderLayer", "TransformerDecoderLayer"});
  opts.auto_wrap_policy = fsdp::policies::AutoWrapPolicy(policy);
  auto wrapped = fsdp::FullyShardedDataParallel::make(model, opts);  // root + 12 layer units

  int units = 0;
  for (const auto& [name, m] : wrapped->named_modules()) {
    if (!m->isinstance("FullyShardedDataParallel")) continue;
    ++units;
    const std::string fqn = fsdp::clean_tensor_name(name);  // without _fsdp_wrapped_module
    fmt::print("FSDP unit {:<24} rank {} of {}\n", fqn.empty() ? "(root)" : fqn,
               std::static_pointer_cast<fsdp::FullyShardedDataParallel>(m)->rank(),
               std::static_pointer_cast<fsdp::FullyShardedDataParallel>(m)->world_size());
  }
  fmt::print("{} units\n", units);
  return units == 13 ? 0 : 1;
}
