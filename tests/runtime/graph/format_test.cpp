// topology_format_test.cpp: format_table, format_dot and format_explicit.
//
// The table and the DOT graph are checked for completeness (every actor and wire is
// there) and form (aligned columns, balanced braces, and Graphviz's own verdict when
// `dot` is installed). The ejected TOML is checked by reading it back: it must give the
// same topology and the same run settings, doubles bit for bit.
#include "runtime/graph/topology.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/model/layer.hpp"
#include "tests/config_text.hpp"
#include "tests/runtime/graph/test_configs.hpp"
#include "tests/temp_files.hpp"
#include "tests/text_checks.hpp"

using namespace topology_test;
using troupe::parse_config;
using troupe::run_config;
using troupe::topology;

namespace {

std::vector<std::string> text_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

using troupe::test::contains;

/// Checks that two topologies describe the same run; positions aside.
void check_same_topology(const topology& a, const topology& b) {
  CHECK(a.devices == b.devices);
  CHECK(a.replicas == b.replicas);
  CHECK(a.stages == b.stages);
  CHECK(a.microbatches == b.microbatches);
  CHECK(a.schedule == b.schedule);
  CHECK(a.averaging == b.averaging);
  CHECK(a.shapes == b.shapes);
  REQUIRE(a.actors.size() == b.actors.size());
  for (std::size_t i = 0; i < a.actors.size(); ++i) {
    const auto& x = a.actors[i];
    const auto& y = b.actors[i];
    INFO("actor " << x.name);
    CHECK(x.name == y.name);
    CHECK(x.kind == y.kind);
    CHECK(x.custom_kind == y.custom_kind);
    CHECK(x.method == y.method);
    CHECK(x.device == y.device);
    CHECK(x.replica == y.replica);
    CHECK(x.stage == y.stage);
    CHECK(x.layer == y.layer);
    CHECK(x.math.type == y.math.type);
    auto values = [](const std::map<std::string, troupe::setting_value>& settings) {
      std::map<std::string, decltype(troupe::setting_value::value)> out;
      for (const auto& [key, setting] : settings)
        out.emplace(key, setting.value);
      return out;
    };
    CHECK(values(x.math.settings) == values(y.math.settings));
    CHECK(values(x.settings) == values(y.settings));
  }
  REQUIRE(a.wires.size() == b.wires.size());
  for (std::size_t i = 0; i < a.wires.size(); ++i) {
    INFO("wire " << a.wires[i].from << " -> " << a.wires[i].to);
    CHECK(a.wires[i].from == b.wires[i].from);
    CHECK(a.wires[i].to == b.wires[i].to);
    CHECK(a.wires[i].kind == b.wires[i].kind);
    CHECK(a.wires[i].capacity == b.wires[i].capacity);
  }
}

/// Ejects `t`, reads the text back and checks it gives the same topology and settings.
run_config round_trip(const topology& t, const run_config& config) {
  auto text = format_explicit(t, config);
  INFO("ejected:\n" << text);
  auto again = parse_config(text, "ejected.toml");
  auto back = topology_from_explicit(again, features);
  troupe::validate_topology(back, again, classes);
  check_same_topology(t, back);
  CHECK(again.run.epochs == config.run.epochs);
  CHECK(again.run.steps == config.run.steps);
  CHECK(again.run.seed == config.run.seed);
  // Ejected absolute: the ejected file may be written anywhere (Note [relative paths]).
  CHECK(again.run.metrics == std::filesystem::absolute(config.run.metrics).lexically_normal());
  CHECK(again.run.log_every == config.run.log_every);
  CHECK(again.run.evaluate == config.run.evaluate);
  CHECK(again.data.source == config.data.source);
  CHECK(again.data.batch_size == config.data.batch_size);
  CHECK(again.data.eval_batch_size == config.data.eval_batch_size);
  CHECK(again.data.shuffle == config.data.shuffle);
  CHECK(again.data.prefetch == config.data.prefetch);
  CHECK(again.data.synthetic_train == config.data.synthetic_train);
  CHECK(again.data.synthetic_test == config.data.synthetic_test);
  CHECK(again.data.synthetic_features == config.data.synthetic_features);
  CHECK(again.data.synthetic_classes == config.data.synthetic_classes);
  CHECK(again.model.loss == config.model.loss);
  const auto& o = config.optimizer;
  const auto& p = again.optimizer;
  // Exact comparisons: the writer promises round-trip exact doubles.
  CHECK(p.type == o.type);
  CHECK(p.lr == o.lr);
  CHECK(p.momentum == o.momentum);
  CHECK(p.dampening == o.dampening);
  CHECK(p.nesterov == o.nesterov);
  CHECK(p.beta1 == o.beta1);
  CHECK(p.beta2 == o.beta2);
  CHECK(p.eps == o.eps);
  CHECK(p.weight_decay == o.weight_decay);
  CHECK(p.schedule.type == o.schedule.type);
  CHECK(p.schedule.warmup_steps == o.schedule.warmup_steps);
  CHECK(p.schedule.step_size == o.schedule.step_size);
  CHECK(p.schedule.gamma == o.schedule.gamma);
  CHECK(p.schedule.min_lr == o.schedule.min_lr);
  CHECK(again.parallel.share_devices == config.parallel.share_devices);
  CHECK(again.parallel.bucket_kib == config.parallel.bucket_kib);
  return again;
}

}  // namespace

TEST_CASE("format_table lists every actor and every wire in aligned columns") {
  auto config = parse_config(two_replicas, "t.toml");
  auto t = topology_from_explicit(config, features);
  auto table = format_table(t);
  auto lines = text_lines(table);
  REQUIRE(lines.size() == 1 + 1 + 2 + t.actors.size() + 1 + 2 + t.wires.size());
  CHECK(lines[0] ==
        "topology: R = 2 replicas, P = 1 stages, M = 2 micro-batches, schedule gpipe, "
        "averaging central, devices cpu:0, cpu:1");
  CHECK(lines[2] == "actors (13)");
  CHECK(lines[3] == "  name     kind         device  replica  stage  layer  type");
  CHECK(lines[4] == "  loader   data_loader  cpu:0   -        -      -");
  CHECK(lines[11] == "  r1.l2    layer        cpu:1   1        0      2      linear");
  for (std::size_t i = 0; i < t.actors.size(); ++i)
    CHECK(lines[4 + i].rfind("  " + t.actors[i].name + " ", 0) == 0);
  CHECK(lines[18] == "wires (20)");
  CHECK(lines[19] == "  from    to       kind         capacity");
  CHECK(lines[20] == "  loader  r0.l0    activations  2");
  CHECK(lines[21] == "  r0.l0   r0.l1    activations  -");
  for (std::size_t i = 0; i < t.wires.size(); ++i) {
    const auto& w = t.wires[i];
    const auto& line = lines[20 + i];
    CHECK(line.rfind("  " + w.from + " ", 0) == 0);
    CHECK(line.substr(10, w.to.size() + 1) == w.to + " ");  // the "to" column starts at 10
    const std::string kind = troupe::to_string(w.kind);
    CHECK(line.substr(19, kind.size()) == kind);
  }
}

TEST_CASE("format_dot has every node and edge, one cluster per device, and balanced braces") {
  auto config = parse_config(two_stages, "t.toml");
  auto t = topology_from_explicit(config, features);
  auto dot = format_dot(t);
  CHECK(dot.rfind("digraph troupe {\n", 0) == 0);
  CHECK(contains(dot, "subgraph cluster_cpu_0 {\n    label=\"cpu:0\";\n"));
  CHECK(contains(dot, "subgraph cluster_cpu_1 {\n    label=\"cpu:1\";\n"));
  for (const auto& a : t.actors)
    CHECK(contains(dot, "    \"" + a.name + "\" [label=\"" + a.name + "\\n"));
  CHECK(contains(dot, "\"l1\" [label=\"l1\\ntanh\"]"));
  CHECK(contains(dot, "\"opt.l2\" [label=\"opt.l2\\noptimizer\"]"));
  for (const auto& w : t.wires)
    CHECK(contains(
        dot, "  \"" + w.from + "\" -> \"" + w.to + "\" [label=\"" + troupe::to_string(w.kind)));
  CHECK(contains(dot, "\"l1\" -> \"l2\" [label=\"activations (3)\", style=solid];"));
  CHECK(contains(dot, "\"l0\" -> \"opt.l0\" [label=\"grads\", style=dotted];"));
  CHECK(contains(dot, "\"opt.l0\" -> \"l0\" [label=\"params\", style=dashed];"));
  CHECK(contains(dot, "\"loader\" -> \"loss\" [label=\"labels\", color=gray"));

  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < dot.size(); ++i) {
    char c = dot[i];
    if (c == '\\' && in_string) {
      ++i;  // an escape inside a quoted string
    } else if (c == '"') {
      in_string = !in_string;
    } else if (!in_string && (c == '{' || c == '}')) {
      depth += c == '{' ? 1 : -1;
      CHECK(depth >= 0);
    }
  }
  CHECK_FALSE(in_string);
  CHECK(depth == 0);

  if (std::system("command -v dot > /dev/null 2>&1") != 0) {
    MESSAGE("graphviz 'dot' is not installed: the DOT output was not checked by Graphviz");
    return;
  }
  auto path = std::filesystem::path{troupe::test::temp_file("troupe-topology-format-test.dot")};
  std::ofstream(path) << dot;
  auto command = "dot -Tsvg '" + path.string() + "' -o /dev/null";
  CHECK(std::system(command.c_str()) == 0);
  std::filesystem::remove(path);
}

TEST_CASE("format_explicit reads back into the same topology and settings") {
  SUBCASE("two replicas with central averaging") {
    auto config = parse_config(two_replicas, "t.toml");
    round_trip(topology_from_explicit(config, features), config);
  }
  SUBCASE("two pipeline stages, with every other section set") {
    // Strings that need escaping and doubles that need all 17 digits or look like integers.
    auto text = R"([run]
epochs = 2
steps = 7
seed = 9
metrics = "out/a \"quoted\" name\\x.jsonl"
log_every = 3
evaluate = false
)" + replaced(two_stages, "batch_size = 8", "batch_size = 8\nshuffle = false\nprefetch = 5") +
                R"(
[optimizer]
type = "sgd"
lr = 0.30000000000000004
momentum = 0.9
nesterov = true
weight_decay = 1.0
[optimizer.schedule]
type = "step"
step_size = 10
gamma = 0.5
min_lr = 1e-300
)";
    text = replaced(text, "schedule = \"1f1b\"",
                    "schedule = \"1f1b\"\nshare_devices = true\nbucket_kib = 8");
    auto config = parse_config(text, "t.toml");
    auto again = round_trip(topology_from_explicit(config, features), config);
    CHECK(again.run.metrics ==
          std::filesystem::absolute("out/a \"quoted\" name\\x.jsonl").lexically_normal());
    CHECK(again.optimizer.lr == 0.30000000000000004);
    CHECK(again.optimizer.schedule.min_lr == 1e-300);
  }
  SUBCASE("the ejected text has its header, absolute data path and no shorthand keys") {
    auto config =
        parse_config(replaced(two_stages, "batch_size = 8", "batch_size = 8\npath = \"rel/data\""),
                     "conf/t.toml", "conf");
    auto text = format_explicit(topology_from_explicit(config, features), config);
    CHECK(text.rfind("# generated by troupe plan --eject from conf/t.toml; edit freely\n", 0) == 0);
    auto absolute = (std::filesystem::current_path() / "conf/rel/data").lexically_normal().string();
    CHECK(contains(text, "\npath = \"" + absolute + "\"\n"));
    CHECK(contains(text, "\nweight_decay = 0.0\n"));  // a float, even when integral
    CHECK_FALSE(contains(text, "\ndata = "));
    CHECK_FALSE(contains(text, "\npipeline = "));
    CHECK_FALSE(contains(text, "\nstages = "));
    CHECK(
        contains(text,
                 "[[actor]]\nname = \"l0\"\nkind = \"layer\"\ndevice = \"cpu:0\"\n"
                 "replica = 0\nstage = 0\nlayer = 0\ntype = \"linear\"\nbias = false\nout = 4\n"));
    CHECK(contains(text,
                   "[[wire]]\nfrom = \"l1\"\nto = \"l2\"\nkind = \"activations\"\ncapacity = 3\n"));
  }
}

TEST_CASE("an expanded shorthand config passes validation and ejects into the same topology") {
  const std::string model = header + "\n[model]\n" + troupe::test::linear(4) +
                            troupe::test::layer("gelu") +
                            troupe::test::layer("linear", "out = 3\nbias = false\n");
  const std::vector<std::pair<const char*, std::string>> wirings = {
      {"one device", ""},
      {"two replicas, central averaging",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"central\"\n"},
      {"two replicas, ring averaging",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\naveraging = \"ring\"\nbucket_kib = "
       "4\n"},
      {"two stages, 1F1B",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\npipeline = 2\n"
       "microbatches = 4\nschedule = \"1f1b\"\n"},
      {"an explicit split",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\nstages = [[0, 0], [1, 2]]\n"
       "microbatches = 2\n"},
      {"two replicas x two stages on shared devices",
       "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\npipeline = 2\nshare_devices = "
       "true\n"},
  };
  for (const auto& [wiring, parallel] : wirings) {
    const auto& name = wiring;  // not a binding: INFO's lambda captures it (clang 14)
    INFO(name);
    auto config = parse_config(model + parallel, "shorthand.toml");
    std::vector<troupe::shape_t> shapes{{features}};
    for (const auto& layer : config.model.layers)
      shapes.push_back(troupe::create_layer(layer)->output_shape(shapes.back()));
    auto t = troupe::expand_shorthand(config, shapes);
    CHECK_NOTHROW(troupe::validate_topology(t, config, classes));
    round_trip(t, config);
  }
}

TEST_CASE("format_explicit writes control characters as \\u escapes that read back") {
  auto text = "[run]\nmetrics = \"m\\u0001\\u001f\\u007f.jsonl\"\n" + two_stages;
  auto config = parse_config(text, "t.toml");
  REQUIRE(config.run.metrics == "m\x01\x1f\x7f.jsonl");
  auto t = topology_from_explicit(config, features);
  auto ejected = format_explicit(t, config);
  // Absolute (Note [relative paths]), with the characters escaped.
  CHECK(contains(ejected, "/m\\u0001\\u001f\\u007f.jsonl\"\n"));
  CHECK(parse_config(ejected, "ejected.toml").run.metrics ==
        std::filesystem::absolute(config.run.metrics).lexically_normal());
}

TEST_CASE("format_explicit leaves out the test files a config holds out [data] validation "
          "instead of") {
  troupe::test::temp_directory dir;
  const auto table = dir.write("t.csv", "a,b,y\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n");
  const auto x = dir.write("x.npy", "");  // npy paths are checked to exist, not read, here
  const auto y = dir.write("y.npy", "");
  for (const auto& data :
       {"source = \"csv\"\npath = \"" + table + "\"\ntarget = \"y\"\nvalidation = 0.25\n",
        "source = \"npy\"\nfeatures = \"" + x + "\"\ntargets = \"" + y + "\"\nvalidation = 0.25\n"}) {
    auto config = parse_config(replaced(two_replicas, "source = \"synthetic\"\n", data), "t.toml");
    const auto text = troupe::format_explicit(topology_from_explicit(config, features), config);
    CHECK_FALSE(contains(text, "test_path"));
    CHECK_FALSE(contains(text, "test_features"));
    CHECK(contains(text, "validation = 0.25"));
  }
}
