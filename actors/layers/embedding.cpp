// embedding.cpp: token embedding with a learned position embedding, a language model's
// first layer. A sample is a sequence of T token ids (as a text data source gives them,
// runtime/data/text.hpp); the output is (T, dim): row t is the token's vector plus
// position t's vector, as torch's nn.Embedding(vocab, dim)(ids) + nn.Embedding(T,
// dim)(arange(T)).
//
// Settings:
//   vocab = 96         tokens (required): ids are integers in [0, vocab)
//   dim = 64           the vectors' size (required)
//   positions = true   add a learned position embedding (one vector per position)
//   init = "normal"    both tables' init (N(0, 1), torch.nn.Embedding's default)
// Parameters: weight (vocab, dim), then position (T, dim) when positions = true.
// The input is ids, not values: no dx (the layer is first, or its dx is zeros).
#include <memory>

#include "troupe/layer.hpp"
#include "troupe/ops.hpp"

namespace troupe {
namespace {

class embedding final : public layer {
 public:
  explicit embedding(layer_settings& settings)
      : where_(settings.where()),
        vocab_(settings.integer("vocab", 1, std::int64_t{1} << 24)),
        dim_(settings.integer("dim", 1, std::int64_t{1} << 20)),
        positions_(settings.boolean("positions", true)) {
    auto init = settings.text("init", "normal", init_kind_names());
    parse_init_kind(init, init_);
  }

  std::string type() const override { return "embedding"; }

  shape_t output_shape(const shape_t& input) const override {
    if (input.size() != 1)
      throw config_error(where_, "layer 'embedding' takes a sequence of token ids (T) per "
                                 "sample, found " +
                                     shape_to_string(input));
    return {input[0], dim_};
  }

  std::vector<param_spec> parameters(const shape_t& input) const override {
    std::vector<param_spec> specs{{"weight", {vocab_, dim_}, init_, vocab_, dim_}};
    if (positions_)
      specs.push_back({"position", {input.at(0), dim_}, init_, input.at(0), dim_});
    return specs;
  }

  std::int64_t input_ids() const override { return vocab_; }

  void bind(device_type type) override {
    forward_ = kernels::lookup<kernels::ops::embedding_forward>(type);
    backward_ = kernels::lookup<kernels::ops::embedding_backward>(type);
    fill_ = kernels::lookup<kernels::ops::fill>(type);
  }

  void forward(const layer_context& context, const std::vector<tensor>& params, const tensor& x,
               const tensor& y, std::vector<tensor>& saved) const override {
    forward_(context.kernels, x.numel(), dim_, vocab_, x.dim(1), x.f32(), params[0].f32(),
             positions_ ? params[1].f32() : nullptr, y.f32());
    if (context.training)
      saved.push_back(x);
  }

  void backward(const layer_context& context, const std::vector<tensor>&,
                const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                std::vector<tensor>& grads, bool accumulate) const override {
    const tensor& x = saved.at(0);
    backward_(context.kernels, x.numel(), dim_, vocab_, x.dim(1), x.f32(), dy.f32(),
              accumulate ? 1.0f : 0.0f, grads[0].f32(), positions_ ? grads[1].f32() : nullptr);
    if (dx != nullptr)  // an id has no gradient
      fill_(context.kernels, dx->numel(), 0.0f, dx->f32());
  }

  double cost(const shape_t& input) const override {
    return 3.0 * static_cast<double>(input.at(0) * dim_);  // a row copy and add, each way
  }

 private:
  source_position where_;
  std::int64_t vocab_;
  std::int64_t dim_;
  bool positions_;
  init_kind init_ = init_kind::normal;
  kernels::ops::embedding_forward::function forward_ = nullptr;
  kernels::ops::embedding_backward::function backward_ = nullptr;
  kernels::ops::fill::function fill_ = nullptr;
};

}  // namespace

TROUPE_REGISTER_LAYER("embedding",
                      "token ids (T) to vectors (T, dim), plus a learned position embedding "
                      "(settings: vocab, dim, positions, init)",
                      [](layer_settings& s) { return std::make_unique<embedding>(s); });

}  // namespace troupe
