// fused_layer.hpp: consecutive layers of one replica on one device run as one layer, so
// one actor runs them and each pass is one job (Note [fused layers] in
// runtime/graph/fusion.hpp says which layers are fused, and why).
//
// It is a layer like any other to the actor that runs it: its parameters are its members'
// in model order, its forward runs theirs in order (each into a fresh intermediate) and its
// backward theirs in reverse, each member with its own context (its own layer index, so
// dropout draws what it draws unfused). The math is the members' own, kernel for kernel,
// so a fused run is bit for bit the unfused one. It never splits its backward (the plan
// fuses nothing under ZB-H1) and takes one input (no member sums inputs); it reads token
// ids when its first member does.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "troupe/device.hpp"
#include "troupe/layer.hpp"

namespace troupe {

class fused_layer final : public layer {
 public:
  struct member {
    std::unique_ptr<layer> math;
    std::int32_t index = 0;   // the layer's index in the model
    std::string name;         // its actor's name in the topology ("r0.layer_3"), for errors
    shape_t input_shape;      // per sample
    std::size_t first_param = 0;  // where its parameters start in the fused list
    std::size_t params = 0;       // how many it has
  };

  /// `members` in model order, each with its math, model index and per-sample input shape.
  explicit fused_layer(std::vector<member> members);

  /// Where a pass's parts are traced: the stream's track, the job's label (step,
  /// micro-batch, replica, phase) and each member's own actor track, so the trace shows a
  /// span per member inside the fused job (none when member_tracks is empty: a simulated
  /// run's).
  struct part_trace {
    std::uint32_t stream_track = 0;
    job_label job;
    const std::vector<std::uint32_t>* member_tracks = nullptr;
  };

  /// What a member's forward or backward threw, and which member it was.
  class member_error : public std::runtime_error {
   public:
    member_error(std::size_t member, const std::string& what)
        : std::runtime_error(what), member(member) {}
    std::size_t member;
  };

  const std::vector<member>& members() const { return members_; }

  std::string type() const override { return "fused"; }
  shape_t output_shape(const shape_t& input) const override;
  std::vector<param_spec> parameters(const shape_t& input) const override;
  void bind(device_type type) override;
  /// The first member's input dtype; the dtype of the last member's y along the chain, each
  /// member reading the one before as its own input_dtype takes it (Note [bf16 activations]).
  dtype input_dtype(dtype sent, const std::vector<tensor>& params) const override;
  dtype output_dtype(dtype x, const std::vector<tensor>& params,
                     bool readers_take_bf16) const override;
  void forward(const layer_context& context, const std::vector<tensor>& params, const tensor& x,
               const tensor& y, std::vector<tensor>& saved) const override {
    forward(context, params, x, y, saved, nullptr);
  }
  void backward(const layer_context& context, const std::vector<tensor>& params,
                const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                std::vector<tensor>& grads, bool accumulate) const override {
    backward(context, params, saved, dy, dx, grads, accumulate, nullptr);
  }
  /// The same, with a span per member when `parts` is given and the thread is tracing.
  void forward(const layer_context& context, const std::vector<tensor>& params, const tensor& x,
               const tensor& y, std::vector<tensor>& saved, const part_trace* parts) const;
  void backward(const layer_context& context, const std::vector<tensor>& params,
                const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                std::vector<tensor>& grads, bool accumulate, const part_trace* parts) const;
  std::int64_t input_ids() const override { return members_.front().math->input_ids(); }
  double cost(const shape_t& input) const override;

 private:
  std::vector<tensor> own_params(const std::vector<tensor>& params, const member& m) const;
  // Whether what reads member i's y takes bf16: the next member, or the last's readers.
  bool next_takes_bf16(std::size_t i, const std::vector<tensor>& params,
                       bool readers_take_bf16) const;

  std::vector<member> members_;
};

}  // namespace troupe
