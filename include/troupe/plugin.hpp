// plugin.hpp: what makes a shared library a troupe plugin, and loading one (public facade).
//
// A plugin is a shared library built against the installed troupe package. It registers
// what it adds with the usual one-line registrations (TROUPE_REGISTER_LAYER in
// troupe/layer.hpp, TROUPE_REGISTER_ACTOR_KIND in troupe/actor_kind.hpp,
// TROUPE_REGISTER_KERNEL in troupe/kernel.hpp) and says once, anywhere in its sources,
// that it is a troupe plugin:
//
//     TROUPE_PLUGIN("my_layers");
//
// which exports the name, the ABI version it was built against and the function that
// hands over its registrations. Inside a plugin the registration lines only record what
// they would register (Note [plugin registrations] in troupe/registration.hpp).
// load_plugin() opens the library and checks, in order: that the file exists, that it is
// a troupe plugin (exports the symbols), that its ABI version is this troupe's, and that
// nothing it registers clashes with a name already registered or with another of its
// own; only then does it register everything. Each failure (a registration that throws
// too) is a user_error that says which and what to do, and leaves nothing registered (the
// library is closed).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "troupe/registration.hpp"

/// Bumped whenever a change to troupe's headers breaks plugins built against older ones.
/// 2: registrations inside a plugin are deferred to troupe_plugin_register; layer::forward
/// takes its output as a const tensor&; events share their stream's progress.
/// 3: the public facade (include/troupe/); a custom actor kind's factory takes an
/// actor_spawn; layer_settings is a troupe::settings.
/// 4: layer gains the optional split backward (splits_backward, backward_input,
/// backward_weight); stream gains the idle lane.
/// 5: layer_context gains the key of a layer's randomness (seed, step, layer,
/// first_sample); ops.hpp gains window, normalisation, attention and dropout ops.
/// 7: stream and stream_progress gain the idle lane's look-ahead (expect, estimates);
/// job_label gains source; device_actor gains its source id.
/// 8: device_actor gains send_written (what it holds back for other nodes).
/// 9: the narrow facade: a stream is opaque (its state and backends are the runtime's:
/// stream_progress leaves the facade, stream::gpu() becomes the runtime's gpu_queue_of);
/// ring_msg, shard_msg and the network atoms leave it; shared-memory posting and tensor
/// serialisation move to troupe/detail/. Changes inside the runtime no longer change the
/// layout of a public class.
/// 10: losses are registered kinds (troupe/loss.hpp, TROUPE_REGISTER_LOSS); softmax_xent takes
/// xent_options and writes its sums, accuracy counts in a float and skips an ignored label;
/// ops.hpp gains mse_loss, l1_loss, huber_loss and bce_with_logits; labels_msg gains
/// global_terms, loss_report_msg carries terms and metric sums instead of correct.
/// 11: failure_msg gains bad_input (a data_error in an actor or a device's job ends the run
/// with exit 2, as one before it starts does).
/// 12: settings records what its accessors declared (declared(): keys, types, defaults,
/// ranges), for check-layer.
/// 13: kernels::context gains the CPU GEMM's library (cpu_gemm); device_options gains it;
/// dtype gains bf16 (tensor::bf16()); ops.hpp gains gemm_bf16, to_bf16 and from_bf16; layer
/// gains bf16_parameters ([run] precision = "bf16").
/// 14: trace::event_type gains part (a member layer's span inside a fused job).
/// 15: layer gains activations(), input_dtype and output_dtype (bf16 activations between
/// layers, bf16_flow); ops.hpp gains the bf16 relu and max pooling ops.
/// 16: device_actor's sends to other nodes pass through the emulated link ([cluster] link).
/// 17: layer_context gains replica; stream gains sent_to_nodes().
#define TROUPE_ABI_VERSION 17

namespace troupe {

/// Loads one plugin; `path` as given (relative to the working directory). Loading the same
/// file twice is a no-op; loading a file that failed before fails again with the same
/// message, without opening it again. A failed load, whichever way it fails, leaves nothing
/// registered (even by a library without TROUPE_PLUGIN, whose lines register inside dlopen)
/// and closes the library.
/// Throws user_error.
void load_plugin(const std::string& path);

/// The plugins loaded so far (their TROUPE_PLUGIN names and paths).
std::vector<std::pair<std::string, std::string>> loaded_plugins();

}  // namespace troupe

/// Marks a shared library as a troupe plugin named `name` (once per plugin).
#define TROUPE_PLUGIN(name) TROUPE_DETAIL_PLUGIN(name, TROUPE_ABI_VERSION)

/// TROUPE_PLUGIN with an explicit ABI version (tests write a mismatching one).
#define TROUPE_DETAIL_PLUGIN(name, abi_version)                                         \
  extern "C" __attribute__((visibility("hidden"))) const char troupe_plugin_marker = 1; \
  extern "C" __attribute__((visibility("default"))) int troupe_plugin_abi_version() {   \
    return abi_version;                                                                 \
  }                                                                                     \
  extern "C" __attribute__((visibility("default"))) const char* troupe_plugin_name() {  \
    return name;                                                                        \
  }                                                                                     \
  extern "C" __attribute__((visibility("default"))) void troupe_plugin_register(        \
      std::vector<::troupe::detail::deferred_registration>* out) {                      \
    *out = ::troupe::detail::deferred_registrations();                                  \
  }
