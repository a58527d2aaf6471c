// safetensors_arrays.cpp: safetensors tensors as arrays of a data set (safetensors_arrays.hpp).
#include "runtime/checkpoint/safetensors_arrays.hpp"

#include "runtime/base/limits.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "troupe/error.hpp"

namespace troupe {

npy_array safetensors_array(const std::string& path, const std::string& name) {
  const auto file = read_safetensors_header(path);
  const auto& entry = file.at(name);  // or a data_error naming the tensors it has
  npy_header header;
  switch (entry.dtype) {
    case safetensors_dtype::f32: header.type = npy_type::f32; break;
    case safetensors_dtype::f64: header.type = npy_type::f64; break;
    case safetensors_dtype::i32: header.type = npy_type::i32; break;
    case safetensors_dtype::i64: header.type = npy_type::i64; break;
    case safetensors_dtype::bf16:
      throw data_error(quote_user_path(path) + " tensor " + quote_user_text(name) +
                       " is BF16; data is read as F32, F64, I32 or I64 (in PyTorch: .float())");
  }
  header.item_bytes = static_cast<std::int64_t>(size_of(entry.dtype));
  header.shape.assign(entry.shape.begin(), entry.shape.end());
  header.elements = 1;
  for (const auto d : header.shape)
    header.elements *= d;  // the reader checked the product against the data
  header.data_offset = static_cast<std::int64_t>(file.data_start() + entry.begin);
  const auto label = quote_user_path(path) + " tensor " + quote_user_text(name);
  // Messages name a shape's problems at "base + 8" (a .npy's header): here, the tensor's data.
  const auto base = header.data_offset - 8;
  return npy_array{path, std::move(header), label, base};
}

}  // namespace troupe
