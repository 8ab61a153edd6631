#include "examples/gpt_data.h"

#include "core/error.h"

namespace fsdp::examples {

TokenBatch gpt_batch(const TokenData& data, std::int64_t step, std::int64_t batch, int world,
                     int rank, std::int64_t seq) {
  FSDP_CHECK(seq > 0 && batch > 0 && step >= 0, ValueError,
             "gpt_batch: need seq > 0, batch > 0 and step >= 0, got seq {} batch {} step {}", seq,
             batch, step);
  FSDP_CHECK(world > 0 && rank >= 0 && rank < world, ValueError,
             "gpt_batch: rank {} is outside world size {}", rank, world);
  const std::int64_t len = data.size();
  FSDP_CHECK(len > seq + 1, ValueError,
             "gpt_batch: the data has {} {}; sequences of {} need more than seq + 1 = {}", len,
             data.unit(), seq, seq + 1);
  using u128 = unsigned __int128;  // (i*G + j)*T overflows 64 bits for long runs on big files
  const u128 starts = static_cast<u128>(len - seq - 1);
  const u128 per_step = static_cast<u128>(batch) * static_cast<u128>(world);
  TokenBatch out{empty({batch, seq}, DType::Int64), empty({batch, seq}, DType::Int64)};
  auto* in = out.inputs.data<std::int64_t>();
  auto* tg = out.targets.data<std::int64_t>();
  for (std::int64_t b = 0; b < batch; ++b) {
    const u128 j = static_cast<u128>(rank) * static_cast<u128>(batch) + static_cast<u128>(b);
    const auto o = static_cast<std::size_t>(
        ((static_cast<u128>(step) * per_step + j) * static_cast<u128>(seq)) % starts);
    for (std::int64_t k = 0; k < seq; ++k) {
      *in++ = data[static_cast<std::int64_t>(o) + k];
      *tg++ = data[static_cast<std::int64_t>(o) + k + 1];
    }
  }
  return out;
}

TokenBatch gpt_batch(const std::string& bytes, std::int64_t step, std::int64_t batch, int world,
                     int rank, std::int64_t seq) {
  return gpt_batch(TokenData(std::make_shared<const std::string>(bytes)), step, batch, world, rank,
                   seq);
}

}  // namespace fsdp::examples
