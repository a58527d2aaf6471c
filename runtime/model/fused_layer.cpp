// fused_layer.cpp: several layers as one (see the header).
#include "runtime/model/fused_layer.hpp"

#include <iterator>
#include <stdexcept>

#include "troupe/check.hpp"
#include "troupe/trace.hpp"

namespace troupe {

namespace {

// Note [a fused pass's saved tensors]
// Backward needs each member's own `saved`, and a member may save any number of tensors
// (dropout saves its mask in training only). So forward appends them member after member
// and ends with one marker: a tensor of no elements whose shape is 0, then each member's
// count (a shape of counts has elements unless a dimension is 0; the 0 comes first so that
// counting its elements never multiplies the counts, which overflows on long chains).
// Backward reads the marker and splits. No member can forge it: it is always the last tensor.
// After the counts the marker holds each member's x dtype, then each one's y dtype, as
// forward found them (Note [bf16 activations] in actors/training/layer_actor.cpp), so the
// backward gives each member dy in its y's dtype and allocates dx in its x's.
tensor counts_marker(const std::vector<std::size_t>& counts, const std::vector<dtype>& x_types,
                     const std::vector<dtype>& y_types) {
  shape_t shape{0};
  for (auto c : counts)
    shape.push_back(static_cast<std::int64_t>(c));
  for (const auto* types : {&x_types, &y_types})
    for (auto t : *types)
      shape.push_back(static_cast<std::int64_t>(t));
  return tensor::empty(std::move(shape));
}

// `t` in dtype `type`, within the job (a member's y that the next member takes in f32, or a
// gradient in the dtype of the y it belongs to).
tensor in_type(const layer_context& context, const tensor& t, dtype type) {
  if (t.type() == type)
    return t;
  return type == dtype::bf16 ? rounded_to_bf16(context, t) : widened_to_f32(context, t);
}

shape_t with_batch(std::int64_t rows, const shape_t& per_sample) {
  shape_t shape{rows};
  shape.insert(shape.end(), per_sample.begin(), per_sample.end());
  return shape;
}

// A span of one member inside the fused job, when tracing.
class part_span {
 public:
  part_span(const fused_layer::part_trace* parts, std::size_t member, const char* name)
      : parts_(parts != nullptr && parts->member_tracks != nullptr &&
                       !parts->member_tracks->empty() && trace::enabled()
                   ? parts
                   : nullptr),
        member_(member),
        name_(name),
        start_(parts_ != nullptr ? trace::now_ns() : 0) {}
  ~part_span() {
    if (parts_ == nullptr)
      return;
    trace::event e;
    e.type = trace::event_type::part;
    e.start_ns = start_;
    e.duration_ns = trace::now_ns() - start_;
    e.track = parts_->stream_track;
    e.peer = parts_->member_tracks->at(member_);
    e.value = parts_->job.actor;  // the fused actor whose job it is in
    e.name = name_;
    e.step = parts_->job.step;
    e.microbatch = parts_->job.microbatch;
    e.replica = parts_->job.replica;
    e.phase = parts_->job.phase;
    trace::record(e);
  }
  part_span(const part_span&) = delete;
  part_span& operator=(const part_span&) = delete;

 private:
  const fused_layer::part_trace* parts_;
  std::size_t member_;
  const char* name_;
  std::int64_t start_;
};

}  // namespace

fused_layer::fused_layer(std::vector<member> members) : members_(std::move(members)) {
  TROUPE_CHECK(members_.size() >= 2, "a fused layer needs two members, not " << members_.size());
  std::size_t first = 0;
  for (auto& m : members_) {
    TROUPE_CHECK(!m.math->sums_inputs(), "layer " << m.index << " (" << m.math->type()
                                                   << ") sums its inputs: it is not fused");
    m.first_param = first;
    m.params = m.math->parameters(m.input_shape).size();
    first += m.params;
  }
}

shape_t fused_layer::output_shape(const shape_t& input) const {
  shape_t shape = input;
  for (const auto& m : members_)
    shape = m.math->output_shape(shape);
  return shape;
}

std::vector<param_spec> fused_layer::parameters(const shape_t& input) const {
  std::vector<param_spec> out;
  shape_t shape = input;
  for (const auto& m : members_) {
    auto own = m.math->parameters(shape);
    out.insert(out.end(), own.begin(), own.end());
    shape = m.math->output_shape(shape);
  }
  return out;
}

void fused_layer::bind(device_type type) {
  for (auto& m : members_)
    m.math->bind(type);
}

std::vector<tensor> fused_layer::own_params(const std::vector<tensor>& params,
                                            const member& m) const {
  return std::vector<tensor>(
      params.begin() + static_cast<std::ptrdiff_t>(m.first_param),
      params.begin() + static_cast<std::ptrdiff_t>(m.first_param + m.params));
}

bool fused_layer::next_takes_bf16(std::size_t i, const std::vector<tensor>& params,
                                  bool readers_take_bf16) const {
  if (i + 1 == members_.size())
    return readers_take_bf16;
  const auto& next = members_[i + 1];
  return next.math->input_dtype(dtype::bf16, own_params(params, next)) == dtype::bf16;
}

dtype fused_layer::input_dtype(dtype sent, const std::vector<tensor>& params) const {
  return members_.front().math->input_dtype(sent, own_params(params, members_.front()));
}

dtype fused_layer::output_dtype(dtype x, const std::vector<tensor>& params,
                                bool readers_take_bf16) const {
  dtype type = x;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const auto own = own_params(params, members_[i]);
    type = members_[i].math->output_dtype(members_[i].math->input_dtype(type, own), own,
                                          next_takes_bf16(i, params, readers_take_bf16));
  }
  return type;
}

double fused_layer::cost(const shape_t& input) const {
  double total = 0;
  shape_t shape = input;
  for (const auto& m : members_) {
    total += m.math->cost(shape);
    shape = m.math->output_shape(shape);
  }
  return total;
}

void fused_layer::forward(const layer_context& context, const std::vector<tensor>& params,
                          const tensor& x, const tensor& y, std::vector<tensor>& saved,
                          const part_trace* parts) const {
  std::vector<std::size_t> counts;
  std::vector<dtype> x_types, y_types;
  tensor in = x;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const auto& m = members_[i];
    const bool last = i + 1 == members_.size();
    const auto own = own_params(params, m);
    auto member_context = context;
    member_context.layer = m.index;
    in = in_type(member_context, in, m.math->input_dtype(in.type(), own));
    // The last member's y is the fused layer's, whose dtype its actor chose by output_dtype.
    tensor out = last ? y
                      : tensor::empty(
                            with_batch(x.dim(0), members_[i + 1].input_shape),
                            m.math->output_dtype(in.type(), own, next_takes_bf16(i, params, false)),
                            context.device);
    x_types.push_back(in.type());
    y_types.push_back(out.type());
    std::vector<tensor> own_saved;  // a layer may assign its saved vector, not only append
    try {
      part_span span{parts, i, "forward"};
      m.math->forward(member_context, own, in, out, own_saved);
    } catch (const std::exception& e) {
      throw member_error(i, e.what());
    }
    counts.push_back(own_saved.size());
    std::move(own_saved.begin(), own_saved.end(), std::back_inserter(saved));
    in = std::move(out);
  }
  saved.push_back(counts_marker(counts, x_types, y_types));
}

void fused_layer::backward(const layer_context& context, const std::vector<tensor>& params,
                           const std::vector<tensor>& saved, const tensor& dy, tensor* dx,
                           std::vector<tensor>& grads, bool accumulate,
                           const part_trace* parts) const {
  const auto n = members_.size();
  TROUPE_CHECK(!saved.empty() && saved.back().shape().size() == 3 * n + 1,
               "a fused backward without its forward's saved tensors");
  const auto& counts = saved.back().shape();
  auto type_at = [&](std::size_t k) { return static_cast<dtype>(counts[1 + k]); };
  std::vector<std::size_t> first_saved{0};
  for (std::size_t i = 0; i < members_.size(); ++i)
    first_saved.push_back(first_saved.back() + static_cast<std::size_t>(counts[i + 1]));
  TROUPE_CHECK(first_saved.back() + 1 == saved.size(), "a fused forward's saved tensors do not add up");
  tensor upstream = dy;
  for (std::size_t i = members_.size(); i-- > 0;) {
    const auto& m = members_[i];
    const auto begin = [](const auto& v, std::size_t at) {
      return v.begin() + static_cast<std::ptrdiff_t>(at);
    };
    const auto own = own_params(params, m);
    std::vector<tensor> own_saved(begin(saved, first_saved[i]), begin(saved, first_saved[i + 1]));
    std::vector<tensor> own_grads(begin(grads, m.first_param),
                                  begin(grads, m.first_param + m.params));
    auto member_context = context;
    member_context.layer = m.index;
    upstream = in_type(member_context, upstream, type_at(2 * n + i));  // y's dtype
    tensor below;
    tensor* below_out = nullptr;
    if (i > 0) {
      below = tensor::empty(with_batch(dy.dim(0), m.input_shape), type_at(n + i), context.device);
      below_out = &below;
    } else {
      below_out = dx;
    }
    try {
      part_span span{parts, i, "backward"};
      m.math->backward(member_context, own, own_saved, upstream, below_out, own_grads, accumulate);
    } catch (const std::exception& e) {
      throw member_error(i, e.what());
    }
    upstream = std::move(below);
  }
}

}  // namespace troupe
