// The troupe command line: usage, help, exit codes and error messages for bad input.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/run_troupe.hpp"
#include "tests/config_text.hpp"
#include "tests/temp_files.hpp"
#include "troupe/exit_code.hpp"

namespace {

using troupe::testing::run_shell;
using troupe::testing::run_troupe;
using troupe::testing::write_config;

// 12 lines: [data] on line 2, [[model.layers]] on line 10 (the bad-config cases count on it).
const std::string small_model =
    troupe::test::data_section({32, 256, 64, 16, 3}) + "\n" + troupe::test::linear(3);

}  // namespace

TEST_CASE("troupe without a command prints its usage and exits 2") {
  auto r = run_troupe("");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("usage: troupe <command>") != std::string::npos);
}

TEST_CASE("--help on troupe and on each command prints usage and exits 0") {
  for (const char* args : {"--help", "run --help", "layers --help"}) {
    auto r = run_troupe(args);
    INFO(args);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("usage: troupe") != std::string::npos);
  }
  // `troupe help CMD` is CMD's help, as `troupe CMD --help` is.
  auto help_run = run_troupe("help run");
  CHECK(help_run.exit_code == 0);
  CHECK(help_run.output.find("usage: troupe run CONFIG.toml") != std::string::npos);
  // Help or a version that cannot be written is a failure (exit 1), as any output is.
  for (const char* args : {"--help > /dev/full", "--version > /dev/full"}) {
    INFO(args);
    CHECK(run_troupe(args).exit_code == 1);
  }
}

TEST_CASE("troupe run without a config prints its usage and exits 2") {
  auto r = run_troupe("run");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("missing CONFIG.toml") != std::string::npos);
  CHECK(r.output.find("usage: troupe run CONFIG.toml") != std::string::npos);
}

TEST_CASE("an unknown command suggests the nearest one") {
  auto r = run_troupe("rnu x.toml");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("unknown command 'rnu'; did you mean 'run'?") != std::string::npos);
}

TEST_CASE("a missing config file is an error with exit code 2") {
  auto r = run_troupe("run /nonexistent/dir/nope.toml");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("cannot open config file '/nonexistent/dir/nope.toml'") != std::string::npos);
}

TEST_CASE("bad configs fail with file:line:col, the nearest name and exit code 2") {
  struct bad_case {
    const char* name;
    std::string text;
    std::string expected;  // after "<path>:"
  };
  std::string model = small_model;
  std::vector<bad_case> cases = {
      {"unknown_layer", model + "\n[[model.layers]]\ntype = \"linaer\"\n",
       "15:8: unknown layer type 'linaer'; did you mean 'linear'?"},
      {"unknown_key", "[optimizer]\nlr_rate = 0.1\n" + model,
       "2:1: unknown key 'lr_rate' in [optimizer]; did you mean 'lr'?"},
      {"wrong_type", "[run]\nepochs = \"five\"\n" + model,
       "2:10: [run] epochs: expected an integer, found a string"},
      {"bad_shapes", model + "\n[[model.layers]]\ntype = \"linear\"\nout = 7\n",
       "14:1: the model's output shape (7) must be (3)"},
      {"missing_data",
       "[data]\npath = \"/nonexistent/fashion\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n",
       "2:8: "},
      {"bad_setting", model + "\n[[model.layers]]\ntype = \"relu\"\nslope = 0.1\n",
       "16:1: unknown setting 'slope' for layer 'relu'"},
      {"bad_balance", "[parallel]\nbalance = [1, 0]\n" + model,
       "2:15: [parallel] balance: expected a number > 0, found 0"},
      {"balance_count",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\nbalance = [1]\n" + model,
       "4:11: [parallel] balance: 1 weight(s), but the run has 2 replica(s)"},
  };
  for (const auto& c : cases) {
    auto path = write_config(c.name, c.text);
    auto r = run_troupe("run " + path);
    INFO(c.name, ": ", r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(path + ":" + c.expected) != std::string::npos);
    CHECK(r.output.find("samples/s") == std::string::npos);  // nothing ran
  }
}

TEST_CASE(
    "troupe plan prints the rows each replica takes when [parallel] balance splits unevenly") {
  const std::string parallel = "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n";
  auto weighted =
      run_troupe("plan " + write_config("weighted", parallel + "balance = [1, 3]\n" + small_model));
  INFO(weighted.output);
  CHECK(weighted.exit_code == 0);
  CHECK(weighted.output.find("rows of each step's batch of 32 ([parallel] balance): r0 8, r1 24") !=
        std::string::npos);
  auto even = run_troupe("plan " + write_config("even", parallel + small_model));
  CHECK(even.exit_code == 0);
  CHECK(even.output.find("rows of each step's batch") == std::string::npos);
}

TEST_CASE("troupe run trains a small config and reports test accuracy") {
  auto path = write_config("good", std::string{"[run]\nepochs = 2\nlog_every = 4\n"} + small_model);
  auto metrics = std::filesystem::path{troupe::test::temp_file("troupe_cli_good.jsonl")};
  auto r = run_troupe("run " + path + " --metrics " + metrics.string());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("step 8/16") != std::string::npos);  // plain lines: not a terminal
  CHECK(r.output.find("test accuracy") != std::string::npos);
  CHECK(std::filesystem::file_size(metrics) > 0);
}

TEST_CASE("troupe layers lists the built-in layers") {
  auto r = run_troupe("layers");
  CHECK(r.exit_code == 0);
  for (const char* name : {"linear", "relu", "gelu", "tanh"})
    CHECK(r.output.find(name) != std::string::npos);
}

TEST_CASE("--log-messages prints the messages that match its filter as they are handled") {
  auto path = write_config("log", std::string{"[run]\nsteps = 2\nevaluate = false\n"} + small_model);
  auto r = run_troupe("run " + path + " --quiet --metrics /dev/null --log-messages kind=backward,step=1");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("loss             -> layer_0          backward   step 1") != std::string::npos);
  CHECK(r.output.find("step 0") == std::string::npos);
  CHECK(r.output.find(" forward ") == std::string::npos);
  auto bad = run_troupe("run " + path + " --log-messages colour=red");
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("unknown filter term 'colour=red'") != std::string::npos);
}

TEST_CASE("troupe calibrate prints each layer's times, or JSON, and refuses bad options") {
  auto path = write_config("calibrate", std::string{small_model});
  auto text = run_troupe("calibrate " + path + " --repeats 2");
  INFO(text.output);
  CHECK(text.exit_code == 0);
  CHECK(text.output.find("forward") != std::string::npos);
  CHECK(text.output.find("linear") != std::string::npos);
  auto json = run_troupe("calibrate " + path + " --repeats 2 --json");
  REQUIRE(json.exit_code == 0);
  CHECK(json.output.find("\"layers\"") != std::string::npos);
  auto zero = run_troupe("calibrate " + path + " --repeats 0");
  CHECK(zero.exit_code == 2);
  CHECK(zero.output.find("--repeats should be between 1 and 10000, not 0") != std::string::npos);
  auto huge = run_troupe("calibrate " + path + " --repeats 99999999999");
  CHECK(huge.exit_code == 2);
  CHECK(huge.output.find("not 99999999999") != std::string::npos);
  auto words = run_troupe("calibrate " + path + " --repeats many");
  CHECK(words.exit_code == 2);
  CHECK(run_troupe("--help").output.find("calibrate CONFIG.toml") != std::string::npos);
  // The help names everything the table reports (the gather's bandwidth was missing once).
  auto help = run_troupe("calibrate --help").output;
  for (const char* measured : {"update", "copy", "sum", "gather", "loss", "another device's thread",
                               "two devices at once", "a message handled", "a host turn"}) {
    CHECK_MESSAGE(text.output.find(measured) != std::string::npos, measured);
    CHECK_MESSAGE(help.find(measured) != std::string::npos, measured);
  }
}

TEST_CASE("troupe calibrate of a config with GPU devices says that it times a CPU thread") {
  auto gpu = write_config("calibrate_gpu", small_model + "\n[parallel]\ndevices = [\"cuda:0\"]\n");
  auto r = run_troupe("calibrate " + gpu + " --repeats 1");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("names GPU devices (cuda:0); calibrate times its ops on a CPU thread") !=
        std::string::npos);
  auto cpu = run_troupe("calibrate " + write_config("calibrate_cpu", small_model) + " --repeats 1");
  CHECK(cpu.output.find("names GPU devices") == std::string::npos);
}

TEST_CASE("troupe simulate predicts a step from a calibration, or times one, and refuses bad options") {
  auto path = write_config("simulate", std::string{small_model} +
                                           "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n");
  auto text = run_troupe("simulate " + path + " --repeats 2 --steps 4");
  INFO(text.output);
  REQUIRE(text.exit_code == 0);
  CHECK(text.output.find("predicted step:") != std::string::npos);
  CHECK(text.output.find("critical path") != std::string::npos);
  // From a calibration file, with the config changed on the command line, JSON out and a
  // trace that troupe trace reads.
  auto calibration = troupe::test::temp_file("simulate_calibration.json");
  REQUIRE(run_troupe("calibrate " + path + " --repeats 2 -o " + calibration).exit_code == 0);
  auto trace = troupe::test::temp_file("simulate_trace.json");
  auto json = run_troupe("simulate " + path + " --calibration " + calibration +
                         " --set parallel.data=1 --steps 3 --json --trace " + trace);
  INFO(json.output);
  REQUIRE(json.exit_code == 0);
  auto j = nlohmann::json::parse(json.output);
  CHECK(j["replicas"] == 1);
  CHECK(j["step_us"].get<double>() > 0);
  CHECK(run_troupe("trace summary " + trace).exit_code == 0);
  auto bad_set = run_troupe("simulate " + path + " --set parallel.data");
  CHECK(bad_set.exit_code == 2);
  CHECK(bad_set.output.find("expected SECTION.KEY=VALUE") != std::string::npos);
  auto bad_link = run_troupe("simulate " + path + " --link fast");
  CHECK(bad_link.exit_code == 2);
  CHECK(bad_link.output.find("--link 'fast'") != std::string::npos);
  auto missing = run_troupe("simulate " + path + " --calibration /nonexistent.json");
  CHECK(missing.exit_code == 2);
  auto garbage = run_troupe("simulate " + path + " --calibration " + path);
  CHECK(garbage.exit_code == 2);
  CHECK(garbage.output.find("not a calibration") != std::string::npos);
  auto steps = run_troupe("simulate " + path + " --steps 1");
  CHECK(steps.exit_code == 2);
  CHECK(run_troupe("--help").output.find("simulate CONFIG.toml") != std::string::npos);
  CHECK(run_troupe("simulate --help").output.find("--link") != std::string::npos);
  auto search = run_troupe("simulate " + path + " --calibration " + calibration +
                           " --search 2 --top 2");
  INFO(search.output);
  CHECK(search.exit_code == 0);
  CHECK(search.output.find("the best 2 shown") != std::string::npos);
  CHECK(run_troupe("simulate " + path + " --search 2 --json").exit_code == 2);
  CHECK(run_troupe("simulate " + path + " --search 0").exit_code == 2);
  // Options that would do nothing are refused, not ignored.
  auto top = run_troupe("simulate " + path + " --calibration " + calibration + " --top 2");
  CHECK(top.exit_code == 2);
  CHECK(top.output.find("--top is a --search option") != std::string::npos);
  auto repeats = run_troupe("simulate " + path + " --calibration " + calibration + " --repeats 3");
  CHECK(repeats.exit_code == 2);
  CHECK(repeats.output.find("with --calibration nothing is timed") != std::string::npos);
}

TEST_CASE("troupe verify passes a parallel config and check-layer checks a layer") {
  auto path = write_config("verify", std::string{small_model} +
                                         "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n");
  auto r = run_troupe("verify " + path + " --steps 5");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("PASS: worst relative difference") != std::string::npos);
  CHECK(r.output.find("layer  type           parameter    relative difference") !=
        std::string::npos);
  CHECK(r.output.find("0      linear         weight ") != std::string::npos);
  CHECK(r.output.find("0      linear         bias ") != std::string::npos);
  // A ring in bf16 rounds gradients by design: checked as the fp32 ring, saying so.
  auto bf16 = run_troupe("verify " + path + " --steps 5 --set parallel.reduce_dtype='\"bf16\"'");
  INFO(bf16.output);
  CHECK(bf16.exit_code == 0);
  CHECK(bf16.output.find("reduce_dtype = \"bf16\" rounds the gradients on the ring, which one "
                         "device does not; the wiring is checked with reduce_dtype = \"fp32\"") !=
        std::string::npos);
  CHECK(bf16.output.find("PASS: worst relative difference") != std::string::npos);
  auto layer = run_troupe("check-layer linear --set out=4 --input 6");
  CHECK(layer.exit_code == 0);
  CHECK(layer.output.find("linear: input (3, 6), output (3, 4)") != std::string::npos);
  auto image = run_troupe("check-layer conv2d --set out=2 --set kernel=3 --set padding=1 "
                          "--input 2x5x4 --batch 2");
  INFO(image.output);
  CHECK(image.exit_code == 0);
  CHECK(image.output.find("conv2d: input (2, 2, 5, 4), output (2, 2, 5, 4)") != std::string::npos);
  auto bad_shape = run_troupe("check-layer conv2d --set out=2 --set kernel=3 --input 2y5");
  CHECK(bad_shape.exit_code == 2);
  CHECK(bad_shape.output.find("--input expects a size or sizes joined by 'x'") !=
        std::string::npos);
  // An input the layer cannot take is refused by its output shape, before its parameters
  // are sized from it (attention read a rank-1 input's channels: an internal error, exit 1).
  auto rank_one = run_troupe("check-layer attention --set heads=1 --input 4");
  CHECK(rank_one.exit_code == 2);
  CHECK(rank_one.output.find("layer 'attention' takes sequences of shape (positions, channels), "
                             "found (4)") != std::string::npos);
  auto unknown = run_troupe("check-layer linaer");
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.output.find("did you mean 'linear'?") != std::string::npos);
}

TEST_CASE("the exit codes page and troupe --help list the exit codes of the exit_code enum") {
  using troupe::exit_code;
  std::ifstream in(std::string{TROUPE_SOURCE_DIR} + "/docs/reference/exit-codes.md");
  REQUIRE(in);
  std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto help = run_troupe("--help").output;
  const std::pair<exit_code, const char*> meanings[] = {
      {exit_code::ok, "success"},
      {exit_code::run_failed, "the run failed"},
      {exit_code::bad_input, "bad input"},
      {exit_code::watchdog, "stopped by the watchdog"},
      {exit_code::interrupted, "interrupted by SIGINT"},
      {exit_code::terminated, "interrupted by SIGTERM"}};
  for (const auto& entry : meanings) {  // not a binding: INFO's lambda (clang 14)
    const std::string meaning = entry.second;
    const auto number = std::to_string(troupe::exit_status(entry.first));
    INFO(number << " " << meaning);
    CHECK(page.find("| " + number + " | " + meaning) != std::string::npos);  // its table row
    CHECK(help.find(number + " " + meaning) != std::string::npos);
  }
}

TEST_CASE("a config's paths follow the config file and --metrics the working directory") {
  // Note [relative paths] in runtime/config/config.cpp: started from another folder, a run
  // writes its [run] metrics beside its config, not where it was started.
  troupe::test::temp_directory configs{"troupe-paths-config"}, elsewhere{"troupe-paths-cwd"};
  const auto config = configs.file("c.toml");
  std::ofstream(config) << "[run]\nsteps = 1\nevaluate = false\nmetrics = \"runs/m.jsonl\"\n" +
                               troupe::test::data_section({8, 16, 8, 5, 3}) +
                               troupe::test::linear(3);
  const std::string in_elsewhere = "cd '" + elsewhere.path().string() + "' && " + TROUPE_BINARY;
  auto r = run_shell(in_elsewhere + " run '" + config + "' -q 2>&1");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(std::filesystem::exists(configs.file("runs/m.jsonl")));
  CHECK_FALSE(std::filesystem::exists(elsewhere.file("runs")));
  // On the command line, a path is the working directory's.
  auto given = run_shell(in_elsewhere + " run '" + config + "' -q --metrics cli.jsonl 2>&1");
  INFO(given.output);
  CHECK(given.exit_code == 0);
  CHECK(std::filesystem::exists(elsewhere.file("cli.jsonl")));
  CHECK_FALSE(std::filesystem::exists(configs.file("cli.jsonl")));
}

TEST_CASE("every command that reads a config takes --set, and run, plan and verify apply it") {
  for (const std::string command :
       {"run", "launch", "plan", "verify", "eval", "predict", "calibrate", "simulate"}) {
    auto help = run_troupe(command + " --help");
    INFO(command << ": " << help.output);
    CHECK(help.exit_code == 0);
    CHECK(help.output.find("--set arg") != std::string::npos);
  }
  const auto path = write_config("set", std::string{small_model});
  auto plan = run_troupe("plan " + path +
                         " --set parallel.data=2 --set 'parallel.devices=[\"cpu:0\", \"cpu:1\"]'");
  INFO(plan.output);
  CHECK(plan.exit_code == 0);
  CHECK(plan.output.find("R = 2 replicas") != std::string::npos);
  auto run = run_troupe("run " + path + " --set run.steps=3 --set run.evaluate=false -q");
  INFO(run.output);
  CHECK(run.exit_code == 0);
  CHECK(run.output.find("done: 3 steps") != std::string::npos);
  auto verify = run_troupe("verify " + path + " --steps 2 --set parallel.data=2 --set "
                           "'parallel.devices=[\"cpu:0\", \"cpu:1\"]'");
  INFO(verify.output);
  CHECK(verify.exit_code == 0);
  CHECK(verify.output.find("PASS") != std::string::npos);
  // A bad change is bad input, named by its --set.
  auto typo = run_troupe("run " + path + " --set run.stepz=3");
  CHECK(typo.exit_code == 2);
  CHECK(typo.output.find("--set 'run.stepz=3'") != std::string::npos);
  CHECK(typo.output.find("did you mean 'steps'?") != std::string::npos);
}

TEST_CASE("one name for one quantity: samples_per_s and seconds as _s in metrics and simulate") {
  const auto path = write_config("names", std::string{small_model});
  troupe::test::temp_directory out{"troupe-names"};
  const auto metrics = out.file("m.jsonl");
  auto run = run_troupe("run " + path + " --steps 3 -q --metrics " + metrics);
  REQUIRE(run.exit_code == 0);
  std::ifstream lines{metrics};
  std::string line, last;
  while (std::getline(lines, line))
    last = line;
  const auto done = nlohmann::json::parse(last);
  CHECK(done.contains("samples_per_s"));
  CHECK(done.contains("train_s"));
  CHECK_FALSE(done.contains("train_seconds"));
  auto simulated = run_troupe("simulate " + path + " --steps 2 --repeats 1 --json");
  INFO(simulated.output);
  REQUIRE(simulated.exit_code == 0);
  const auto prediction = nlohmann::json::parse(simulated.output);
  CHECK(prediction.contains("samples_per_s"));
  CHECK(prediction.contains("wall_s"));
  CHECK_FALSE(prediction.contains("samples_per_second"));
}

TEST_CASE("JSON troupe reads is accepted as Windows editors save it: a byte-order mark, CR LF") {
  const auto path = write_config("windows", std::string{small_model});
  troupe::test::temp_directory out{"troupe-windows"};
  const auto metrics = out.file("m.jsonl"), trace = out.file("t.json"), costs = out.file("c.json");
  REQUIRE(run_troupe("run " + path + " --steps 3 -q --metrics " + metrics + " --trace " + trace)
              .exit_code == 0);
  REQUIRE(run_troupe("calibrate " + path + " --repeats 1 --json -o " + costs).exit_code == 0);
  // Each file rewritten with a UTF-8 byte-order mark first and CR LF line ends.
  for (const auto& file : {metrics, trace, costs}) {
    std::ifstream in{file};
    std::string text = "\xEF\xBB\xBF", line;
    while (std::getline(in, line))
      text += line + "\r\n";
    in.close();
    std::ofstream(file) << text;
  }
  auto plotted = run_troupe("plot " + metrics + " -o " + out.file("p.svg"));
  INFO(plotted.output);
  CHECK(plotted.exit_code == 0);
  CHECK(run_troupe("plot " + metrics + " --x seconds -o " + out.file("s.svg")).exit_code == 0);
  auto bad_axis =
      run_troupe("plot " + metrics + " --x " + std::string(5000, 'q') + " -o " + out.file("q.svg"));
  CHECK(bad_axis.exit_code == 2);
  CHECK(bad_axis.output.find("expected steps or seconds") != std::string::npos);
  auto summary = run_troupe("trace summary " + trace);
  INFO(summary.output.substr(0, 400));
  CHECK(summary.exit_code == 0);
  auto simulated = run_troupe("simulate " + path + " --steps 2 --calibration " + costs);
  INFO(simulated.output.substr(0, 400));
  CHECK(simulated.exit_code == 0);
}

TEST_CASE("a UTF-16 file is refused as such, and an invisible character is named where it is") {
  troupe::test::temp_directory dir{"troupe-encodings"};
  const std::string utf16 = std::string("\xFF\xFE[\0r\0u\0n\0]\0\n\0", 14);
  for (const auto& [name, how] : std::vector<std::pair<std::string, std::string>>{
           {"u.toml", "plan "}, {"u.json", "trace summary "}, {"u.jsonl", "plot -o x.svg "}}) {
    const std::string file = name, command = how;  // not bindings: INFO's lambda captures them (clang 14)
    std::ofstream(dir.file(file), std::ios::binary) << utf16;
    auto r = run_troupe(command + dir.file(file));
    INFO(command << file << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("is UTF-16 text (it starts with the byte-order mark FF FE") !=
          std::string::npos);
  }
  // A CSV's cell with a no-break space (pasted from a web page) shows it.
  std::ofstream(dir.file("t.csv")) << "a,b,y\n1,2\xC2\xA0,0\n3,4,1\n";
  std::ofstream(dir.file("c.toml")) << "[data]\nsource = \"csv\"\npath = \"t.csv\"\ntarget = \"y\"\n"
                                       "validation = 0.5\n[[model.layers]]\ntype = \"linear\"\n"
                                       "out = 2\n";
  auto cell = run_troupe("plan " + dir.file("c.toml"));
  INFO(cell.output);
  CHECK(cell.output.find("holds '2\\u00A0'") != std::string::npos);
  // JSON that stops at one is named there.
  std::ofstream(dir.file("t.json")) << "{\"traceEvents\": [\xC2\xA0]}";
  auto trace = run_troupe("trace summary " + dir.file("t.json"));
  CHECK(trace.output.find("at byte 18, U+00A0 (a no-break space)") != std::string::npos);
}

TEST_CASE("troupe plan lists the layers that run fused, and none with fuse_layers off") {
  const auto path = write_config("fused", troupe::test::data_section({32, 256, 64, 16, 3}) +
                                              "\n" + troupe::test::linear(8) +
                                              troupe::test::layer("relu") +
                                              troupe::test::linear(3));
  auto plan = run_troupe("plan " + path);
  INFO(plan.output);
  CHECK(plan.exit_code == 0);
  CHECK(plan.output.find("fused layers (1 actor runs several") != std::string::npos);
  CHECK(plan.output.find("layer_0..layer_2: layer_0 layer_1 layer_2") != std::string::npos);
  auto off = run_troupe("plan " + path + " --set run.fuse_layers=false");
  INFO(off.output);
  CHECK(off.exit_code == 0);
  CHECK(off.output.find("fused") == std::string::npos);
  CHECK(run_troupe("plan --help").output.find("fuse_layers") != std::string::npos);
}
