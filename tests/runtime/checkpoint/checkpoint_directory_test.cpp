// checkpoint_directory_test.cpp: checkpoints as directories: written with shards and a
// manifest, verified (each kind of damage named), found (incomplete and damaged ones
// skipped), pruned (what is kept and what goes) and resolved from a --resume path.
#include "runtime/checkpoint/checkpoint_directory.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/runtime/checkpoint/checkpoint_test_files.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using troupe::test::contains;
using troupe::test::data_error_of;
using troupe::test::read_bytes;
using troupe::test::temp_directory;
using troupe::test::write_bytes;

namespace {

namespace fs = std::filesystem;

// Writes a complete checkpoint at `step` under `root` the way a run does: directory, one
// shard of two tensors, then the manifest. Its directory.
std::string write_checkpoint(const std::string& root, std::int64_t step) {
  const auto dir = make_checkpoint_directory(root, step);
  const std::vector<float> weight{1, 2, 3, 4, 5, 6};           // (2, 3)
  const std::vector<float> bias{static_cast<float>(step), 0};  // (2)
  const auto shard = write_safetensors((fs::path{dir} / "optimizer-0.safetensors").string(),
                                       {{"0.weight", safetensors_dtype::f32, {2, 3}, weight.data()},
                                        {"0.bias", safetensors_dtype::f32, {2}, bias.data()}});
  checkpoint_manifest m;
  m.step = step;
  m.lr_schedule_step = step;
  m.shards = {{"optimizer-0.safetensors", shard.bytes, shard.crc32, {"0.weight", "0.bias"}}};
  m.layers = {
      {0,
       "linear",
       {{"weight", safetensors_dtype::f32, {2, 3}}, {"bias", safetensors_dtype::f32, {2}}}}};
  commit_checkpoint(dir, m);
  return dir;
}

std::vector<std::int64_t> steps_of(const std::vector<checkpoint_info>& checkpoints) {
  std::vector<std::int64_t> steps;
  for (const auto& c : checkpoints)
    steps.push_back(c.step);
  return steps;
}

std::string shard_of(const std::string& dir) {
  return (fs::path{dir} / "optimizer-0.safetensors").string();
}

}  // namespace

TEST_CASE("checkpoint directory names are step- and 9 digits, and only that spelling parses") {
  CHECK(checkpoint_directory_name(0) == "step-000000000");
  CHECK(checkpoint_directory_name(1200) == "step-000001200");
  CHECK(checkpoint_directory_name(12345678901) == "step-12345678901");
  CHECK(step_of_checkpoint_directory("step-000001200") == 1200);
  CHECK(step_of_checkpoint_directory("step-12345678901") == 12345678901);
  for (const std::string name : {"step-1200", "step-0000001200", "step-00000120a", "step-",
                                 "Step-000001200", "step--00001200", "step-99999999999999999999"})
    CHECK_MESSAGE(!step_of_checkpoint_directory(name), name);
}

TEST_CASE("a written checkpoint verifies, and list and latest find it") {
  const temp_directory root{"troupe-checkpoints"};
  const auto dir = write_checkpoint(root.string(), 100);
  CHECK(dir == root / "step-000000100");
  const auto manifest = verify_checkpoint(dir);
  CHECK(manifest.step == 100);
  CHECK(steps_of(list_checkpoints(root.string())) == std::vector<std::int64_t>{100});
  const auto latest = latest_checkpoint(root.string());
  REQUIRE(latest);
  CHECK(latest->path == dir);
  CHECK(latest->manifest.shards.at(0).tensors.size() == 2);
  CHECK(fs::exists(fs::path{dir} / "manifest.json"));
  CHECK_FALSE(latest_checkpoint(root / "not-yet"));  // a root not made yet holds nothing
}

TEST_CASE("verify_checkpoint names a missing, truncated, damaged or mismatched shard") {
  const temp_directory root{"troupe-checkpoints"};
  const auto dir = write_checkpoint(root.string(), 7);
  const auto good = read_bytes(shard_of(dir));
  const auto label = "checkpoint '" + dir + "': shard 'optimizer-0.safetensors'";

  fs::remove(shard_of(dir));
  CHECK(contains(
      data_error_of([&] { verify_checkpoint(dir); }),
      label + " is missing; the manifest lists it with " + std::to_string(good.size()) + " bytes"));

  write_bytes(shard_of(dir), {good.begin(), good.end() - 4});
  CHECK(contains(data_error_of([&] { verify_checkpoint(dir); }),
                 label + " is " + std::to_string(good.size() - 4) + " bytes; the manifest says " +
                     std::to_string(good.size()) + " (truncated?)"));

  auto flipped = good;
  flipped.back() ^= 0x01;  // one bit of the last float
  write_bytes(shard_of(dir), flipped);
  const auto damaged = data_error_of([&] { verify_checkpoint(dir); });
  CHECK(contains(damaged, label + " has CRC-32 0x"));
  CHECK(contains(damaged, "the file is damaged"));

  // A shard of the right size and checksum holding other tensors than the manifest lists.
  const std::vector<float> eight(8, 0.0f);
  const auto other =
      write_safetensors(shard_of(dir), {{"0.other", safetensors_dtype::f32, {8}, eight.data()}});
  auto manifest = read_manifest((fs::path{dir} / "manifest.json").string());
  manifest.shards[0].bytes = other.bytes;
  manifest.shards[0].crc32 = other.crc32;
  write_manifest((fs::path{dir} / "manifest.json").string(), manifest);
  CHECK(contains(data_error_of([&] { verify_checkpoint(dir); }),
                 label + " holds the tensor '0.other', which the manifest does not list"));
}

TEST_CASE("latest_checkpoint skips newer step directories without a manifest or with a bad one") {
  const temp_directory root{"troupe-checkpoints"};
  write_checkpoint(root.string(), 100);
  write_checkpoint(root.string(), 200);
  // 300: a crash while writing shards; 400: a manifest that does not parse; 500: a manifest
  // whose step is not its directory's. Other names are not checkpoints at all.
  fs::create_directories(root / "step-000000300");
  root.write("step-000000300/optimizer-0.safetensors", "partial");
  root.write("step-000000400/manifest.json", "{\"format_version\": 1, \"step\": ");
  write_checkpoint(root.string(), 500);
  fs::rename(root / "step-000000500", root / "step-000000600");
  root.write("notes.txt", "hello");
  fs::create_directories(root / "step-latest");

  const auto latest = latest_checkpoint(root.string());
  REQUIRE(latest);
  CHECK(latest->step == 200);
  const auto scan = scan_checkpoints(root.string());
  CHECK(steps_of(scan.complete) == std::vector<std::int64_t>{100, 200});
  REQUIRE(scan.incomplete.size() == 3);
  CHECK(contains(scan.incomplete[0].reason, "no manifest.json"));
  CHECK(contains(scan.incomplete[1].reason, "not valid JSON"));
  CHECK(contains(scan.incomplete[2].reason, "its manifest says step 500"));
}

TEST_CASE("prune_checkpoints keeps the newest, the ones asked for, and newer incomplete ones") {
  const temp_directory root{"troupe-checkpoints"};
  for (std::int64_t step : {100, 200, 300, 400, 500})
    write_checkpoint(root.string(), step);
  fs::create_directories(root / "step-000000050");  // an old crash's leftover
  fs::create_directories(root / "step-000000600");  // being written right now
  const auto removed = prune_checkpoints(root.string(), 2, {200});
  CHECK(removed == std::vector<std::string>{root / "step-000000100", root / "step-000000300",
                                            root / "step-000000050"});
  CHECK(steps_of(list_checkpoints(root.string())) == std::vector<std::int64_t>{200, 400, 500});
  CHECK(fs::exists(root / "step-000000600"));
  CHECK(prune_checkpoints(root.string(), 2, {200}).empty());  // nothing more to do
  CHECK_THROWS_AS(prune_checkpoints(root.string(), 0), check_failure);
}

TEST_CASE("prune_checkpoints leaves checkpoints newer than this run's and links alone") {
  // An outside review: resumed from step 400 into a root that held 400 and 600, keep = 1
  // pruned 400 and then every checkpoint the run wrote (600 was newer); and a step
  // directory linked to another run's checkpoint was made incomplete through the link.
  const temp_directory root{"troupe-checkpoints"}, elsewhere{"troupe-checkpoints"};
  for (std::int64_t step : {400, 450, 600})
    write_checkpoint(root.string(), step);
  const auto theirs = write_checkpoint(elsewhere.string(), 100);
  fs::create_directory_symlink(theirs, root / "step-000000100");
  const auto removed = prune_checkpoints(root.string(), 1, {}, 450);
  CHECK(removed == std::vector<std::string>{root / "step-000000400"});
  CHECK(steps_of(list_checkpoints(root.string())) == std::vector<std::int64_t>{100, 450, 600});
  CHECK(fs::exists(fs::path{theirs} / "manifest.json"));  // untouched through the link
  // Without a bound (the default) the newest count, as before; still not through a link.
  CHECK(prune_checkpoints(root.string(), 1) == std::vector<std::string>{root / "step-000000450"});
  CHECK(fs::exists(fs::path{theirs} / "manifest.json"));
}

TEST_CASE("set_aside_newer_checkpoints renames what is newer than a resume's step") {
  const temp_directory root{"troupe-checkpoints"};
  for (std::int64_t step : {400, 500, 600})
    write_checkpoint(root.string(), step);
  fs::create_directories(root / "step-000000700");             // an incomplete one, newer too
  fs::create_directories(root / "step-000000600.superseded");  // from an earlier rollback
  const auto moved = set_aside_newer_checkpoints(root.string(), 400);
  CHECK(moved == std::vector<std::string>{root / "step-000000500.superseded",
                                          root / "step-000000600.superseded-2",
                                          root / "step-000000700.superseded"});
  CHECK(steps_of(list_checkpoints(root.string())) == std::vector<std::int64_t>{400});
  CHECK(
      fs::exists(fs::path{root / "step-000000600.superseded-2"} / "manifest.json"));  // kept, aside
  CHECK(latest_checkpoint(root.string())->step == 400);
  CHECK(set_aside_newer_checkpoints(root.string(), 400).empty());
  CHECK(set_aside_newer_checkpoints(root / "absent", 0).empty());
}

TEST_CASE("resolve_resume_path takes a checkpoint root or a single checkpoint directory") {
  const temp_directory root{"troupe-checkpoints"};
  write_checkpoint(root.string(), 100);
  const auto dir200 = write_checkpoint(root.string(), 200);
  CHECK(resolve_resume_path(root.string()).step == 200);
  const auto single = resolve_resume_path(root / "step-000000100");
  CHECK(single.step == 100);
  CHECK(single.path == root / "step-000000100");
  // A checkpoint copied elsewhere under any name still resolves.
  fs::create_directories(root / "copies");
  fs::copy(dir200, root / "copies/best", fs::copy_options::recursive);
  CHECK(resolve_resume_path(root / "copies/best").step == 200);
}

TEST_CASE("resolve_resume_path names a missing path or a root without a complete checkpoint") {
  const temp_directory root{"troupe-checkpoints"};
  CHECK(contains(data_error_of([&] { resolve_resume_path(root / "nope"); }),
                 "resume path '" + root / "nope" + "' does not exist"));
  CHECK(contains(data_error_of([&] { resolve_resume_path(root.string()); }),
                 "holds no complete checkpoint: no manifest.json and no step-<n> directories"));
  fs::create_directories(root / "step-000000300");
  const auto message = data_error_of([&] { resolve_resume_path(root.string()); });
  CHECK(contains(message, "holds no complete checkpoint"));
  CHECK(contains(message, "step-000000300: no manifest.json"));
  root.write("file", "x");
  CHECK(contains(data_error_of([&] { resolve_resume_path(root / "file"); }),
                 "is not a directory; expected a checkpoint directory"));
}

TEST_CASE("make_checkpoint_directory over an existing checkpoint makes it incomplete first") {
  const temp_directory root{"troupe-checkpoints"};
  const auto dir = write_checkpoint(root.string(), 100);
  CHECK(make_checkpoint_directory(root.string(), 100) == dir);
  CHECK_FALSE(fs::exists(fs::path{dir} / "manifest.json"));
  CHECK(list_checkpoints(root.string()).empty());
  write_checkpoint(root.string(), 100);
  CHECK(verify_checkpoint(dir).step == 100);
}
