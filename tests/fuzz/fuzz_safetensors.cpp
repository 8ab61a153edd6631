// libFuzzer target: the safetensors reader (core/io/safetensors.h) on arbitrary bytes. A damaged
// file must be a ValueError naming it; anything else escaping, a crash or a sanitizer report is
// a bug. Build with -Dfuzzers=true (clang), or, where clang cannot compile core/ (Debian's
// clang 14 lacks lambda captures of structured bindings), against a GCC build's core libraries:
//   clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I. \
//     -I/usr/include/x86_64-linux-gnu/openblas-pthread tests/fuzz/fuzz_safetensors.cpp \
//     core/io/safetensors.cpp build/core/libfsdp_core.a build/core/libfsdp_memory_stats.a \
//     -lfmt -lopenblas -pthread -o fuzz_safetensors
// FSDP_FUZZ_SEED_DIR=DIR writes the valid file of safetensors_seed.h into DIR to start from:
//   FSDP_FUZZ_SEED_DIR=corpus ASAN_OPTIONS=detect_container_overflow=0 ./fuzz_safetensors \
//     -max_total_time=300 -dict=tests/fuzz/safetensors.dict corpus
// (container-overflow checks off: the GCC-built core is not instrumented.)
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/io/safetensors.h"
#include "tests/fuzz/safetensors_seed.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("FSDP_FUZZ_SEED_DIR"))
    std::ofstream(std::string(dir) + "/seed.safetensors", std::ios::binary)
        << fsdp::fuzz::safetensors_seed();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto f = fsdp::io::parse_safetensors(bytes, "input.safetensors");
    for (const auto& [name, t] : f.tensors)
      if (t.nbytes() > size) std::abort();  // read more bytes than there are
  } catch (const fsdp::ValueError& e) {
    if (std::strstr(e.what(), "input.safetensors") == nullptr) std::abort();
  }
  return 0;
}
