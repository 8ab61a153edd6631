// FileStore: one file per key in a directory every rank can see (a shared filesystem or /tmp on
// one host). Values are written to a temporary name and renamed, so readers never see half a file.
#pragma once

#include <string>

#include "comm/store/store.h"

namespace fsdp::comm {

class FileStore final : public Store {
 public:
  // The directory is created if missing. Rank 0 claims `<dir>/<prefix>.owner` and fails with a
  // clear error when it already exists: the path and prefix are in use by another (or an earlier,
  // crashed) job.
  FileStore(std::string directory, std::string prefix, int rank);
  void set(const std::string& key, const std::vector<char>& value) override;
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  std::string describe() const override;

 private:
  std::string path_of(const std::string& key) const;

  std::string directory_;
  std::string prefix_;
};

}  // namespace fsdp::comm
