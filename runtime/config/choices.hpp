// choices.hpp: the closed sets of names a config chooses from (data source, optimizer type,
// learning-rate schedule, pipeline schedule, gradient averaging), as enums with one to_string /
// parse pair each.
//
// A config names these as strings; the loader parses each once, where it reads the key, so
// an unknown name is a config_error with did-you-mean at its position and everything after
// the loader holds an enum. Code that acts on a choice switches on it without a default, so
// a new value that some switch forgets is a compiler warning (-Wswitch), not a silent
// fallback to another branch. The strings live only here (and in messages to users).
//
// Graph kinds (actor and wire kinds) are runtime/graph/kinds.hpp, built on the same pattern.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

/// [data] source: the Fashion-MNIST files, or a generated, linearly separable problem.
enum class data_source { fashion_mnist, synthetic, text, npy, csv, tokens, images, npz, safetensors };
/// [optimizer] type.
enum class optimizer_type { sgd, adam, adamw };
/// [optimizer.schedule] type: the learning-rate schedule (runtime/model/lr_schedule.hpp).
enum class lr_schedule_type { constant, step, cosine };
/// [parallel] schedule: GPipe (the loss flushes after M forwards), 1F1B, or ZB-H1 (1F1B's
/// credits, with split backwards whose weight gradients fill idle time).
enum class pipeline_schedule { gpipe, one_f_one_b, zb_h1 };
/// [parallel] averaging and an averager's method: one central averager per layer, a ring
/// all-reduce among one averager per replica (actor messages), or the same wiring with
/// gloo's all-reduce over TCP (actors/averaging/gloo_collective.cpp).
enum class averaging_method { ring, central, gloo };
/// [parallel] averaging = "local_sgd" | "diloco" (Note [local SGD] in actors/averaging/
/// allreduce_averager_actor.cpp): what replicas average, and when. synchronous: the
/// gradients of every step; local_sgd: each replica steps on its own gradients and the
/// parameters are averaged every [parallel] sync_every steps; diloco: likewise, but the
/// average of the replicas' parameter deltas is an outer optimizer's gradient (Note
/// [DiLoCo] in actors/training/optimizer_actor.cpp); async: a parameter server per layer
/// applies each replica's gradients as they arrive, within [parallel] max_staleness (Note
/// [asynchronous server] in actors/training/async_server.cpp).
enum class averaging_rule { synchronous, local_sgd, diloco, async };

/// [run] precision once resolved ("auto" is fp32 or bf16 by the CPU): what the layers that
/// can compute in bf16 compute in (runtime/config/precision.hpp).
enum class numeric_precision { fp32, bf16 };

/// [parallel] balance: how the global batch is split between replicas: evenly, or by
/// weights the config gives (an array, not a name).
enum class replica_balance { even, weights };

/// The name a config writes for each value.
const char* to_string(data_source value);
const char* to_string(optimizer_type value);
const char* to_string(lr_schedule_type value);
const char* to_string(pipeline_schedule value);
const char* to_string(averaging_method value);
const char* to_string(averaging_rule value);
const char* to_string(numeric_precision value);
const char* to_string(replica_balance value);

/// Every value a config may name, in the order messages list them. Specialised for each
/// enum of this file and of runtime/graph/kinds.hpp.
template <class Enum>
struct enum_values;

template <>
struct enum_values<data_source> {
  static constexpr std::array<data_source, 9> all = {
      data_source::fashion_mnist, data_source::synthetic, data_source::text,
      data_source::npy,           data_source::csv,       data_source::tokens,
      data_source::images,        data_source::npz,       data_source::safetensors};
};
template <>
struct enum_values<optimizer_type> {
  static constexpr std::array<optimizer_type, 3> all = {optimizer_type::sgd, optimizer_type::adam,
                                                        optimizer_type::adamw};
};
template <>
struct enum_values<lr_schedule_type> {
  static constexpr std::array<lr_schedule_type, 3> all = {
      lr_schedule_type::constant, lr_schedule_type::step, lr_schedule_type::cosine};
};
template <>
struct enum_values<pipeline_schedule> {
  static constexpr std::array<pipeline_schedule, 3> all = {
      pipeline_schedule::gpipe, pipeline_schedule::one_f_one_b, pipeline_schedule::zb_h1};
};
template <>
struct enum_values<averaging_method> {
  static constexpr std::array<averaging_method, 3> all = {
      averaging_method::ring, averaging_method::central, averaging_method::gloo};
};
template <>
struct enum_values<averaging_rule> {
  static constexpr std::array<averaging_rule, 4> all = {
      averaging_rule::synchronous, averaging_rule::local_sgd, averaging_rule::diloco,
      averaging_rule::async};
};
template <>
struct enum_values<numeric_precision> {
  static constexpr std::array<numeric_precision, 2> all = {numeric_precision::fp32,
                                                           numeric_precision::bf16};
};
/// The names a config may write; weights are written as an array instead.
template <>
struct enum_values<replica_balance> {
  static constexpr std::array<replica_balance, 1> all = {replica_balance::even};
};

/// The value whose to_string() is `text`, or nothing.
template <class Enum>
std::optional<Enum> parse_enum(std::string_view text) {
  for (auto value : enum_values<Enum>::all)
    if (text == to_string(value))
      return value;
  return std::nullopt;
}

/// The names of every value, in enum_values order (for did-you-mean and "expected one of").
template <class Enum>
std::vector<std::string> enum_names() {
  std::vector<std::string> names;
  for (auto value : enum_values<Enum>::all)
    names.emplace_back(to_string(value));
  return names;
}

}  // namespace troupe
