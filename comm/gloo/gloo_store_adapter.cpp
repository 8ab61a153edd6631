#include "comm/gloo/gloo_store_adapter.h"

namespace fsdp::comm {

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, data);
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  return store_->get(key, timeout_);
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  store_->wait(keys, timeout_);
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds&) {
  store_->wait(keys, timeout_);  // ours, not gloo's 30 s default
}

}  // namespace fsdp::comm
