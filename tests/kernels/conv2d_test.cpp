// conv2d_test.cpp: the CPU's direct convolution (ops::conv2d_forward, _backward_data,
// _backward_weights, oneDNN's) against a naive double reference written from ops.hpp's
// definitions, on every geometry of window_reference.hpp, in f32 and with bf16 operands.
//
// Tolerance: every output is a sum of `terms` products accumulated in f32; each addition
// rounds by at most 2^-24 of the running sum, so |got - exact| <= terms 2^-24 sum |a b|, and
// the test allows twice that. In bf16 the operands are bf16 values (exact in f32 and in
// double), their products exact in f32: the same bound holds against the reference taken on
// the same bf16 values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include "kernel_test_support.hpp"
#include "kernels/cpu/onednn_matmul.hpp"
#include "troupe/error.hpp"
#include "troupe/ops.hpp"
#include "window_reference.hpp"

using namespace troupe;

namespace {

const auto not_written = std::numeric_limits<float>::quiet_NaN();

/// Operands as the kernel takes them: floats, or their bf16 roundings (bits) with the floats
/// those bits are.
struct operand {
  std::vector<float> values;        // what the reference multiplies
  std::vector<std::uint16_t> bits;  // bf16 only
  const void* data(kernels::conv_operands type) const {
    return type == kernels::conv_operands::bf16 ? static_cast<const void*>(bits.data())
                                                : static_cast<const void*>(values.data());
  }
};

operand make_operand(std::size_t count, std::uint32_t seed, kernels::conv_operands type) {
  operand out{test::random_floats(count, seed), {}};
  if (type == kernels::conv_operands::bf16) {
    auto to_bf16 = kernels::lookup<kernels::ops::to_bf16>(kernels::device_type::cpu);
    out.bits.resize(count);
    to_bf16(test::cpu_context(), std::int64_t(count), out.values.data(), out.bits.data());
    for (std::size_t i = 0; i < count; ++i)
      out.values[i] = test::from_bits(std::uint32_t{out.bits[i]} << 16);
  }
  return out;
}

/// A reference output: the exact sum and the sum of the products' magnitudes.
struct reference {
  std::vector<double> sum, magnitude;
  int terms = 0;
};

struct conv_case {
  kernels::window2d w;
  int batch = 0, out = 0;
  int oh() const { return w.out_h(); }
  int ow() const { return w.out_w(); }
  std::size_t x_size() const { return std::size_t(test::image_size(batch, w)); }
  std::size_t y_size() const { return std::size_t(batch) * out * oh() * ow(); }
  std::size_t w_size() const { return std::size_t(out) * w.channels * w.kernel_h * w.kernel_w; }
  std::size_t x_at(int b, int c, int h, int v) const {
    return ((std::size_t(b) * w.channels + c) * w.height + h) * w.width + v;
  }
  std::size_t y_at(int b, int o, int h, int v) const {
    return ((std::size_t(b) * out + o) * oh() + h) * ow() + v;
  }
  std::size_t w_at(int o, int c, int i, int j) const {
    return ((std::size_t(o) * w.channels + c) * w.kernel_h + i) * w.kernel_w + j;
  }
  // Calls f(x index, w index, y index) for every product the convolution takes.
  template <class F>
  void for_each_product(F f) const {
    for (int b = 0; b < batch; ++b)
      for (int o = 0; o < out; ++o)
        for (int h = 0; h < oh(); ++h)
          for (int v = 0; v < ow(); ++v)
            for (int c = 0; c < w.channels; ++c)
              for (int i = 0; i < w.kernel_h; ++i)
                for (int j = 0; j < w.kernel_w; ++j) {
                  const int ih = h * w.stride_h - w.pad_h + i, iw = v * w.stride_w - w.pad_w + j;
                  if (test::inside(w, ih, iw))
                    f(x_at(b, c, ih, iw), w_at(o, c, i, j), y_at(b, o, h, v));
                }
  }
};

void add(reference& r, std::size_t at, double a, double b) {
  r.sum[at] += a * b;
  r.magnitude[at] += std::fabs(a * b);
}

void check_against(const std::vector<float>& got, const reference& want) {
  REQUIRE(got.size() == want.sum.size());
  int wrong = 0;
  std::ostringstream first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bound = 2.0 * want.terms * std::ldexp(want.magnitude[i], -24) + 1e-30;
    if (!(std::fabs(got[i] - want.sum[i]) <= bound) && ++wrong <= 3)
      first << "element " << i << ": got " << got[i] << ", want " << want.sum[i] << " within "
            << bound << "\n";
  }
  INFO(first.str());
  CHECK(wrong == 0);
}

std::vector<conv_case> cases() {
  std::vector<conv_case> out;
  for (const auto& w : test::window_geometries())
    for (int batch : {1, 3})
      for (int channels_out : {5, 16})
        out.push_back({w, batch, channels_out});
  return out;
}

std::vector<kernels::conv_operands> operand_types() {
  if (kernels::cpu::onednn_has_bf16())
    return {kernels::conv_operands::f32, kernels::conv_operands::bf16};
  MESSAGE("this CPU computes no bf16 products (oneDNN: " << kernels::cpu::onednn_isa_name()
                                                         << "): f32 only");
  return {kernels::conv_operands::f32};
}

const char* name_of(kernels::conv_operands type) {
  return type == kernels::conv_operands::bf16 ? "bf16" : "f32";
}

// Each float rounded to bf16 by the CPU's to_bf16.
std::vector<std::uint16_t> rounded_bits(const std::vector<float>& values) {
  std::vector<std::uint16_t> out(values.size());
  kernels::lookup<kernels::ops::to_bf16>(kernels::device_type::cpu)(
      test::cpu_context(), static_cast<std::int64_t>(values.size()), values.data(), out.data());
  return out;
}

}  // namespace

TEST_CASE("conv2d_forward convolves every window, bias included, and overwrites y") {
  auto forward = kernels::lookup<kernels::ops::conv2d_forward>(kernels::device_type::cpu);
  std::uint32_t seed = 300;
  for (const auto type : operand_types())
    for (const auto& c : cases()) {
      for (const bool with_bias : {true, false}) {
        INFO(name_of(type) << " C=" << c.w.channels << " H=" << c.w.height << " W=" << c.w.width
                           << " k=" << c.w.kernel_h << "x" << c.w.kernel_w << " s=" << c.w.stride_h
                           << " p=" << c.w.pad_h << "x" << c.w.pad_w << " batch=" << c.batch
                           << " out=" << c.out << " bias=" << with_bias);
        const auto x = make_operand(c.x_size(), ++seed, type);
        const auto w = make_operand(c.w_size(), ++seed, type);
        const auto bias = test::random_floats(std::size_t(c.out), ++seed);
        reference want{std::vector<double>(c.y_size()), std::vector<double>(c.y_size()),
                       c.w.channels * c.w.kernel_h * c.w.kernel_w + 1};
        c.for_each_product([&](std::size_t xi, std::size_t wi, std::size_t yi) {
          add(want, yi, x.values[xi], w.values[wi]);
        });
        if (with_bias)
          for (std::size_t i = 0; i < c.y_size(); ++i)
            add(want, i, bias[(i / std::size_t(c.oh() * c.ow())) % std::size_t(c.out)], 1.0);
        std::vector<float> y(c.y_size(), not_written);
        forward(test::cpu_context(), type, c.batch, c.w, c.out, x.data(type), w.data(type),
                with_bias ? bias.data() : nullptr, kernels::conv_operands::f32, y.data());
        check_against(y, want);
        // In bf16: the same f32 result rounded once, as to_bf16 rounds it.
        std::vector<std::uint16_t> y16(c.y_size(), 0x1234);
        forward(test::cpu_context(), type, c.batch, c.w, c.out, x.data(type), w.data(type),
                with_bias ? bias.data() : nullptr, kernels::conv_operands::bf16, y16.data());
        CHECK(y16 == rounded_bits(y));
      }
    }
}

TEST_CASE("conv2d_backward_data sums w times dy into every pixel a window read") {
  auto backward = kernels::lookup<kernels::ops::conv2d_backward_data>(kernels::device_type::cpu);
  std::uint32_t seed = 500;
  for (const auto type : operand_types())
    for (const auto& c : cases()) {
      INFO(name_of(type) << " C=" << c.w.channels << " H=" << c.w.height << " k=" << c.w.kernel_h
                         << " s=" << c.w.stride_h << " p=" << c.w.pad_h << " batch=" << c.batch
                         << " out=" << c.out);
      const auto dy = make_operand(c.y_size(), ++seed, type);
      const auto w = make_operand(c.w_size(), ++seed, type);
      reference want{std::vector<double>(c.x_size()), std::vector<double>(c.x_size()),
                     c.out * c.w.kernel_h * c.w.kernel_w};
      c.for_each_product([&](std::size_t xi, std::size_t wi, std::size_t yi) {
        add(want, xi, w.values[wi], dy.values[yi]);
      });
      std::vector<float> dx(c.x_size(), not_written);  // pixels no window reads get 0
      backward(test::cpu_context(), type, c.batch, c.w, c.out, dy.data(type), w.data(type),
               kernels::conv_operands::f32, dx.data());
      check_against(dx, want);
      std::vector<std::uint16_t> dx16(c.x_size(), 0x1234);
      backward(test::cpu_context(), type, c.batch, c.w, c.out, dy.data(type), w.data(type),
               kernels::conv_operands::bf16, dx16.data());
      CHECK(dx16 == rounded_bits(dx));
    }
}

TEST_CASE("conv2d_backward_weights sums dy times x over the batch, and accumulates with beta 1") {
  auto backward = kernels::lookup<kernels::ops::conv2d_backward_weights>(kernels::device_type::cpu);
  std::uint32_t seed = 700;
  for (const auto type : operand_types())
    for (const auto& c : cases()) {
      INFO(name_of(type) << " C=" << c.w.channels << " H=" << c.w.height << " k=" << c.w.kernel_h
                         << " s=" << c.w.stride_h << " p=" << c.w.pad_h << " batch=" << c.batch
                         << " out=" << c.out);
      const auto x = make_operand(c.x_size(), ++seed, type);
      const auto dy = make_operand(c.y_size(), ++seed, type);
      const int pixels = c.batch * c.oh() * c.ow();
      reference dw{std::vector<double>(c.w_size()), std::vector<double>(c.w_size()), pixels};
      c.for_each_product([&](std::size_t xi, std::size_t wi, std::size_t yi) {
        add(dw, wi, x.values[xi], dy.values[yi]);
      });
      reference db{std::vector<double>(std::size_t(c.out)), std::vector<double>(std::size_t(c.out)),
                   pixels};
      for (std::size_t i = 0; i < c.y_size(); ++i)
        add(db, (i / std::size_t(c.oh() * c.ow())) % std::size_t(c.out), dy.values[i], 1.0);
      // beta 0 overwrites (NaN included), with and without the bias's gradient.
      std::vector<float> got_dw(c.w_size(), not_written), got_db(std::size_t(c.out), not_written);
      backward(test::cpu_context(), type, c.batch, c.w, c.out, x.data(type), dy.data(type), 0.0f,
               got_dw.data(), got_db.data());
      check_against(got_dw, dw);
      check_against(got_db, db);
      std::vector<float> alone(c.w_size(), not_written);
      backward(test::cpu_context(), type, c.batch, c.w, c.out, x.data(type), dy.data(type), 0.0f,
               alone.data(), nullptr);
      CHECK(test::same_bits(alone, got_dw));
      // beta 1 adds this call's sums to what is there: twice the sums.
      backward(test::cpu_context(), type, c.batch, c.w, c.out, x.data(type), dy.data(type), 1.0f,
               got_dw.data(), got_db.data());
      for (auto* r : {&dw, &db})
        for (std::size_t i = 0; i < r->sum.size(); ++i) {
          r->sum[i] *= 2;
          r->magnitude[i] *= 2;
        }
      dw.terms = db.terms = pixels + 1;
      check_against(got_dw, dw);
      check_against(got_db, db);
    }
}

TEST_CASE("the direct convolution of an empty batch, and refusals of bad sizes") {
  auto forward = kernels::lookup<kernels::ops::conv2d_forward>(kernels::device_type::cpu);
  auto weights = kernels::lookup<kernels::ops::conv2d_backward_weights>(kernels::device_type::cpu);
  const auto w = test::make_window2d(2, 5, 5, 3, 1, 1);
  std::vector<float> dw(16 * 2 * 9, 7.0f), db(16, 7.0f);
  // No samples: the sums are empty, 0 with beta 0, unchanged with beta 1.
  weights(test::cpu_context(), kernels::conv_operands::f32, 0, w, 16, nullptr, nullptr, 1.0f,
          dw.data(), db.data());
  CHECK(dw == std::vector<float>(dw.size(), 7.0f));
  weights(test::cpu_context(), kernels::conv_operands::f32, 0, w, 16, nullptr, nullptr, 0.0f,
          dw.data(), db.data());
  CHECK(dw == std::vector<float>(dw.size(), 0.0f));
  CHECK(db == std::vector<float>(db.size(), 0.0f));
  forward(test::cpu_context(), kernels::conv_operands::f32, 0, w, 16, nullptr, nullptr, nullptr,
          kernels::conv_operands::f32, nullptr);
  CHECK_THROWS_WITH_AS(forward(test::cpu_context(), kernels::conv_operands::f32, -1, w, 16, nullptr,
                               nullptr, nullptr, kernels::conv_operands::f32, nullptr),
                       doctest::Contains("conv2d_forward"), check_failure);
  CHECK_THROWS_WITH_AS(forward(test::cpu_context(), kernels::conv_operands::f32, 1, w, 0, nullptr,
                               nullptr, nullptr, kernels::conv_operands::f32, nullptr),
                       doctest::Contains("out_channels=0"), check_failure);
  CHECK_THROWS_WITH_AS(weights(test::cpu_context(), kernels::conv_operands::f32, 1, w, 16, nullptr,
                               nullptr, 0.5f, dw.data(), nullptr),
                       doctest::Contains("beta=0.5"), check_failure);
  auto too_big = test::make_window2d(2, 2, 2, 5, 1, 0);
  CHECK_THROWS_WITH_AS(forward(test::cpu_context(), kernels::conv_operands::f32, 1, too_big, 16,
                               nullptr, nullptr, nullptr, kernels::conv_operands::f32, nullptr),
                       doctest::Contains("does not fit"), check_failure);
}
