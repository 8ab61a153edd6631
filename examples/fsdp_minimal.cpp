// PyTorch's FSDP tutorial as a C++ program: the process group from however the job was started,
// a model, an auto-wrap policy, FSDP, AdamW, and a training loop printing rank 0's loss.
//   mpirun -np 2 fsdp_minimal                    (or torchrun's RANK, WORLD_SIZE, MASTER_*)
//   fsdp_minimal [RANKS]                         (no launcher: RANKS threads, default 2)
#include <fmt/format.h>
#include <fsdp/fsdp.h>

#include <cstdlib>

using namespace fsdp;

int main(int argc, char** argv) {
  comm::launch(argc > 1 ? std::atoi(argv[1]) : 2, [](std::shared_ptr<comm::ProcessGroup> pg) {
    // The same initial weights on every rank: each thread's and process's generator starts from
    // one seed (or set FSDP's sync_module_states to broadcast rank 0's).
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(16, 64), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(64, 1)});
    auto fsdp_model = FSDP::make(  // a unit for Linear(16, 64) (1000+ parameters), a root
        model,
        {.process_group = pg, .auto_wrap_policy = policies::size_based_auto_wrap_policy(1000)});
    optim::AdamW optimizer(fsdp_model->parameters(),
                           optim::AdamOptions{.lr = 1e-2, .weight_decay = 1e-2});
    Generator data(100 + std::uint64_t(pg->rank()));  // each rank its own batches
    for (int step = 0; step < 20; ++step) {
      Tensor x = randn({32, 16}, {}, &data);
      Tensor loss = mse_loss((*fsdp_model)(x).tensor(), sum(x, {1}, /*keepdim=*/true));
      optimizer.zero_grad();
      loss.backward();  // gradients reduce-scattered to their shards
      optimizer.step();
      if (pg->rank() == 0) fmt::print("step {} loss {:.4f}\n", step, loss.item());
    }
  });
}
