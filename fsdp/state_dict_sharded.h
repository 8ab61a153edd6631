// SHARDED_STATE_DICT: per original parameter (by the unwrapped model's FQN), this rank's piece —
// a 1-D slice of the row-major flattened parameter, with the parameter's global shape and the
// slice's element offset — read from the flat shard without communication. Loading takes pieces
// saved at any world size or sharding strategy and copies into each rank's shard the elements
// it holds, wherever they were saved.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fsdp/fully_sharded_data_parallel.h"

namespace fsdp {

// A piece of one tensor of a state dict.
struct TensorPiece {
  std::string fqn;
  Shape global_shape;
  std::int64_t offset = 0;  // the piece's first element in the flattened tensor
  Tensor local;             // 1-D: the piece's elements, in order
  bool replica = false;     // another rank holds the same piece (a writer may skip it)
};

using ShardedStateDict = std::vector<TensorPiece>;

// This rank's pieces of every parameter (empty where the rank holds no element), then every
// buffer whole (replica on ranks other than 0: buffers are replicated). Copies, unless `copy` is
// false: then views of the shards, valid until the next step (a checkpoint writes them at once).
ShardedStateDict sharded_state_dict(FullyShardedDataParallel& root, bool copy = true);

// Saved pieces by FQN, from any number of ranks; overlapping pieces must agree (any one is read).
class PieceSet {
 public:
  PieceSet() = default;
  explicit PieceSet(const ShardedStateDict& pieces);
  // ValueError when the piece lies outside its global shape or the shape differs from an
  // earlier piece of the same FQN.
  void add(TensorPiece piece);
  // Records that `fqn` exists with `shape` though no piece of it was read (a loader that reads
  // only the pieces its rank needs); ValueError when the shape differs from an earlier one.
  void declare(const std::string& fqn, const Shape& shape);
  bool contains(const std::string& fqn) const { return by_fqn_.count(fqn) > 0; }
  const Shape& global_shape(const std::string& fqn) const;  // KeyError naming it
  std::vector<std::string> keys() const;
  // Fills `dst` (1-D) with elements [begin, begin + dst.numel()) of `fqn`, converting dtype.
  // ValueError naming the FQN and the first element that no piece holds.
  void read(const std::string& fqn, std::int64_t begin, Tensor dst) const;

 private:
  struct Entry {
    Shape shape;
    std::vector<TensorPiece> pieces;  // sorted by offset
  };
  std::map<std::string, Entry> by_fqn_;
};

// Loads each rank's part of every parameter and every buffer from `saved` (no communication).
// Strict: a parameter missing from `saved` is a KeyError naming it, a global shape that differs
// from the model's a ValueError naming the FQN and both shapes, an unknown key a KeyError.
void load_sharded_state_dict(FullyShardedDataParallel& root, const PieceSet& saved);

}  // namespace fsdp
