// loss.hpp: the loss interface and the loss registry (troupe's public facade).
//
// A loss kind is what the loss actor at the end of each replica computes: it compares the
// model's output (rows, width) with the micro-batch's targets, writes the loss's sums and
// its metrics' sums (Note [loss sums] in troupe/ops.hpp) and the output's gradient, on the
// actor's device, through kernels. The loss actor does the rest: pairing outputs with
// targets, the scale 1 / (the global batch's terms), the GPipe flush, the reports. The
// built-in kinds (actors/losses/) use exactly this interface and registration; so do
// plugins. A config names one: `[model] loss = "mse"`, or with settings
// `loss = { type = "huber", delta = 0.5 }`.
//
//     class log_cosh final : public troupe::loss_function { ... };
//     TROUPE_REGISTER_LOSS("log_cosh", "log(cosh(x - y))", [](troupe::loss_settings& s) {
//       return std::make_unique<log_cosh>(s);
//     });
//
// No CAF here (a plugin compiles none of it); kernels come from troupe/kernel.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "troupe/kernel.hpp"
#include "troupe/ops.hpp"
#include "troupe/registration.hpp"
#include "troupe/settings.hpp"

namespace troupe {

/// What a loss compares the model's output with.
enum class target_kind : std::uint8_t {
  class_ids,  // one int32 class index a row; the output's width is the number of classes
  values,     // float32 targets of the output's shape (regression; 0/1 for binary labels)
};

/// A number a loss reports beside itself: its sum over a batch (a sums[] entry after the
/// loss and the term count) divided by the terms, and its square root when `root`.
struct loss_metric {
  std::string name;               // "accuracy", "rmse", "mae": a key of the metrics lines
  bool root = false;              // RMSE: sqrt(sum of squares / terms)
  bool higher_is_better = false;  // accuracy: true; errors: false
};

/// What a loss kind is, once its settings are read.
struct loss_spec {
  target_kind targets = target_kind::class_ids;
  /// class_ids: rows labelled this count for nothing (kernels::no_ignore_index: none), and
  /// the global batch's terms leave them out (a padded token's position).
  std::int32_t ignore_index = kernels::no_ignore_index;
  std::vector<loss_metric> metrics;  // at most loss_job::max_metrics
};

/// One loss job: device pointers of the loss actor's device, valid while compute runs (a
/// CUDA kernel it enqueues may run later, in stream order; the actor keeps them alive).
struct loss_job {
  static constexpr int max_metrics = 2;
  std::int64_t rows = 0;   // samples, or every position of every sample
  std::int64_t width = 0;  // classes or outputs a row
  const float* output = nullptr;                  // (rows, width): logits or predictions
  const std::int32_t* class_ids = nullptr;        // (rows), target_kind::class_ids
  const float* values = nullptr;                  // (rows, width), target_kind::values
  float grad_scale = 0;                           // 1 / the global batch's terms
  /// (2 + max_metrics): loss sum, terms, then one sum a metric (Note [loss sums]); zero
  /// on entry on the CPU; a CUDA kernel writes every entry it reports (memset first).
  float* sums = nullptr;
  float* doutput = nullptr;  // (rows, width): grad_scale * d loss / d output, or null
};

/// A loss kind's math. Stateless: one object serves every job of its actor, in order.
class loss_function {
 public:
  virtual ~loss_function() = default;
  virtual loss_spec spec() const = 0;
  /// Enqueues the job on `context`'s stream (on a CPU device: runs it).
  virtual void compute(const kernels::context& context, const loss_job& job) const = 0;
};

/// A loss's settings table (`loss = { type = "huber", delta = 0.5 }`) and the type of the
/// device it will run on (a loss looks its kernels up for it).
class loss_settings : public settings {
 public:
  loss_settings(std::string type, setting_map values, source_position where,
                kernels::device_type device)
      : settings("loss", type, std::move(values), std::move(where)),
        type_(std::move(type)),
        device_(device) {}

  const std::string& type() const { return type_; }
  kernels::device_type device() const { return device_; }

 private:
  std::string type_;
  kernels::device_type device_;
};

using loss_factory = std::function<std::unique_ptr<loss_function>(loss_settings&)>;

/// Registers a loss kind. A name registered twice throws.
void register_loss(const std::string& name, const std::string& description, loss_factory factory);

/// True if a loss kind of that name is registered.
bool has_loss(const std::string& name);

/// "loss 'mse' is registered twice": the clash message.
inline std::string loss_registered_twice(const std::string& name) {
  return "loss '" + name + "' is registered twice";
}

/// The registered loss kinds with their one-line descriptions, sorted.
std::vector<std::pair<std::string, std::string>> registered_losses();

/// Creates the loss kind settings.type() from its settings (a plugin's test, or a program
/// of its own): an unknown kind, a setting no one read or one out of range throws
/// config_error at the settings' position.
std::unique_ptr<loss_function> create_loss(loss_settings& settings);

/// What TROUPE_REGISTER_LOSS makes: registers at construction, or inside a plugin records the
/// registration for the loader (Note [plugin registrations]); never throws.
struct TROUPE_LOCAL loss_registrar {
  loss_registrar(const std::string& name, const std::string& description, loss_factory factory) {
    detail::register_or_defer(
        "loss '" + name + "'",
        [name] { return has_loss(name) ? loss_registered_twice(name) : std::string{}; },
        [name, description, factory = std::move(factory)] {
          register_loss(name, description, factory);
        });
  }
};

}  // namespace troupe

#define TROUPE_LOSS_CONCAT_INNER(a, b) a##b
#define TROUPE_LOSS_CONCAT(a, b) TROUPE_LOSS_CONCAT_INNER(a, b)

/// Makes a loss kind available to configs by name.
#define TROUPE_REGISTER_LOSS(name, description, ...)                                              \
  static const ::troupe::loss_registrar TROUPE_LOSS_CONCAT(troupe_loss_registrar_, __COUNTER__) { \
    name, description, __VA_ARGS__                                                                \
  }
