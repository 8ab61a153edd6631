// The data order of examples/train_gpt (issue 10, item 9), exact so that N ranks x batch B see
// what one rank with batch N*B sees, and PyTorch's reference (train_gpt_ref.py) sees the same.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "examples/token_data.h"

namespace fsdp::examples {

struct TokenBatch {
  Tensor inputs, targets;  // [batch, T] int64 each (token ids; bytes: 0..255)
};

// G = batch*world sequences per step; sequence j of step i starts at token
// ((i*G + j)*T) mod (n - T - 1); inputs are tokens [o, o+T), targets [o+1, o+T+1);
// rank r takes sequences [r*batch, (r+1)*batch). Steps count from 0.
TokenBatch gpt_batch(const TokenData& data, std::int64_t step, std::int64_t batch, int world,
                     int rank, std::int64_t seq);
// The same over a text's bytes.
TokenBatch gpt_batch(const std::string& bytes, std::int64_t step, std::int64_t batch, int world,
                     int rank, std::int64_t seq);

}  // namespace fsdp::examples
