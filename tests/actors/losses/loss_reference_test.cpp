// loss_reference_test.cpp: every built-in loss kind (actors/losses/) against PyTorch's own
// values on the same inputs (tests/reference/loss_reference.json, made by
// make_loss_reference.py with torch.nn.functional's losses, reduction "mean"): the mean loss
// and its gradient, computed as the loss actor computes them (grad_scale = 1 / the terms,
// the loss sum over the term count), with the settings torch was given.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model/loss.hpp"
#include "tests/kernels/kernel_test_support.hpp"

using namespace troupe;

namespace {

nlohmann::json reference_cases() {
  std::ifstream file{TROUPE_SOURCE_DIR "/tests/reference/loss_reference.json"};
  REQUIRE(file.good());
  return nlohmann::json::parse(file).at("cases");
}

model_section loss_config(const nlohmann::json& c) {
  model_section model;
  model.loss = c.at("loss").get<std::string>();
  for (const auto& [key, value] : c.at("settings").items()) {
    setting_value setting;
    if (value.is_number_integer())
      setting.value = value.get<std::int64_t>();
    else
      setting.value = value.get<double>();
    model.loss_settings.emplace(key, setting);
  }
  return model;
}

}  // namespace

TEST_CASE("every built-in loss kind gives PyTorch's mean loss and gradient") {
  const auto cases = reference_cases();
  REQUIRE(cases.size() >= 9);
  for (const auto& c : cases) {
    CAPTURE(c.at("name").get<std::string>());
    const auto loss = create_loss(loss_config(c), kernels::device_type::cpu);
    const auto spec = loss->spec();
    const auto shape = c.at("shape").get<std::vector<std::int64_t>>();
    const auto input = c.at("input").get<std::vector<float>>();
    const bool ids = spec.targets == target_kind::class_ids;
    std::vector<std::int32_t> labels;
    std::vector<float> values;
    std::int64_t terms = 0;  // as the loader counts them (data_loader_actor.cpp)
    if (ids) {
      labels = c.at("targets").get<std::vector<std::int32_t>>();
      for (auto label : labels)
        terms += label != spec.ignore_index ? 1 : 0;
    } else {
      for (const auto& t : c.at("targets"))
        if (t.is_array())
          for (const auto& v : t)
            values.push_back(v.get<float>());
        else
          values.push_back(t.get<float>());
      terms = static_cast<std::int64_t>(values.size());
    }
    std::vector<float> sums(2 + loss_job::max_metrics, 0.0f);
    std::vector<float> gradient(input.size());
    loss_job job;
    job.rows = shape[0];
    job.width = shape[1];
    job.output = input.data();
    job.class_ids = ids ? labels.data() : nullptr;
    job.values = ids ? nullptr : values.data();
    job.grad_scale = 1.0f / static_cast<float>(terms);
    job.sums = sums.data();
    job.doutput = gradient.data();
    loss->compute(test::cpu_context(), job);

    CHECK(sums[1] == static_cast<float>(terms));
    // float32 on both sides, summed in different orders over <= 18 terms: a few ulp of the
    // mean; the gradient elements are one formula each (1e-6 of the largest, 1/terms).
    const double mean = sums[0] / sums[1];
    const double want = c.at("mean_loss").get<double>();
    CHECK(std::abs(mean - want) <= 1e-6 * std::abs(want) + 1e-7);
    TROUPE_CHECK_CLOSE(gradient, c.at("gradient").get<std::vector<double>>(), 1e-7, 1e-5);
  }
}

TEST_CASE("a loss kind's settings are checked: unknown names, keys and ranges") {
  model_section model;
  model.loss = "mes";
  model.loss_type_where = source_position{"m.toml", 3, 8};
  CHECK_THROWS_WITH_AS(create_loss(model, kernels::device_type::cpu),
                       doctest::Contains("m.toml:3:8: unknown loss 'mes'; did you mean 'mse'?"),
                       config_error);
  model.loss = "huber";
  model.loss_settings["delta"] = setting_value{0.0, source_position{"m.toml", 3, 30}};
  CHECK_THROWS_WITH_AS(create_loss(model, kernels::device_type::cpu),
                       doctest::Contains("m.toml:3:30"), config_error);
  model.loss = "mse";
  model.loss_settings = {{"detla", setting_value{1.0, source_position{"m.toml", 3, 30}}}};
  CHECK_THROWS_WITH_AS(create_loss(model, kernels::device_type::cpu),
                       doctest::Contains("unknown setting 'detla'"), config_error);
  model.loss = "softmax_xent";
  model.loss_settings = {{"label_smoothing", setting_value{1.5, source_position{"m.toml", 3, 9}}}};
  CHECK_THROWS_AS(create_loss(model, kernels::device_type::cpu), config_error);
}
