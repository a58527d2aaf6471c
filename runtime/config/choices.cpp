// choices.cpp: the names of the config's enums (choices.hpp). Switches without a default:
// a value added to an enum and not named here is a -Wswitch warning.
#include "runtime/config/choices.hpp"

#include "troupe/error.hpp"

namespace troupe {

const char* to_string(data_source value) {
  switch (value) {
    case data_source::fashion_mnist:
      return "fashion-mnist";
    case data_source::synthetic:
      return "synthetic";
    case data_source::text:
      return "text";
    case data_source::npy:
      return "npy";
    case data_source::csv:
      return "csv";
    case data_source::tokens:
      return "tokens";
    case data_source::images:
      return "images";
    case data_source::npz:
      return "npz";
    case data_source::safetensors:
      return "safetensors";
  }
  TROUPE_CHECK(false, "data_source " << static_cast<int>(value));
  return "";
}

const char* to_string(optimizer_type value) {
  switch (value) {
    case optimizer_type::sgd:
      return "sgd";
    case optimizer_type::adam:
      return "adam";
    case optimizer_type::adamw:
      return "adamw";
  }
  TROUPE_CHECK(false, "optimizer_type " << static_cast<int>(value));
  return "";
}

const char* to_string(lr_schedule_type value) {
  switch (value) {
    case lr_schedule_type::constant:
      return "constant";
    case lr_schedule_type::step:
      return "step";
    case lr_schedule_type::cosine:
      return "cosine";
  }
  TROUPE_CHECK(false, "lr_schedule_type " << static_cast<int>(value));
  return "";
}

const char* to_string(pipeline_schedule value) {
  switch (value) {
    case pipeline_schedule::gpipe:
      return "gpipe";
    case pipeline_schedule::one_f_one_b:
      return "1f1b";
    case pipeline_schedule::zb_h1:
      return "zb-h1";
  }
  TROUPE_CHECK(false, "pipeline_schedule " << static_cast<int>(value));
  return "";
}

const char* to_string(averaging_method value) {
  switch (value) {
    case averaging_method::ring:
      return "ring";
    case averaging_method::central:
      return "central";
    case averaging_method::gloo:
      return "gloo";
  }
  TROUPE_CHECK(false, "averaging_method " << static_cast<int>(value));
  return "";
}

const char* to_string(averaging_rule value) {
  switch (value) {
    case averaging_rule::synchronous:
      return "synchronous";
    case averaging_rule::local_sgd:
      return "local_sgd";
    case averaging_rule::diloco:
      return "diloco";
    case averaging_rule::async:
      return "async";
  }
  TROUPE_CHECK(false, "averaging_rule " << static_cast<int>(value));
  return "";
}

const char* to_string(numeric_precision value) {
  switch (value) {
    case numeric_precision::fp32:
      return "fp32";
    case numeric_precision::bf16:
      return "bf16";
  }
  TROUPE_CHECK(false, "numeric_precision " << static_cast<int>(value));
  return "";
}

const char* to_string(replica_balance value) {
  switch (value) {
    case replica_balance::even:
      return "even";
    case replica_balance::weights:
      return "weights";
  }
  TROUPE_CHECK(false, "replica_balance " << static_cast<int>(value));
  return "";
}

}  // namespace troupe
