// tensor_inspect.hpp: how a tensor crosses a node with CAF (its `inspect` overload).
//
// Kept out of tensor.hpp so that the tensor API, and a layer plugin using it, needs no
// CAF. Every translation unit that puts tensors into CAF messages must see this overload
// (include/troupe/messages.hpp includes it), or CAF refuses the type at compile time.
//
// Not here: what the messages are (include/troupe/messages.hpp).
#pragma once

#include <caf/binary_deserializer.hpp>
#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>

#include <cstdint>
#include <string>
#include <type_traits>

#include "troupe/tensor.hpp"

namespace troupe {

namespace detail {
/// A tensor from another process refused because of `why`, as a CAF error
/// (sec::invalid_argument), said on stderr the first few times: CAF drops the message
/// without a word (its log is compiled out), and the run would otherwise wait for it with
/// nothing to say why.
caf::error refused_tensor(std::string why);

/// tensor_header_problem as a CAF error (refused_tensor), none when fine.
inline caf::error validate_tensor_header(const shape_t& shape, std::uint8_t type,
                                         std::uint64_t bytes) {
  auto problem = tensor_header_problem(shape, type, bytes);
  if (problem.empty())
    return caf::error{};
  return refused_tensor(std::move(problem));
}

/// ... of a tensor claiming more bytes than its message holds.
inline caf::error refused_tensor_bytes(std::uint64_t bytes, std::size_t remaining) {
  return refused_tensor("a tensor of " + std::to_string(bytes) + " bytes, but the message " +
                        "holds only " + std::to_string(remaining) + " more");
}

/// The dtype byte's flag of a tensor whose bytes wait in the receiver's shared memory
/// (Note [tensors through shared memory] in runtime/net/shared_memory.cpp).
constexpr std::uint8_t staged_flag = 0x80;
/// True, with its place, if [data, data + bytes) is a slot staged for another node of
/// this machine.
bool staged_place(const void* data, std::size_t bytes, std::uint64_t& key, std::uint64_t& offset);
/// Why a staged tensor of `bytes` at (`key`, `offset`) cannot be taken: not a slot of this
/// process's inboxes waiting with exactly that many bytes; empty if it can. Asked before
/// the tensor is allocated.
std::string check_staged(std::uint64_t key, std::uint64_t offset, std::uint64_t bytes);
/// Copies a staged tensor's bytes out of this process's inbox into `to` and frees the
/// slot; why not (nothing copied), unless it is a slot of this process waiting with them.
std::string take_staged(std::uint64_t key, std::uint64_t offset, std::uint64_t bytes, void* to);

/// While one lives on a thread, the staged tensors loaded there count together against
/// one inbox's bytes (check_staged refuses what would pass them): the tensors of one
/// message, which an honest writer never has more of in flight than its inbox holds. A
/// writer that marks one slot written again as each header is taken cannot make a message
/// of many 40-byte headers allocate an inbox's worth for each. The messages that carry a
/// vector of tensors (weight_grads_msg, params_msg) load them under one; nested, the
/// outermost counts.
class staged_message_scope {
 public:
  staged_message_scope();
  ~staged_message_scope();
  staged_message_scope(const staged_message_scope&) = delete;
  staged_message_scope& operator=(const staged_message_scope&) = delete;

 private:
  bool outermost_;
};
}  // namespace detail

/// Crossing a node: shape, dtype and byte count first, then the raw bytes in one block
/// (CAF-0.17-NOTES.md section 6: element-wise serialisation is 13x slower), or, for a
/// tensor staged in the receiver's shared memory (its dtype byte flagged), where they lie
/// there. The loader validates the header before it allocates. Host byte order on both
/// ends.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor& x) {
  if constexpr (std::is_same<Inspector, caf::serializer>::value) {
    const tensor host = x.on_host();  // waits; a GPU's values come over first
    shape_t shape = host.shape();
    auto type = static_cast<std::uint8_t>(host.type());
    auto bytes = static_cast<std::uint64_t>(host.defined() ? host.bytes() : 0);
    std::uint64_t key = 0, offset = 0;
    if (bytes > 0 && detail::staged_place(host.raw(), bytes, key, offset)) {
      type |= detail::staged_flag;
      return f(shape, type, bytes, key, offset);
    }
    if (auto err = f(shape, type, bytes))
      return err;
    return bytes > 0 ? f.apply_raw(bytes, host.raw()) : caf::error{};
  } else if constexpr (std::is_same<Inspector, caf::deserializer>::value) {
    std::uint8_t type = 0;
    std::uint64_t bytes = 0;
    shape_t shape;
    if (auto err = f(shape, type, bytes))
      return err;
    const bool staged = (type & detail::staged_flag) != 0;
    type &= static_cast<std::uint8_t>(~detail::staged_flag);
    if (auto err = detail::validate_tensor_header(shape, type, bytes))
      return err;
    if (staged) {
      std::uint64_t key = 0, offset = 0;
      if (auto err = f(key, offset))
        return err;
      // Checked before the allocation: 40 bytes from a peer cannot make this node reserve
      // gigabytes, as for the inline bytes below.
      auto why = detail::check_staged(key, offset, bytes);
      if (!why.empty())
        return caf::make_error(caf::sec::invalid_argument, std::move(why));
      auto result = tensor::empty(shape, static_cast<dtype>(type),
                                  device_id{device_type::cpu, 0, this_node()});
      why = detail::take_staged(key, offset, bytes, result.raw());
      if (!why.empty())
        return caf::make_error(caf::sec::invalid_argument, std::move(why));
      x = std::move(result);
      return caf::error{};
    }
    // A remote message is read from its whole payload (CAF's BASP receives all of it
    // first): a header claiming more bytes than are left is refused before the allocation,
    // so 30 bytes from a peer cannot make this node reserve gigabytes.
    if (auto* binary = dynamic_cast<caf::binary_deserializer*>(&f))
      if (bytes > binary->remaining())
        return detail::refused_tensor_bytes(bytes, binary->remaining());
    // A host tensor of this process's node: an actor on its cpu:0 uses it as it is.
    auto result =
        tensor::empty(shape, static_cast<dtype>(type), device_id{device_type::cpu, 0, this_node()});
    if (bytes > 0)
      if (auto err = f.apply_raw(bytes, result.raw()))
        return err;
    x = std::move(result);
    return caf::error{};
  } else {
    // Printing (to_string): shape and dtype, never the values.
    std::string summary = std::string{to_string(x.type())} + shape_to_string(x.shape());
    return f(caf::meta::type_name("tensor"), summary);
  }
}

}  // namespace troupe
