// echo_bounds_test.cpp: every message that quotes user input quotes it short. Each channel
// (a config value, a key, a name, a path, a command-line option or value, an environment
// variable, a field of a file troupe reads) is fed a megabyte (a command-line value, which
// Linux caps at 128 KiB, 100 KB), and what troupe prints must stay a few kilobytes: the
// value cut by quote_user_text ("'AAA...'... (1000000 bytes)") or left out. Found from outside:
// a metrics path of 10 MB came back whole.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cli/run_troupe.hpp"
#include "tests/temp_files.hpp"

namespace {

using troupe::testing::run_shell;

const std::string big(1'000'000, 'A');  // in files
const std::string arg(100'000, 'B');     // on the command line

const std::string tiny = R"([run]
steps = 2
evaluate = false
metrics = ""
[data]
source = "synthetic"
synthetic_features = 16
)";
const std::string linear_model = "[[model.layers]]\ntype = \"linear\"\nout = 10\n";

struct channel {
  std::string name;
  std::string config;                     // c.toml's text ("" for none)
  std::string arguments;                  // after the troupe binary, in the work folder
  std::vector<std::pair<std::string, std::string>> files = {};  // more files: name, text
  std::string environment = "";           // VAR=value before the command
};

// Runs `c` in a fresh folder; what it printed (stdout and stderr) and its exit code.
troupe::testing::command_result run_channel(const channel& c) {
  troupe::test::temp_directory work{"troupe-echo"};
  if (!c.config.empty())
    std::ofstream(work.file("c.toml")) << c.config;
  for (const auto& [name, text] : c.files) {
    std::filesystem::create_directories(std::filesystem::path(work.file(name)).parent_path());
    std::ofstream(work.file(name)) << text;
  }
  return run_shell("cd '" + work.path().string() + "' && " + c.environment + " " +
                   TROUPE_BINARY + " " + c.arguments + " 2>&1");
}

std::string with(std::string text, const std::string& from, const std::string& to) {
  return text.replace(text.find(from), from.size(), to);
}

}  // namespace

TEST_CASE("a megabyte of input in any quoted place comes back as a few kilobytes at most") {
  const std::string synthetic = "\"synthetic\"";
  const std::string two_nodes = tiny + linear_model +
                                "[cluster]\nnodes = 2\ntimeout = 1\n[parallel]\n"
                                "devices = [\"node0/cpu:0\", \"node1/cpu:0\"]\n";
  const std::vector<channel> channels = {
      {"a section name", tiny + linear_model + "[" + big + "]\nx = 1\n", "run c.toml"},
      {"a key", tiny + big + " = 1\n" + linear_model, "run c.toml"},
      {"a layer type", tiny + "[[model.layers]]\ntype = \"" + big + "\"\n", "run c.toml"},
      {"a layer's text setting",
       tiny + "[[model.layers]]\ntype = \"linear\"\nout = 10\ninit = \"" + big + "\"\n",
       "run c.toml"},
      {"a device", tiny + linear_model + "[parallel]\ndevices = [\"" + big + "\"]\n", "run c.toml"},
      {"[run] metrics",
       with(tiny, "metrics = \"\"", "metrics = \"nodir/" + big + "\"") + linear_model,
       "run c.toml"},
      {"[run] metrics under a file",
       with(tiny, "metrics = \"\"", "metrics = \"f/" + big + "\"") + linear_model,
       "run c.toml",
       {{"f", "a file"}}},
      {"[run] checkpoint",
       with(tiny, "[run]\n", "[run]\ncheckpoint = \"" + big + "\"\n") + linear_model, "run c.toml"},
      {"[run] trace", with(tiny, "[run]\n", "[run]\ntrace = \"" + big + "\"\n") + linear_model,
       "run c.toml"},
      {"[data] path", with(tiny, synthetic, "\"csv\"") + "path = \"" + big + "\"\n" + linear_model,
       "run c.toml"},
      {"a CSV header and target",
       with(tiny, synthetic, "\"csv\"") + "path = \"x.csv\"\ntarget = \"zz\"\n" + linear_model,
       "run c.toml",
       {{"x.csv", big + ",y\n1,0\n2,1\n"}}},
      {"a loss", tiny + "[model]\nloss = \"" + big + "\"\n" + linear_model, "run c.toml"},
      {"an optimizer", tiny + linear_model + "[optimizer]\ntype = \"" + big + "\"\n", "run c.toml"},
      {"a string where a number goes",
       with(tiny, "steps = 2", "steps = \"" + big + "\"") + linear_model, "run c.toml"},
      {"an unknown command", "", arg},
      {"an unknown option", tiny + linear_model, "run c.toml --" + arg},
      {"a bad option value", tiny + linear_model, "run c.toml --steps " + arg},
      {"--metrics", tiny + linear_model, "run c.toml --metrics nodir/" + arg},
      {"--resume", tiny + linear_model, "run c.toml --resume " + arg},
      {"--set", tiny + linear_model, "run c.toml --set run.steps=" + arg},
      {"check-layer NAME", "", "check-layer " + arg},
      {"export -o", "", "export ck -o x/" + arg},
      {"plot -o", "", "plot m.jsonl -o x." + arg, {{"m.jsonl", "{\"step\":0,\"loss\":1}\n"}}},
      {"trace SUBCOMMAND", "", "trace " + arg + " t.json"},
      {"trace timeline --steps", "", "trace timeline t.json --steps " + arg},
      {"--log-messages", tiny + linear_model, "run c.toml --log-messages=" + arg + "=1"},
      {"TROUPE_COORDINATOR",
       two_nodes,
       "run c.toml",
       {},
       "TROUPE_RANK=1 TROUPE_WORLD_SIZE=2 TROUPE_SECRET=" + std::string(40, 's') +
           " TROUPE_COORDINATOR=" + arg},
      {"[cluster] listen",
       with(two_nodes, "timeout = 1\n", "timeout = 1\nlisten = \"" + big + "\"\n"),
       "run c.toml",
       {},
       "TROUPE_SECRET=" + std::string(40, 's')},
      {"a vocabulary file",
       with(tiny, synthetic, "\"tokens\"") + "path = \"t.bin\"\n" + linear_model,
       "run c.toml",
       {{"t.bin", std::string(64, '\1')}, {"t.vocab.json", "{\"vocab_size\": \"" + big}}},
      {"a trace's actor names",
       "",
       "trace summary t.json",
       {{"t.json",
         "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"job\", \"name\": \"forward\", "
         "\"pid\": 0, \"tid\": 1, \"ts\": 0, \"dur\": 5, \"args\": {\"actor\": \"" +
             big + "\"}}]}"}}},
  };
  for (const auto& c : channels) {
    const auto result = run_channel(c);
    const auto& name = c.name;  // not a binding: INFO's lambda captures it (clang 14)
    INFO(name << " (exit " << result.exit_code << "): " << result.output.substr(0, 600));
    CHECK(result.output.size() < 4096);
    const bool refused = result.exit_code != 0;
    CHECK((refused || name == "a trace's actor names"));
  }
}
