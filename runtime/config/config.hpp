// config.hpp: the topology config a user writes (TOML), loaded and validated.
//
// load_config() reads the shorthand form ([run], [data], [model], [optimizer],
// [parallel]) or the explicit form ([[actor]] and [[wire]] tables instead of
// [[model.layers]] and [parallel] data/pipeline/stages), and [cluster] for a run over several
// processes, into run_config. Every value keeps where it came from, so that later
// checks (shapes, devices, layer settings) can name file:line:col too. Unknown keys,
// wrong types and out-of-range values throw config_error naming the position, what was
// expected and, for names, the nearest valid one. Nothing here spawns anything.
//
// Layer settings are kept generic (a layer type is found by name in the layer registry,
// which knows its own settings); so are the [[actor]] / [[wire]] tables, which
// topology_from_explicit() reads (runtime/graph/topology.hpp). Everything else is checked here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "runtime/config/choices.hpp"
#include "runtime/net/link_model.hpp"
#include "troupe/device.hpp"
#include "troupe/error.hpp"
#include "troupe/settings.hpp"

namespace troupe {

/// One entry of [[model.layers]].
struct layer_config {
  std::string type;                               // registry name, e.g. "linear"
  std::map<std::string, setting_value> settings;  // every key but type, name and inputs
  source_position where;                          // the table's position
  source_position type_where;                     // the `type` value's position
  // A model beyond a chain (runtime/graph/model_graph.hpp): the layer's own name, and
  // the earlier layers' names it reads (empty: the layer before it).
  std::string name;
  source_position name_where;
  std::vector<std::string> inputs;
  std::vector<source_position> inputs_where;  // each name's position
};

struct run_section {
  std::int64_t epochs = 1;          // used when steps == 0
  std::int64_t steps = 0;           // > 0: stop after this many optimizer steps
  std::uint64_t seed = 42;
  std::string metrics = "troupe-metrics.jsonl";  // relative to the working directory
  std::int64_t log_every = 50;      // steps between plain progress lines (no terminal)
  bool evaluate = true;             // run the test set after each epoch
  std::string trace;                // write a Chrome trace here (relative to the working directory)
  std::int64_t trace_capacity = 1 << 20;  // events kept per thread; more are dropped and counted
  double watchdog = 60;             // seconds without progress before the run is stopped; 0 = off
  std::vector<setting_value> plugins;  // shared libraries to load, relative to the config file
  std::string checkpoint;              // a directory to write checkpoints into; empty: none
  std::int64_t checkpoint_every = 0;   // steps between checkpoints; 0: only at the end
  std::int64_t checkpoint_keep = 3;    // the newest this many are kept
  bool checkpoint_keep_best = false;   // also keep the one with the best test accuracy
  bool fuse_layers = true;  // short layers of a device run as one job (runtime/graph/fusion.hpp)
  bool tf32 = false;  // GPU GEMMs on TF32 tensor cores (10-bit mantissa inputs) instead of FP32
  kernels::cpu_gemm cpu_gemm = kernels::cpu_gemm::automatic;  // "auto", "onednn", "openblas"
  // "fp32", "bf16", or "auto" resolved on this CPU (runtime/config/precision.hpp)
  numeric_precision precision = numeric_precision::fp32;
  source_position precision_where;
  source_position where;
};

class given_source;  // runtime/data/given.hpp

struct data_section {
  data_source source = data_source::fashion_mnist;
  /// Data a program handed over (the Python module's arrays or iterable) instead of the
  /// files [data] names; never from a file. Null: the source's files.
  std::shared_ptr<const given_source> given;
  std::string path = "/usr/share/datasets/fashion-mnist";  // relative to the config file
  std::int64_t batch_size = 128;         // global batch B
  std::int64_t eval_batch_size = 1000;
  bool shuffle = true;
  std::int64_t prefetch = 2;             // batches prepared ahead of the one training
  // text and tokens sources (runtime/data/text.hpp, tokens.hpp): a language model's windows
  std::int64_t context = 64;          // T tokens a sample, each with its next one as label
  std::int64_t validation_every = 10; // text: every n-th text record (a fortune) is validation
  // tokens source only: `path` and `test_path` are token files
  std::string token_dtype = "uint16";  // dtype: of a raw file's ids, "uint16" or "uint32"
  std::int64_t vocabulary = 0;         // vocab: 0 reads vocab.json next to `path`
  bool random_windows = true;          // windows = "random" (nanoGPT's) or "tiled"
  // npy source only (runtime/data/npy.hpp): files relative to the config file
  std::string features, targets, test_features, test_targets;
  // npy and csv: one value, or one per feature
  std::vector<double> scale{1.0}, mean{0.0}, std{1.0};
  /// normalize = "standard": each feature's mean and standard deviation over the training
  /// split instead of scale, mean and std (recorded in checkpoints: runtime/data/normalisation.hpp)
  bool standardize = false;
  /// validation = f in (0, 1): that share of the training split held out, by a permutation
  /// keyed by the seed, and evaluated after each epoch instead of the test split (whose
  /// files may then be left out); 0: none.
  double validation = 0;
  source_position validation_where;
  // images source only (runtime/data/images.hpp): `path` and `test_path` are folders
  std::int64_t image_height = 0, image_width = 0;  // size = [H, W]; 0: the first image's
  std::int64_t channels = 3;        // 1: gray, 3: RGB
  std::int64_t workers = 1;         // host threads decoding a batch's images
  std::int64_t crop_padding = 0;    // > 0: a random crop of the image padded by this much
  bool flip = false;                // a random horizontal flip
  // csv source (runtime/data/csv.hpp): `path` is the training table
  std::string test_path;                     // csv, tokens, images: relative to the config file
  std::vector<std::string> target_columns;   // target = "y" or ["y1", "y2"]
  std::vector<std::string> feature_columns;  // features = [...]; empty: every other column
  char delimiter = ',';
  // synthetic source only
  std::int64_t synthetic_train = 4096;
  std::int64_t synthetic_test = 1024;
  std::int64_t synthetic_features = 784;
  std::int64_t synthetic_classes = 10;
  source_position where;
  source_position source_where;
  source_position path_where;
};

struct model_section {
  std::vector<layer_config> layers;
  /// A loss kind's name (troupe/loss.hpp), with its settings when written as a table.
  std::string loss = "softmax_xent";
  std::map<std::string, setting_value> loss_settings;  // every key of the table but type
  source_position loss_where;       // the value (a string or a table), or [model]
  source_position loss_type_where;  // its name
  /// A safetensors file of weights to start from, named as torch.nn.Sequential's state_dict
  /// (runtime/checkpoint/interchange.hpp); relative to the config file. Empty: the layers'
  /// init from the seed.
  std::string init_from;
  source_position init_from_where;
  source_position where;
};

struct schedule_section {
  lr_schedule_type type = lr_schedule_type::constant;
  std::int64_t warmup_steps = 0;  // linear warm-up from 0 (all types)
  std::int64_t step_size = 1000;  // "step": multiply by gamma every step_size steps
  double gamma = 0.1;
  double min_lr = 0.0;            // "cosine": the floor at the last step
  source_position where;
};

struct optimizer_section {
  optimizer_type type = optimizer_type::adam;
  double lr = 1e-3;
  double momentum = 0.0;      // sgd
  double dampening = 0.0;     // sgd
  bool nesterov = false;      // sgd
  double beta1 = 0.9;         // adam, adamw
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2 for sgd/adam, decoupled for adamw
  schedule_section schedule;
  source_position where;
  source_position type_where;
};

struct device_config {
  std::string name;  // as written, e.g. "cpu:0"
  device_id id;      // the name parsed (runtime/core/device_name.hpp)
  source_position where;
};

struct parallel_section {
  std::vector<device_config> devices;  // default: one "cpu:0"
  std::int64_t data = 1;               // R replicas
  std::int64_t pipeline = 1;           // P stages
  std::int64_t microbatches = 1;       // M
  pipeline_schedule schedule = pipeline_schedule::gpipe;
  /// Interleaved 1F1B (Megatron): each of the P devices of a pipeline holds v stages, so the
  /// model is cut into P * v stages and stage s runs on the pipeline's device s mod P
  /// (Note [interleaved stages] in runtime/model/interleaved_schedule.hpp). 1: one stage per device.
  std::int64_t virtual_stages = 1;
  source_position virtual_stages_where;  // where it is written, if it is
  /// How replicas' sums are made (the collective); averaging = "local_sgd" names the rule
  /// below, and then `collective` names this one (ring or gloo).
  averaging_method averaging = averaging_method::ring;
  averaging_rule rule = averaging_rule::synchronous;
  /// local_sgd, diloco: the replicas' parameters are averaged after every H-th step (H = 1:
  /// every step, which with SGD is synchronous data parallelism's math).
  std::int64_t sync_every = 1;
  /// diloco: the outer optimizer, SGD on the averaged parameter deltas with this rate and
  /// momentum, Nesterov's or not (the paper's: Nesterov, 0.7, 0.9).
  bool outer_nesterov = true;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  /// async: a replica's gradient is applied at most this many server updates after the
  /// version it was computed on (it waits otherwise); at least replicas - 1.
  std::int64_t max_staleness = 0;
  source_position max_staleness_where;
  source_position averaging_where;  // where averaging is written, if it is
  /// Optional explicit pipeline split: stage s holds model layers [first, last] (inclusive).
  /// Checked here only for first <= last; contiguity and coverage by the expander.
  std::vector<std::pair<std::int64_t, std::int64_t>> stage_ranges;
  source_position stages_where;
  bool share_devices = false;          // allow R * P > number of devices
  std::int64_t bucket_kib = 1024;      // ring all-reduce bucket size, KiB
  /// ZeRO-1: with ring averaging, each replica's optimizer updates only the chunks its
  /// averager owns after reduce-scatter, and the ring all-gathers parameters instead of
  /// gradients (Note [sharded optimizer] in actors/averaging/grad_averager_actor.cpp).
  bool shard_optimizer = false;
  source_position shard_where;         // where shard_optimizer is written, if it is
  /// reduce_dtype = "bf16": the ring's gradient chunks travel in bf16, half the bytes, each
  /// sum still taken in fp32 (Note [a ring in bf16] in actors/averaging/ring_collective.cpp).
  bool reduce_bf16 = false;
  /// gloo averaging: seconds a rendezvous or an all-reduce may wait for a peer before the
  /// run fails (a peer that is gone, or never came).
  double gloo_timeout = 30;
  /// How the global batch is split between replicas (Note [balanced replicas] in
  /// actors/training/data_loader_actor.cpp): evenly, or by weights given here (one a replica).
  replica_balance balance = replica_balance::even;
  std::vector<double> balance_weights;  // balance == weights: one positive weight a replica
  source_position balance_where;        // where balance is written, if it is
  source_position where;
};

/// [cluster]: one run over several processes (nodes), each `troupe run` of the same config
/// (or `troupe launch -n N`). The launcher's environment (runtime/net/launch_env.hpp) says
/// which node a process is and may name the coordinator instead of `address` / `port`.
struct cluster_section {
  std::int64_t nodes = 0;             // how many processes; 0: not given (the launcher's, or 1)
  std::string address = "127.0.0.1";  // where the workers find the coordinator (rank 0)
  std::int64_t port = 29500;          // the coordinator's port (torchrun's default)
  std::string listen =
      "127.0.0.1";          // the address the coordinator listens on: loopback unless given
  std::string secret_file;  // the shared secret, relative to the config file; empty: none
  double timeout = 60;      // seconds a worker retries the coordinator, and it waits for them
  double heartbeat = 1;     // seconds between heartbeats on every link
  double node_timeout = 8;  // a node silent this long is lost (< 10 s, issue 11)
  /// Tensors between nodes of one machine through shared memory rather than TCP (Note
  /// [tensors through shared memory] in runtime/net/shared_memory.cpp).
  bool shared_memory = true;
  /// link = "100 Mbit/s, 20 ms": every process holds its messages to other nodes as such a
  /// link would (Note [an emulated link] in runtime/net/link_model.cpp); not given: none.
  link_cost link;
  source_position link_where;
  /// averaging = "gloo" across nodes anyway: gloo's own TCP connections take any peer,
  /// which no secret or TLS guards (Note [gloo outside the door] in
  /// actors/session/run_modes.cpp); refused unless this is true.
  bool unauthenticated_gloo = false;
  /// TLS on every CAF link between nodes (Note [TLS between nodes] in actors/session/cluster.cpp).
  /// The paths are relative to the config file, checked to exist when tls is on; the
  /// passphrase file, if any, holds the key's passphrase (its first line).
  bool tls = false;
  std::string certificate;          // this node's certificate chain (PEM)
  std::string key;                  // its private key (PEM)
  std::string ca_file;              // the CA certificates a peer's certificate must chain to
  std::string key_passphrase_file;  // empty: the key is not encrypted
  source_position where;
  source_position nodes_where;
  source_position tls_where;  // where tls is written, if it is
};

/// One [[actor]] or [[wire]] table of an explicit config: every key with its position
/// (the key's). Values are scalars; what the keys mean is topology_from_explicit()'s.
struct table_config {
  std::map<std::string, setting_value> settings;
  source_position where;  // the table's header
};

struct run_config {
  std::string path;  // the config file as given
  std::string directory;  // its directory (relative paths in the config resolve here)
  run_section run;
  data_section data;
  model_section model;
  optimizer_section optimizer;
  parallel_section parallel;
  cluster_section cluster;
  std::vector<table_config> actors;  // [[actor]], in file order
  std::vector<table_config> wires;   // [[wire]], in file order

  /// An explicit config lists its actors and wires instead of [[model.layers]].
  bool is_explicit() const { return !actors.empty(); }
  /// How many processes the run has: [cluster] nodes, or 1.
  std::int64_t nodes() const { return cluster.nodes > 0 ? cluster.nodes : 1; }
};

/// The four files of a Fashion-MNIST directory, by their release names
/// ("train-images-idx3-ubyte", ...), each stored raw or as NAME.gz.
const std::vector<std::string>& fashion_mnist_file_names();

/// [data] path of source = "text" when none is given: the fortunes package's files.
inline constexpr const char* text_default_path = "/usr/share/games/fortunes";

/// Where data file `name` is in `directory`: NAME.gz if that is a regular file, else NAME,
/// else "" (neither). The one probe of the data files on disk: the loader checks that
/// [data] path holds them all (so a typo fails at its line), load_fashion_mnist
/// (runtime/data/dataset.hpp) opens what this finds.
std::string find_data_file(const std::string& directory, const std::string& name);

/// The shortest text that reads back as exactly `value` ("0.1", "1e-08"), as error
/// messages and `troupe plan --eject` write numbers.
std::string shortest_text(double value);

/// Loads and checks a config file. Throws config_error (or user_error for an unreadable
/// file) with file:line:col.
run_config load_config(const std::string& path);

/// The same with `overrides` applied first, each "section.key=value" with a TOML value
/// (e.g. "parallel.data=64", "parallel.schedule=\"1f1b\""): the key is set in the file's
/// [section] as if written there, and errors in it name "--set section.key=value".
run_config load_config(const std::string& path, const std::vector<std::string>& overrides);

/// The same, from a string; `name` is used as the file name in errors.
run_config parse_config(const std::string& text, const std::string& name,
                        const std::string& directory = ".",
                        const std::vector<std::string>& overrides = {});

/// `text` with `overrides` applied (as parse_config applies them), written back as TOML: what
/// a config that was set key by key (the Python module's Config) holds. Comments and the
/// order of keys are toml++'s, not the original's. Throws config_error as parse_config.
std::string config_text(const std::string& text, const std::string& name,
                        const std::vector<std::string>& overrides);

}  // namespace troupe
