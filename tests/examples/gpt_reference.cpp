#include "tests/examples/gpt_reference.h"

#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>

#include "tests/support/fixture.h"
#include "tests/support/test_device.h"

namespace fsdp::testing {

const GptReference& gpt_reference() {
  static const GptReference ref = [] {
    GptReference r;
    std::ifstream in(fixture_path("gpt/losses.json"));
    const auto j = nlohmann::json::parse(in);
    const auto& c = j.at("config");
    r.base.model = examples::GPTConfig{.layers = c.at("layers"),
                                       .d_model = c.at("d_model"),
                                       .heads = c.at("heads"),
                                       .seq = c.at("seq"),
                                       .vocab = 256};
    r.base.batch = j.at("batch");
    r.base.steps = j.at("steps");
    std::ifstream data(fixture_path("gpt/" + j.at("data").get<std::string>()), std::ios::binary);
    r.base.data = std::make_shared<const std::string>(std::istreambuf_iterator<char>(data),
                                                      std::istreambuf_iterator<char>());
    r.base.load_path = fixture_path("gpt/" + j.at("init").get<std::string>());
    // FSDP_TEST_DEVICE (tests/support/test_device.h): fake_cuda without an index puts rank r on
    // fake_cuda:r; on cuda every rank shares cuda:0.
    if (test_device_is_fake_cuda()) r.base.device = Device(DeviceType::FakeCUDA);
    if (test_device_type() == DeviceType::CUDA) r.base.device = Device(DeviceType::CUDA, 0);
    for (const auto& [name, run] : j.at("runs").items()) {
      r.losses[name] = run.at("losses").get<std::vector<double>>();
      r.lr[name] = run.at("lr");
    }
    return r;
  }();
  return ref;
}

}  // namespace fsdp::testing
