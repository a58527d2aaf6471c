// fusion_test.cpp: which layers plan_fusion() runs as one actor (Note [fused layers] in
// runtime/graph/fusion.hpp), on expanded shorthand configs.
#include "runtime/graph/fusion.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "actors/session/prepare.hpp"
#include "runtime/model/layer.hpp"
#include "tests/config_text.hpp"

using namespace troupe;

namespace {

constexpr std::int64_t fusion_features = 32;

// An MLP 32-(width x depth)-10 with relu, then `parallel`.
std::string mlp(std::int64_t width, int depth, const std::string& parallel = "") {
  std::string text = R"([data]
source = "synthetic"
batch_size = 64
synthetic_features = 32
synthetic_classes = 10
)";
  for (int i = 0; i < depth; ++i)
    text += test::linear(width) + test::layer("relu");
  return text + test::linear(10) + parallel;
}

std::vector<fusion_group> groups_of(const std::string& text, std::int64_t rows,
                                    bool enabled = true) {
  const auto config = parse_config(text, "f.toml");
  const auto t = expand_shorthand(config, layer_shapes(config, fusion_features));
  return plan_fusion(t, rows, enabled);
}

std::vector<std::vector<std::string>> members_of(const std::vector<fusion_group>& groups) {
  std::vector<std::vector<std::string>> out;
  for (const auto& g : groups)
    out.push_back(g.members);
  return out;
}

}  // namespace

TEST_CASE("a narrow MLP on one device runs as one fused actor, and not at all when off") {
  const auto groups = groups_of(mlp(16, 3), 64);
  REQUIRE(groups.size() == 1);
  CHECK(groups[0].members == std::vector<std::string>{"layer_0", "layer_1", "layer_2", "layer_3",
                                                      "layer_4", "layer_5", "layer_6"});
  CHECK(groups[0].name() == "layer_0..layer_6");
  CHECK(groups_of(mlp(16, 3), 64, false).empty());
  const auto text = format_fusion(groups);
  CHECK(text.find("layer_0..layer_6: layer_0 layer_1 layer_2") != std::string::npos);
  CHECK(format_fusion({}).empty());
}

TEST_CASE("with replicas a group holds at most one long layer and the short ones join it") {
  // 1024 x 1024 linears at 512 rows: 6 * 1024^2 * 512 flops each, far above long_job_flops;
  // the relus and the 32 -> 1024 first layer (6 * 32 * 1024 * 512 = 1e8) are long or short
  // as their costs say.
  const std::int64_t rows = 512;
  const std::string two = "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\ndata = 2\n";
  const auto groups = groups_of(mlp(1024, 3, two), rows);
  const auto config = parse_config(mlp(1024, 3, two), "f.toml");
  const auto shapes = layer_shapes(config, fusion_features);
  for (const auto& g : groups) {
    int long_members = 0;
    for (const auto& m : g.members) {
      const auto index = std::stoi(m.substr(std::string{"r0.layer_"}.size()));
      const auto math = create_layer(config.model.layers.at(static_cast<std::size_t>(index)));
      if (math->cost(shapes.at(static_cast<std::size_t>(index))) * rows > long_job_flops)
        ++long_members;
    }
    INFO(g.name());
    CHECK(long_members <= 1);
  }
  // Each relu runs in the job of the linear before it, in both replicas.
  CHECK(members_of(groups) ==
        std::vector<std::vector<std::string>>{{"r0.layer_0", "r0.layer_1"},
                                              {"r0.layer_2", "r0.layer_3"},
                                              {"r0.layer_4", "r0.layer_5", "r0.layer_6"},
                                              {"r1.layer_0", "r1.layer_1"},
                                              {"r1.layer_2", "r1.layer_3"},
                                              {"r1.layer_4", "r1.layer_5", "r1.layer_6"}});
  // One replica has no averaging to overlap: its whole chain is one job.
  const auto one = groups_of(mlp(1024, 3), rows);
  REQUIRE(one.size() == 1);
  CHECK(one[0].members.size() == 7);
}

TEST_CASE("fused groups stay within one replica and one pipeline stage") {
  const auto replicas = groups_of(mlp(16, 2, "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\n"
                                             "data = 2\naveraging = \"ring\"\n"),
                                  32);
  CHECK(members_of(replicas) ==
        std::vector<std::vector<std::string>>{
            {"r0.layer_0", "r0.layer_1", "r0.layer_2", "r0.layer_3", "r0.layer_4"},
            {"r1.layer_0", "r1.layer_1", "r1.layer_2", "r1.layer_3", "r1.layer_4"}});
  CHECK(replicas[1].name() == "r1.layer_0..layer_4");
  const auto stages = groups_of(mlp(16, 2, "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\n"
                                           "stages = [[0, 2], [3, 4]]\nmicrobatches = 2\n"),
                                32);
  CHECK(members_of(stages) == std::vector<std::vector<std::string>>{
                                  {"layer_0", "layer_1", "layer_2"}, {"layer_3", "layer_4"}});
}

TEST_CASE("nothing is fused under schedules that split backwards or take turns") {
  for (const char* schedule : {"schedule = \"zb-h1\"\n", "virtual_stages = 2\nschedule = \"1f1b\"\n"}) {
    INFO(schedule);
    CHECK(groups_of(mlp(16, 2, std::string{"[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\n"
                                           "pipeline = 2\nmicrobatches = 4\n"} +
                                   schedule),
                    16)
              .empty());
  }
}

TEST_CASE("an add and a layer read by two are never inside a fused chain") {
  // 0 linear x0, 1 relu, 2 linear h1, 3 add(x0, h1), 4 relu, 5 linear: x0 is read by the
  // relu and the add, the add reads two.
  const std::string text = R"([data]
source = "synthetic"
batch_size = 64
synthetic_features = 32
synthetic_classes = 10
)" + test::layer("linear", "name = \"x0\"\nout = 16\n") +
                           test::layer("relu") + test::layer("linear", "name = \"h1\"\nout = 16\n") +
                           test::layer("add", "inputs = [\"x0\", \"h1\"]\n") + test::layer("relu") +
                           test::linear(10);
  CHECK(members_of(groups_of(text, 64)) ==
        std::vector<std::vector<std::string>>{{"layer_1", "layer_2"}, {"layer_4", "layer_5"}});
}
