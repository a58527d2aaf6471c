// layer.hpp: the layer interface and the layer registry (troupe's public facade).
//
// A layer is the math of one step of the model: a name, its output shape for an input
// shape, forward, backward, its parameters (with their init) and a cost estimate. It
// holds no per-micro-batch state: forward puts what backward needs into `saved`, and the
// runtime keeps it per micro-batch and hands it back (so pipelines and replicas work for
// every layer alike). Parameters are owned by the optimizer and arrive as versions.
// Built-in layers use exactly this interface and registration; so do plugins.
//
// Writing a layer (the whole of actors/layers/relu.cpp-like files):
//
//     class swish final : public troupe::layer { ... };
//     TROUPE_REGISTER_LAYER("swish", "x * sigmoid(x)", [](troupe::layer_settings& s) {
//       return std::make_unique<swish>(s);
//     });
//
// Shapes here are per sample (no batch dimension): a linear layer maps (784) to (256).
// No CAF here (a layer plugin compiles none of it); kernels come from troupe/kernel.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "troupe/kernel.hpp"
#include "troupe/registration.hpp"
#include "troupe/settings.hpp"
#include "troupe/tensor.hpp"

namespace troupe {

/// How a parameter is initialised. fan_in/fan_out come from the param_spec.
enum class init_kind {
  zeros,
  ones,
  kaiming_uniform,  // U(-b, b), b = sqrt(6 / fan_in)          (He et al., gain sqrt 2)
  kaiming_normal,   // N(0, 2 / fan_in)
  xavier_uniform,   // U(-b, b), b = sqrt(6 / (fan_in + fan_out))
  xavier_normal,    // N(0, 2 / (fan_in + fan_out))
  torch_default,    // U(-b, b), b = 1 / sqrt(fan_in)          (torch.nn.Linear's default)
  normal,           // N(0, 1)                                 (torch.nn.Embedding's default)
};

/// Parses "zeros", "kaiming", "kaiming_normal", "xavier", ...; false if unknown.
bool parse_init_kind(const std::string& name, init_kind& out);
std::vector<std::string> init_kind_names();

/// One parameter tensor of a layer.
struct param_spec {
  std::string name;  // "weight", "bias"
  shape_t shape;
  init_kind init = init_kind::zeros;
  std::int64_t fan_in = 1;
  std::int64_t fan_out = 1;
};

/// A layer's settings from its [[model.layers]] table (every key but `type`), read with
/// types and ranges checked (troupe/settings.hpp); errors name "layer '<type>'".
class layer_settings : public settings {
 public:
  layer_settings(std::string type, setting_map values, source_position where)
      : settings("layer", type, std::move(values), std::move(where)), type_(std::move(type)) {}

  const std::string& type() const { return type_; }

 private:
  std::string type_;
};

/// What a layer's code gets to run with: the device it runs on, its kernel context, and
/// the key of its randomness (dropout): randomness is keyed by the run's seed, the step,
/// the layer and the global index of each sample (DESIGN.md "Equivalence"), so every
/// wiring draws the same numbers for the same sample.
struct layer_context {
  device_id device;
  kernels::context kernels;
  bool training = true;
  std::uint64_t seed = 0;         // [run] seed
  std::int64_t step = 0;          // the training step of this pass
  std::int32_t layer = 0;         // the layer's index in the model
  std::int64_t first_sample = 0;  // the step's index of the micro-batch's first sample
  std::int32_t replica = 0;       // the data-parallel replica computing it (0 with one)

  /// The key of this pass's randomness: (seed, step, layer), the same on every device,
  /// replica and wiring (DESIGN.md "Equivalence"); a layer adds the sample index to it.
  std::uint64_t pass_key() const;
};

/// How a layer's activations may travel in bfloat16 (Note [bf16 activations] in
/// actors/training/layer_actor.cpp). Whatever a layer says, an fp32 run's are all f32. In
/// every case dy reaches the layer in y's dtype (the runtime rounds or widens the gradients
/// it gets) and dx is allocated in the dtype x reached it in.
enum class bf16_flow : std::uint8_t {
  /// x and dy reach the layer as f32 (the runtime widens bf16 ones), y and dx are f32: the
  /// default, for a layer that knows nothing of bf16.
  none,
  /// Where the layer computes in bf16 (one of its parameters arrived as bf16): x reaches it
  /// as it was sent, f32 or bf16, and y is bf16 where the layers reading it take bf16
  /// (linear, conv2d: their products' outputs rounded once, as PyTorch's autocast rounds
  /// them), else f32. Elsewhere as `none`.
  made,
  /// y has the dtype x reached it in, f32 or bf16 (layers that select or move values:
  /// relu, max pooling, flatten).
  kept,
};

class layer {
 public:
  virtual ~layer() = default;

  /// The registered type name, e.g. "linear".
  virtual std::string type() const = 0;

  /// The per-sample output shape for a per-sample input shape. Throws config_error
  /// (using the settings' position) if the input does not fit.
  virtual shape_t output_shape(const shape_t& input) const = 0;

  /// The parameters this layer needs for that input shape (none by default).
  virtual std::vector<param_spec> parameters(const shape_t& input) const {
    (void)input;
    return {};
  }

  /// The parameters this layer computes with in bfloat16 when the run's (or its own)
  /// precision is "bf16", by name (linear: {"weight"}): they then arrive in `params` as
  /// dtype::bf16 tensors, rounded from the optimizer's fp32 masters once per version, and the
  /// layer computes its products in bf16 with fp32 accumulation (ops::gemm_bf16). Activations,
  /// gradients and the other parameters stay f32. Empty (the default): the layer computes in
  /// fp32 in every precision. A layer checks params[i].type() to know which it got.
  virtual std::vector<std::string> bf16_parameters() const { return {}; }

  /// Resolves kernels for a device type once, before any forward. Layers cache kernel
  /// function pointers here; the default does nothing.
  virtual void bind(device_type type) { (void)type; }

  /// How its activations travel in a bf16 run (bf16_flow); asked after bind, so it may
  /// depend on the device type (a kernel for bf16 only on CPUs). Default: none.
  virtual bf16_flow activations() const { return bf16_flow::none; }

  /// The dtype x reaches the layer in when sent as `sent`, and the dtype of its y for an x
  /// of dtype `x`, given its parameters as they arrived and whether the layers that read y
  /// take it in bf16 (a `made` y is bf16 only for such readers): by activations(); the
  /// runtime's to ask (a fused layer chains its members'). A layer states activations().
  virtual dtype input_dtype(dtype sent, const std::vector<tensor>& params) const;
  virtual dtype output_dtype(dtype x, const std::vector<tensor>& params,
                             bool readers_take_bf16) const;

  /// y = f(x; params). x: (b, input...), y: preallocated (b, output...) from
  /// output_shape(); forward writes its values (y.f32()) but cannot replace or reshape it.
  /// Anything backward needs goes into `saved` (tensors are shared, so saving x is free).
  virtual void forward(const layer_context& context, const std::vector<tensor>& params,
                       const tensor& x, const tensor& y, std::vector<tensor>& saved) const = 0;

  /// Given dy (b, output...) and what forward saved: writes dx (preallocated, or
  /// nullptr when no one needs it, e.g. the first layer) and the parameter gradients
  /// into `grads` (preallocated, one per parameter). accumulate: add to grads (a later
  /// micro-batch of the same step) instead of overwriting them.
  virtual void backward(const layer_context& context, const std::vector<tensor>& params,
                        const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                        std::vector<tensor>& grads, bool accumulate) const = 0;

  /// Optional: backward in two parts, for zero-bubble pipeline schedules ([parallel]
  /// schedule = "zb-h1"), which send dx on at once and compute the parameter gradients
  /// when the device would otherwise idle. A layer that returns true implements both
  /// below; together they must compute what backward does. Layers without the split keep
  /// their one backward in every schedule.
  virtual bool splits_backward() const { return false; }

  /// The input gradient only: writes dx (preallocated) from dy and what forward saved.
  virtual void backward_input(const layer_context& context, const std::vector<tensor>& params,
                              const std::vector<tensor>& saved, const tensor& dy,
                              const tensor& dx) const;

  /// The parameter gradients only, written or accumulated into `grads` as backward does.
  /// It runs after backward_input of the same micro-batch, possibly after other
  /// micro-batches' forwards and backwards, with the same params and saved.
  virtual void backward_weight(const layer_context& context, const std::vector<tensor>& params,
                               const std::vector<tensor>& saved, const tensor& dy,
                               std::vector<tensor>& grads, bool accumulate) const;

  /// Whether the layer reads two or more inputs of one shape, which its actor sums (a
  /// residual connection's `add`, runtime/graph/model_graph.hpp): its layer_actor sends
  /// their sum on as y, and dy back to each input, without calling forward or backward,
  /// which see one input (as when the layer is checked alone). False: one input.
  virtual bool sums_inputs() const { return false; }

  /// What the input holds: 0 for real values (the default), n > 0 for token ids, each an
  /// integer in [0, n) stored as a float (an embedding's input). Gradient checks draw ids
  /// for such a layer and do not check its dx (an id has no gradient).
  virtual std::int64_t input_ids() const { return 0; }

  /// Estimated cost per sample, in floating-point operations of forward + backward,
  /// used to balance pipeline stages.
  virtual double cost(const shape_t& input) const;
};

/// `t` (f32) rounded to bf16 in a new tensor on the layer's device (ops::to_bf16): what a
/// layer computing in bf16 does to its inputs and incoming gradients. `t` itself when it is
/// bf16 already (an activation of a bf16 run).
tensor rounded_to_bf16(const layer_context& context, const tensor& t);

/// `t` (bf16) widened to f32 in a new tensor on the layer's device (ops::from_bf16, exact);
/// `t` itself when it is f32.
tensor widened_to_f32(const layer_context& context, const tensor& t);

/// Whether a layer computes in bf16: one of its parameters arrived as dtype::bf16.
bool computes_in_bf16(const std::vector<tensor>& params);

/// Where a layer writes an output `out` (y or dx) whose values it computes in f32: `out`
/// itself when it is f32, else a new f32 tensor of its shape, which store_output then rounds
/// into `out` (nothing to do when they are one tensor).
tensor f32_output(const layer_context& context, const tensor& out);
void store_output(const layer_context& context, const tensor& values, const tensor& out);

using layer_factory = std::function<std::unique_ptr<layer>(layer_settings&)>;

/// Registers a layer type. A name registered twice throws.
void register_layer(const std::string& name, const std::string& description, layer_factory factory);

/// True if a layer type of that name is registered.
bool has_layer(const std::string& name);

/// "layer type 'linear' is registered twice": the clash message.
inline std::string layer_registered_twice(const std::string& name) {
  return "layer type '" + name + "' is registered twice";
}

/// The registered layer names with their one-line descriptions, sorted.
std::vector<std::pair<std::string, std::string>> registered_layers();

/// What TROUPE_REGISTER_LAYER makes: registers at construction, or inside a plugin records
/// the registration for the loader (Note [plugin registrations] in
/// include/troupe/registration.hpp); never throws.
struct TROUPE_LOCAL layer_registrar {
  layer_registrar(const std::string& name, const std::string& description, layer_factory factory) {
    detail::register_or_defer(
        "layer type '" + name + "'",
        [name] { return has_layer(name) ? layer_registered_twice(name) : std::string{}; },
        [name, description, factory = std::move(factory)] {
          register_layer(name, description, factory);
        });
  }
};

}  // namespace troupe

#define TROUPE_LAYER_CONCAT_INNER(a, b) a##b
#define TROUPE_LAYER_CONCAT(a, b) TROUPE_LAYER_CONCAT_INNER(a, b)

/// Makes a layer type available to configs by name.
/// (The factory is variadic so that a lambda with template commas needs no parentheses.)
#define TROUPE_REGISTER_LAYER(name, description, ...)                                 \
  static const ::troupe::layer_registrar TROUPE_LAYER_CONCAT(troupe_layer_registrar_, \
                                                             __COUNTER__) {           \
    name, description, __VA_ARGS__                                                    \
  }
