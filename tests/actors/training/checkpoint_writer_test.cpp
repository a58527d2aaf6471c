// The checkpoint writer, driven with real messages: the scoped actor plays the trainer and
// the optimizers. A checkpoint is complete (its manifest written) only once every shard of
// its step is in; a shard whose copy never ran, or a directory that cannot be written, is a
// failure reported to the trainer, and the checkpoint stays incomplete.
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <filesystem>

#include "actors/training/checkpoint_writer.hpp"
#include "runtime/checkpoint/checkpoint_directory.hpp"
#include "tests/actors/actor_test_support.hpp"
#include "tests/temp_files.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

checkpoint_shard_msg shard(std::int64_t step, const std::string& file, const std::string& name,
                           std::vector<float> values, bool copied = true) {
  checkpoint_shard_msg m;
  m.step = step;
  m.file = file;
  m.names = {name};
  m.tensors = {tensor::from(values, {static_cast<std::int64_t>(values.size())})};
  m.copied = std::make_shared<std::atomic<bool>>(copied);
  return m;
}

checkpoint_writer_settings settings_for(const std::string& root, caf::actor trainer) {
  checkpoint_writer_settings s;
  s.root = root;
  s.shards_per_checkpoint = 2;
  s.steps_per_epoch = 4;
  s.base.optimizer = "sgd";
  s.trainer = std::move(trainer);
  return s;
}

}  // namespace

TEST_CASE_FIXTURE(plain_actor_fixture,
                  "the writer completes a checkpoint once every shard of its step is in") {
  temp_directory d{"troupe-writer"};
  auto writer = spawn_checkpoint_writer(
      system, settings_for(d.file("ck"), caf::actor_cast<caf::actor>(self)));
  self->send(writer, shard(6, "layer-0.safetensors", "0.weight", {1, 2, 3}));
  self->receive([&](checkpoint_atom, std::int64_t, const std::string&) { FAIL("too early"); },
                caf::after(quiet_window) >> [] {});
  CHECK(list_checkpoints(d.file("ck")).empty());  // one shard of two: incomplete
  self->send(writer, shard(6, "layer-2.safetensors", "2.weight", {4, 5}));
  std::string directory;
  self->receive(
      [&](checkpoint_atom, std::int64_t step, const std::string& path) {
        CHECK(step == 6);
        directory = path;
      },
      caf::after(patience) >> [] { FAIL("no checkpoint"); });
  const auto manifest = verify_checkpoint(directory);
  CHECK(manifest.step == 6);
  CHECK(manifest.epoch == 1);
  CHECK(manifest.data_step_in_epoch == 2);
  CHECK(manifest.optimizer == "sgd");
  REQUIRE(manifest.shards.size() == 2);
  CHECK(manifest.shards[0].tensors == std::vector<std::string>{"0.weight"});
  self->send(writer, finish_atom::value);
}

TEST_CASE_FIXTURE(plain_actor_fixture,
                  "a shard whose copy never ran fails the run and completes nothing") {
  temp_directory d{"troupe-writer-failed"};
  auto writer = spawn_checkpoint_writer(
      system, settings_for(d.file("ck"), caf::actor_cast<caf::actor>(self)));
  self->send(writer, shard(4, "layer-0.safetensors", "0.weight", {1}, false));
  self->send(writer, shard(4, "layer-2.safetensors", "2.weight", {2}));
  self->receive(
      [&](failure_msg& m) {
        CHECK(m.actor == "checkpoint writer");
        CHECK(m.what.find("layer-0.safetensors") != std::string::npos);
        CHECK(m.what.find("never ran") != std::string::npos);
      },
      caf::after(patience) >> [] { FAIL("no failure"); });
  self->receive([&](checkpoint_atom, std::int64_t, const std::string&) { FAIL("completed"); },
                caf::after(quiet_window) >> [] {});
  CHECK(list_checkpoints(d.file("ck")).empty());
  self->send(writer, finish_atom::value);
}

TEST_CASE_FIXTURE(plain_actor_fixture, "a directory that cannot be written fails the run") {
  auto writer = spawn_checkpoint_writer(
      system, settings_for("/proc/troupe-cannot-write-here", caf::actor_cast<caf::actor>(self)));
  self->send(writer, shard(2, "layer-0.safetensors", "0.weight", {1}));
  self->receive(
      [&](failure_msg& m) {
        CHECK(m.actor == "checkpoint writer");
        CHECK(m.what.find("/proc/troupe-cannot-write-here") != std::string::npos);
      },
      caf::after(patience) >> [] { FAIL("no failure"); });
  self->send(writer, finish_atom::value);
}
