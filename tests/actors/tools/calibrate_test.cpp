// troupe calibrate (actors/tools/calibrate.hpp): fixed-cost layers time at their set costs, each
// layer at the rows its wiring gives it and in the precision the run computes it in, and the
// JSON says so.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "actors/session/prepare.hpp"
#include "actors/session/session.hpp"
#include "actors/tools/calibrate.hpp"
#include "actors/tools/simulate.hpp"
#include "actors/training/layer_actor.hpp"
#include "kernels/cpu/onednn_matmul.hpp"
#include "runtime/config/config.hpp"
#include "runtime/graph/topology.hpp"
#include "tests/config_text.hpp"
#include "troupe/error.hpp"

using namespace troupe;

namespace {

// A relu, then two delay layers: 3 ms forward, 6 ms backward (2 ms of it the weight
// gradient), and a linear layer; global batch 64 over R = 2 replicas and M = 4 micro-batches.
std::string fixed_cost_config() {
  return "[run]\nsteps = 1\nevaluate = false\n" + test::data_section({64, 256, 8, 6, 3}) +
         test::layer("relu") +
         test::layer("delay", "forward_us = 3000\nbackward_us = 6000\nweight_us = 2000\n") +
         test::layer("delay", "forward_us = 3000\nbackward_us = 6000\nweight_us = 2000\n") +
         test::linear(3) +
         "[optimizer]\ntype = \"adamw\"\nlr = 0.01\n"
         "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\", \"cpu:2\", \"cpu:3\"]\ndata = 2\n"
         "pipeline = 2\nmicrobatches = 4\n";
}

}  // namespace

TEST_CASE("calibrate times fixed-cost layers at their set costs, at the wiring's micro-batch rows") {
  const auto config = parse_config(fixed_cost_config(), "calibrate.toml");
  const auto c = calibrate(config, "calibrate.toml", 3);
  CHECK(c.rows == 64 / (2 * 4));
  CHECK(c.optimizer == "adamw");
  REQUIRE(c.layers.size() == 4);  // replica 0's; every replica's are the same
  for (std::size_t i = 0; i < c.layers.size(); ++i) {
    CAPTURE(i);
    CHECK(c.layers[i].layer == static_cast<std::int64_t>(i));
    CHECK(c.layers[i].rows == 8);
  }
  CHECK(c.layers[0].type == "relu");
  CHECK(c.layers[0].parameters == 0);
  CHECK(c.layers[0].backward_input_us < 0);  // no split
  // A sleep takes at least its time, and (on an idle machine) not much more; the bounds
  // leave room for a loaded one.
  for (int i : {1, 2}) {
    CAPTURE(i);
    const auto& d = c.layers[static_cast<std::size_t>(i)];
    CHECK(d.type == "delay");
    CHECK(d.input == shape_t{6});
    CHECK(d.forward_us >= 3000);
    CHECK(d.forward_us < 3000 * 2);
    CHECK(d.backward_us >= 6000);
    CHECK(d.backward_us < 6000 * 2);
    CHECK(d.backward_input_us >= 4000);
    CHECK(d.backward_input_us < 4000 * 2);
    CHECK(d.backward_weight_us >= 2000);
    CHECK(d.backward_weight_us < 2000 * 2);
  }
  CHECK(c.layers[3].type == "linear");
  CHECK(c.layers[3].parameters == 6 * 3 + 3);
  CHECK(c.layers[3].forward_us > 0);
  CHECK(c.update_ns_per_parameter > 0);
  CHECK(c.copy_bytes == 8 * 6 * 4);
  CHECK(c.copy_gb_per_s > 0);

  const auto json = nlohmann::json::parse(format_calibration_json(c));
  CHECK(json["rows"] == 8);
  REQUIRE(json["layers"].size() == 4);
  CHECK(json["layers"][1]["backward_weight_us"].get<double>() == c.layers[1].backward_weight_us);
  CHECK_FALSE(json["layers"][0].contains("backward_input_us"));
  CHECK(format_calibration_text(c).find("delay") != std::string::npos);
  CHECK_THROWS_AS(calibrate(config, "calibrate.toml", 0), user_error);

  // Handlers (Note [what a handler costs]): measured in a short run of the model on one
  // device; a message's handling takes some microseconds, not nothing and not a job's time.
  CHECK(c.handler_us > 0.1);
  CHECK(c.handler_us < 1000);
  CHECK(json["handler_us"].get<double>() == c.handler_us);
  CHECK(format_calibration_text(c).find("a message handled: ") != std::string::npos);
  CHECK(parse_calibration_json(format_calibration_json(c), "c.json").handler_us == c.handler_us);
  // A host turn (Note [what a host turn costs]): the host thread's CPU time a turn, its
  // wake-up included: more than nothing, less than a millisecond.
  CHECK(c.host_us > 0.1);
  CHECK(c.host_us < 1000);
  CHECK(json["host_us"].get<double>() == c.host_us);
  CHECK(format_calibration_text(c).find("a host turn: ") != std::string::npos);
  CHECK(parse_calibration_json(format_calibration_json(c), "c.json").host_us == c.host_us);
  // How stable the rounds were: a tenth under the median and a tenth over it.
  CHECK(c.rounds_low > 0);
  CHECK(c.rounds_low <= 1);
  CHECK(c.rounds_high >= 1);
  CHECK(format_calibration_text(c).find("rounds of the model's passes: 10% of them under") !=
        std::string::npos);
  // Between two processes (Note [between processes of one machine]): a small message takes
  // some microseconds and some CPU, a tensor crosses at some rate.
  CHECK(c.process_latency_us > 1);
  CHECK(c.process_latency_us < 100000);
  CHECK(c.message_cpu_us > 0.1);
  CHECK(c.message_cpu_us < 100000);
  CHECK(c.process_gb_per_s > 0.001);
  CHECK(json["process_latency_us"].get<double>() == c.process_latency_us);
  CHECK(format_calibration_text(c).find("between two processes here (through CAF over loopback)") !=
        std::string::npos);
}

TEST_CASE("calibrate does not measure handlers of an explicit config, and says so") {
  // An explicit config has no one-device form to run (troupe verify refuses it alike).
  const auto shorthand =
      parse_config("[run]\nsteps = 1\nevaluate = false\n" + test::data_section({16, 64, 8, 6, 3}) +
                       test::linear(3) + "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n",
                   "shorthand.toml");
  const auto ejected =
      parse_config(format_explicit(prepare_session(shorthand).graph, shorthand), "explicit.toml");
  REQUIRE(ejected.is_explicit());
  const auto c = calibrate(ejected, "explicit.toml", 2);
  CHECK(c.handler_us < 0);
  CHECK_FALSE(nlohmann::json::parse(format_calibration_json(c)).contains("handler_us"));
  CHECK(format_calibration_text(c).find("a message handled: not measured") != std::string::npos);
  CHECK(parse_calibration_json(format_calibration_json(c), "c.json").handler_us < 0);
  CHECK(c.host_us < 0);
  CHECK(format_calibration_text(c).find("a host turn: not measured") != std::string::npos);
}

TEST_CASE("a bf16 config's layers are timed in bf16, and simulate wants a calibration of that") {
  if (!kernels::cpu::onednn_has_bf16()) {
    MESSAGE("skipped: this CPU has no native bf16 (oneDNN: " << kernels::cpu::onednn_isa_name()
                                                             << ")");
    return;
  }
  auto mlp = [](const std::string& last_layer_keys) {
    return "[run]\nsteps = 1\nevaluate = false\nprecision = \"bf16\"\n" +
           test::data_section({32, 128, 8, 40, 3}) + test::linear(16) + test::layer("relu") +
           test::layer("linear", "out = 3\n" + last_layer_keys);
  };
  const auto config = parse_config(mlp(""), "bf16.toml");
  // Each layer is timed with x and y in the dtypes a run gives them (Note [bf16
  // activations]): linear 0 makes bf16 for the relu, which keeps it for linear 2, which
  // makes f32 for the loss.
  const auto types =
      activation_dtypes(expand_shorthand(config, check_model(config, 40, 3)), config);
  REQUIRE(types.size() == 3);
  CHECK((types[0].x == dtype::f32 && types[0].y == dtype::bf16));
  CHECK((types[1].x == dtype::bf16 && types[1].y == dtype::bf16));
  CHECK((types[2].x == dtype::bf16 && types[2].y == dtype::f32));
  const auto c = calibrate(config, "bf16.toml", 3);
  REQUIRE(c.layers.size() == 3);
  CHECK(c.layers[0].precision == "bf16");  // its weight arrives rounded, as in the run
  CHECK(c.layers[1].precision == "fp32");  // relu computes in fp32 only
  CHECK(c.layers[2].precision == "bf16");
  // Each optimizer rounds its version to bf16 once a step (a convert job): a cost per
  // parameter, far under a nanosecond's thousands.
  CHECK(c.convert_ns_per_parameter > 0);
  CHECK(c.convert_ns_per_parameter < 1000);
  const auto text = format_calibration_text(c);
  CHECK(text.find("linear (bf16)") != std::string::npos);
  CHECK(text.find("a version rounded to bf16: ") != std::string::npos);
  const auto back = parse_calibration_json(format_calibration_json(c), "c.json");
  CHECK(back.layers[0].precision == "bf16");
  CHECK(back.layers[1].precision == "fp32");
  CHECK(back.convert_ns_per_parameter == c.convert_ns_per_parameter);

  // A layer kept in fp32 by its own setting is timed in fp32; an fp32 run measures no rounding.
  const auto kept =
      calibrate(parse_config(mlp("precision = \"fp32\"\n"), "kept.toml"), "kept.toml", 2);
  CHECK(kept.layers[2].precision == "fp32");
  auto fp32_text = mlp("");
  fp32_text.replace(fp32_text.find("\"bf16\""), 6, "\"fp32\"");
  const auto fp32_config = parse_config(fp32_text, "fp32.toml");
  for (const auto& t : activation_dtypes(
           expand_shorthand(fp32_config, check_model(fp32_config, 40, 3)), fp32_config))
    CHECK((t.x == dtype::f32 && t.y == dtype::f32));
  const auto fp32 = calibrate(fp32_config, "fp32.toml", 2);
  CHECK(fp32.layers[0].precision == "fp32");
  CHECK(fp32.convert_ns_per_parameter < 0);
  CHECK_FALSE(
      nlohmann::json::parse(format_calibration_json(fp32)).contains("convert_ns_per_parameter"));

  // simulate prices the config with the calibration of its own precision, and refuses another.
  simulate_options options;
  options.steps = 4;
  const auto predicted = simulate_run(config, c, options);
  CHECK(predicted.step_us > 0);
  CHECK_THROWS_WITH_AS(simulate_run(config, fp32, options),
                       doctest::Contains("timed layer 0 in fp32, and this config computes it in "
                                         "bf16"),
                       user_error);
  CHECK_THROWS_WITH_AS(simulate_run(parse_config(fp32_text, "fp32.toml"), c, options),
                       doctest::Contains("timed layer 0 in bf16, and this config computes it in "
                                         "fp32"),
                       user_error);

  // A calibration file from before precisions: its layers read as fp32; another value is refused.
  auto j = nlohmann::json::parse(format_calibration_json(c));
  j["layers"][0].erase("precision");
  CHECK(parse_calibration_json(j.dump(), "c.json").layers[0].precision == "fp32");
  j["layers"][0]["precision"] = "half";
  CHECK_THROWS_WITH_AS(parse_calibration_json(j.dump(), "c.json"),
                       doctest::Contains("layers[0]: \"precision\" is 'half', expected \"fp32\" or "
                                         "\"bf16\""),
                       user_error);
  // A megabyte of it is quoted short; a nested value is not a string.
  j["layers"][0]["precision"] = std::string(1 << 20, 'x');
  try {
    parse_calibration_json(j.dump(), "c.json");
    FAIL("a megabyte precision was accepted");
  } catch (const user_error& e) {
    CHECK(std::string(e.what()).find("expected \"fp32\" or \"bf16\"") != std::string::npos);
    CHECK(std::string(e.what()).size() < 2000);
  }
  j["layers"][0]["precision"] = nlohmann::json::parse("{\"a\": [[{\"b\": 1}]]}");
  CHECK_THROWS_WITH_AS(parse_calibration_json(j.dump(), "c.json"), doctest::Contains("layers[0]"),
                       user_error);
}
