// DeviceType::FakeCUDA's spelling and kind, and the messages of devices this build or this
// machine lacks.
#include <boost/test/unit_test.hpp>
#include <string>

#if FSDP_TEST_HAVE_CUDA
#include <fmt/format.h>

#include "core/cuda/runtime.h"
#endif
#include "core/device.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/stream.h"

using namespace fsdp;

BOOST_AUTO_TEST_SUITE(device)

BOOST_AUTO_TEST_CASE(fake_cuda_parses_and_prints) {
  BOOST_TEST(Device::parse("fake_cuda") == Device(DeviceType::FakeCUDA));
  BOOST_TEST(Device::parse("fake_cuda:3") == Device(DeviceType::FakeCUDA, 3));
  BOOST_TEST(Device(DeviceType::FakeCUDA).str() == "fake_cuda");
  BOOST_TEST(Device(DeviceType::FakeCUDA, 1).str() == "fake_cuda:1");
  BOOST_TEST(Device::parse("cuda:2") == Device(DeviceType::CUDA, 2));
  for (const char* bad : {"fake_cuda:", "fake_cuda:-1", "fake_cuda:1x", "fake_cud", "cuda:"}) {
    BOOST_CHECK_EXCEPTION(Device::parse(bad), ValueError, [&](const ValueError& e) {
      return std::string(e.what()) == "unknown device '" + std::string(bad) +
                                          "' (expected cpu, meta, cuda, cuda:N, fake_cuda or "
                                          "fake_cuda:N)";
    });
  }
}

BOOST_AUTO_TEST_CASE(accelerators_are_cuda_and_fake_cuda) {
  BOOST_TEST(Device(DeviceType::FakeCUDA, 0).is_accelerator());
  BOOST_TEST(Device(DeviceType::CUDA, 0).is_accelerator());
  BOOST_TEST(!kCPU.is_accelerator());
  BOOST_TEST(!kMeta.is_accelerator());
  BOOST_TEST(Device(DeviceType::FakeCUDA).is_fake_cuda());
  // "fake_cuda" is device 0 to streams and storages.
  BOOST_TEST(stream_device(Device(DeviceType::FakeCUDA)) == Device(DeviceType::FakeCUDA, 0));
  BOOST_TEST(stream_device(kCPU) == kCPU);
}

BOOST_AUTO_TEST_CASE(a_device_this_build_lacks_is_named_with_how_to_get_it) {
  BOOST_CHECK_EXCEPTION(device_synchronize(kMeta), RuntimeError, [](const RuntimeError& e) {
    return std::string(e.what()) == "meta: meta tensors have no storage or streams";
  });
#if !FSDP_TEST_HAVE_CUDA
  const Device cuda(DeviceType::CUDA, 0);
  BOOST_CHECK_EXCEPTION(allocator_for(cuda), RuntimeError, [](const RuntimeError& e) {
    return std::string(e.what()) ==
           "no allocator for device cuda:0: this build has no CUDA device support (configure "
           "with -Dcuda=enabled)";
  });
  BOOST_CHECK_EXCEPTION(new_stream(cuda), RuntimeError, [](const RuntimeError& e) {
    return std::string(e.what()) ==
           "cuda:0: this build has no CUDA device support (configure with -Dcuda=enabled)";
  });
#endif
}

// A CUDA build registers the device whether or not the machine has one; a device the machine
// lacks is one line naming it and what the machine has (core/cuda/devices.h).
#if FSDP_TEST_HAVE_CUDA
BOOST_AUTO_TEST_CASE(cuda_devices_the_machine_lacks_are_named_with_what_it_has) {
  BOOST_TEST(allocator_for(Device(DeviceType::CUDA, 0))->name() == "cuda caching");
  std::string why;
  const int count = cuda::device_count(&why);
  if (count == 0) {
    for (const Device d : {Device(DeviceType::CUDA), Device(DeviceType::CUDA, 2)}) {
      const std::string expected = fmt::format("{}: no CUDA device on this machine ({})",
                                               d.index < 0 ? "cuda:0" : d.str(), why);
      BOOST_CHECK_EXCEPTION(new_stream(d), RuntimeError,
                            [&](const RuntimeError& e) { return e.what() == expected; });
      BOOST_CHECK_EXCEPTION(Storage(8, d), RuntimeError,
                            [&](const RuntimeError& e) { return e.what() == expected; });
    }
    return;
  }
  const Device beyond(DeviceType::CUDA, count);
  const std::string has = count == 1
                              ? "1 CUDA device, cuda:0"
                              : fmt::format("{} CUDA devices, cuda:0 to cuda:{}", count, count - 1);
  const std::string expected =
      fmt::format("{}: no such device (this machine has {})", beyond.str(), has);
  BOOST_CHECK_EXCEPTION(new_stream(beyond), ValueError,
                        [&](const ValueError& e) { return e.what() == expected; });
  BOOST_CHECK_EXCEPTION(Storage(8, beyond), ValueError,
                        [&](const ValueError& e) { return e.what() == expected; });
  BOOST_TEST(new_stream(Device(DeviceType::CUDA, 0)).id >= 1u);
}
#endif

// Registered on first use when built, one line naming the option when not.
BOOST_AUTO_TEST_CASE(fake_cuda_is_there_exactly_when_built) {
  const Device d(DeviceType::FakeCUDA, 0);
#if FSDP_TEST_HAVE_FAKE_CUDA
  BOOST_TEST(allocator_for(d)->name() == "fake_cuda caching");
  BOOST_TEST(new_stream(d).id >= 1u);
#else
  const std::string why = "this build has no fake_cuda device (configure with -Dfake_cuda=enabled)";
  BOOST_CHECK_EXCEPTION(allocator_for(d), RuntimeError, [&](const RuntimeError& e) {
    return e.what() == "no allocator for device fake_cuda:0: " + why;
  });
  BOOST_CHECK_EXCEPTION(new_stream(d), RuntimeError,
                        [&](const RuntimeError& e) { return e.what() == "fake_cuda:0: " + why; });
  BOOST_CHECK_EXCEPTION(Storage(8, d), RuntimeError, [&](const RuntimeError& e) {
    return e.what() == "no allocator for device fake_cuda:0: " + why;
  });
#endif
}

BOOST_AUTO_TEST_SUITE_END()
