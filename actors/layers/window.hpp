// window.hpp: what the image layers (conv2d, max_pool2d, avg_pool2d) share: reading
// kernel/stride/padding settings, checking an input of shape (C, H, W), and the
// ops::window2d geometry their kernels take.
//
// Square windows only (one `kernel`, `stride`, `padding` for both axes), as most configs
// write them; the kernels take both axes, so rectangles are a settings change away.
#pragma once

#include <cstdint>
#include <string>

#include "troupe/layer.hpp"
#include "troupe/ops.hpp"

namespace troupe {

/// The largest side of an input a window layer takes (the input limit on a sample's
/// features, 2^20): the window arithmetic stays far from overflowing.
constexpr std::int64_t max_window_side = std::int64_t{1} << 20;

struct window_settings {
  std::int64_t kernel = 1;
  std::int64_t stride = 1;
  std::int64_t padding = 0;
};

/// Reads `kernel` (required), `stride` (default `default_stride`, 0 meaning "= kernel") and
/// `padding` (default 0, at most `max_padding(kernel)`).
template <class MaxPadding>
window_settings read_window_settings(layer_settings& s, std::int64_t default_stride,
                                     MaxPadding max_padding) {
  constexpr std::int64_t max_side = 1 << 15;
  window_settings w;
  w.kernel = s.integer("kernel", 1, max_side);
  w.stride = s.integer("stride", default_stride == 0 ? w.kernel : default_stride, 1, max_side);
  w.padding = s.integer("padding", 0, 0, max_padding(w.kernel));
  return w;
}

/// The window over a per-sample input (C, H, W); throws config_error at `where` naming the
/// layer when the input is not an image or the window does not fit it.
inline kernels::window2d make_window(const std::string& type, const source_position& where,
                                     const window_settings& w, const shape_t& input) {
  if (input.size() != 3)
    throw config_error(where, "layer '" + type +
                                  "' takes inputs of shape (channels, height, width), found " +
                                  shape_to_string(input) +
                                  "; an image from a data set arrives flat, so start the "
                                  "model with { type = \"unflatten\", channels = 1, height = "
                                  "28, width = 28 } (Fashion-MNIST's shape)");
  for (auto d : input)
    if (d > max_window_side)
      throw config_error(where, "layer '" + type + "': input " + shape_to_string(input) +
                                    " has a side past the limit of " +
                                    std::to_string(max_window_side));
  const auto padded_h = input[1] + 2 * w.padding, padded_w = input[2] + 2 * w.padding;
  if (w.kernel > padded_h || w.kernel > padded_w)
    throw config_error(where, "layer '" + type + "': a " + std::to_string(w.kernel) + "x" +
                                  std::to_string(w.kernel) + " window does not fit the input " +
                                  shape_to_string(input) + " padded by " +
                                  std::to_string(w.padding));
  kernels::window2d window;
  window.channels = static_cast<int>(input[0]);
  window.height = static_cast<int>(input[1]);
  window.width = static_cast<int>(input[2]);
  window.kernel_h = window.kernel_w = static_cast<int>(w.kernel);
  window.stride_h = window.stride_w = static_cast<int>(w.stride);
  window.pad_h = window.pad_w = static_cast<int>(w.padding);
  return window;
}

/// The window for a (b, C, H, W) tensor x (what forward and backward get).
inline kernels::window2d window_of(const window_settings& w, const shape_t& x) {
  kernels::window2d window;
  window.channels = static_cast<int>(x.at(1));
  window.height = static_cast<int>(x.at(2));
  window.width = static_cast<int>(x.at(3));
  window.kernel_h = window.kernel_w = static_cast<int>(w.kernel);
  window.stride_h = window.stride_w = static_cast<int>(w.stride);
  window.pad_h = window.pad_w = static_cast<int>(w.padding);
  return window;
}

inline kernels::window2d window_of(const window_settings& w, const tensor& x) {
  return window_of(w, x.shape());
}

/// What a pooling layer saves of its input x (b, C, H, W) for backward, which needs only its
/// shape: a tensor of no elements of shape (0, b, C, H, W). Saving x itself would keep the
/// input alive until the backward (a conv net's largest activations); its readers are done
/// with it long before. saved_shape gives the shape back.
inline tensor shape_only(const shape_t& x) {
  shape_t marker{0};
  marker.insert(marker.end(), x.begin(), x.end());
  return tensor::empty(std::move(marker));
}

inline shape_t saved_shape(const tensor& marker) {
  return shape_t(marker.shape().begin() + 1, marker.shape().end());
}

}  // namespace troupe
