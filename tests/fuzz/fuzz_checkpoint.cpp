// fuzz_checkpoint.cpp: libFuzzer harness for the checkpoint reader (issue 12): the bytes
// as a safetensors file (parse_safetensors, then every tensor's values read back) and as a
// checkpoint's manifest.json (manifest_from_json).
//
// A user_error (exit 2 in the CLI) is the right answer to bad input; anything else that
// escapes, a crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/checkpoint/manifest.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "troupe/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto file = troupe::parse_safetensors(data, size, "fuzz.safetensors");
    for (const auto& entry : file.entries())
      if (entry.dtype == troupe::safetensors_dtype::f32)
        (void)file.values<float>(entry.name);
  } catch (const troupe::user_error&) {
  }
  try {
    (void)troupe::manifest_from_json(std::string(reinterpret_cast<const char*>(data), size),
                                     "fuzz/manifest.json");
  } catch (const troupe::user_error&) {
  }
  return 0;
}
