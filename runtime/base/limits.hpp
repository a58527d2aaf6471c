// limits.hpp: the stated limits on what troupe reads from a user, in one place, and the
// small helpers that enforce them (a capped file read, overflow-checked arithmetic, a
// capped quote of user text for messages).
//
// Every input a user hands troupe (a config, a trace, a command-line number) is checked
// against these limits before the expensive work starts, and refused with exit code 2 and
// a message naming the file (line:col where known), the limit and what was found
// (Note [input limits]). docs/reference/input-limits.md lists the same numbers.
//
// Deliberately not here: limits that belong to one format and are documented with it
// (device indices in runtime/core/device_name.hpp, IDX image sizes in runtime/data/), and
// what the code does once an input is accepted.
//
// Note [input limits]
// A hostile or mistaken input must not crash troupe (stack overflow in a recursive walk),
// hang it (loops over a count the user chose), or exhaust memory (reading /dev/zero). The
// rule: every walk over user input is iterative or bounded by a limit checked first; every
// product or sum of user numbers is overflow-checked; every file is read with a cap; and
// work whose size a user number decides is either bounded here or refused up front. The
// limits are generous: well above anything a real run uses, well below what breaks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace troupe::limits {

/// The largest config file read, in bytes (16 MiB: a config of 10,000 layers is ~1 MiB).
constexpr std::int64_t max_config_bytes = std::int64_t{16} << 20;
/// The largest trace file read, in bytes (256 MiB): its parsed form takes several times
/// that in memory. A longer run's trace can be kept under it with [run] trace_capacity.
constexpr std::int64_t max_trace_bytes = std::int64_t{256} << 20;
/// The largest metrics file `troupe plot` reads (256 MiB: a million steps' lines).
constexpr std::int64_t max_metrics_bytes = std::int64_t{256} << 20;
/// The most parts of one dotted TOML key or table header (`a.b.c` has 3).
constexpr int max_toml_key_parts = 64;
/// The deepest nesting of TOML arrays and inline tables (`[[1]]` is 2 deep).
constexpr int max_toml_nesting = 64;
/// The deepest nesting of JSON arrays and objects in a trace (troupe writes 4).
constexpr int max_json_nesting = 64;
/// The longest name a config may give: a TOML key, an actor or layer name (bytes).
constexpr std::size_t max_name_length = 256;
/// The most layers a model may have ([[model.layers]] tables, or layer indices of
/// [[actor]] tables).
constexpr std::int64_t max_layers = 10000;
/// The most actors a topology may have (shorthand: replicas x (3 per layer + 2); explicit:
/// [[actor]] tables), and the most [[wire]] tables.
constexpr std::int64_t max_actors = 200000;
/// The most data-parallel replicas ([parallel] data).
constexpr std::int64_t max_replicas = 4096;
/// The most micro-batches per step ([parallel] microbatches; tags carry them as 32 bits).
constexpr std::int64_t max_microbatches = std::int64_t{1} << 20;
/// The most work the balanced pipeline split may take: P stages x n^2 / 2 steps of its
/// dynamic program over n layers (about 2 s); beyond it, give [parallel] stages.
constexpr double max_stage_split_work = 2e9;
/// The most optimizer steps a run may have (epochs x steps per epoch, or --steps): 2^40,
/// so that step counters and the counts derived from them never overflow.
constexpr std::int64_t max_steps = std::int64_t{1} << 40;
/// The most samples a data set may have (an IDX file's count, [data] synthetic_train).
constexpr std::int64_t max_samples = std::int64_t{1} << 28;
/// The most values one data file may hold (a .npy's shape product): 2^40, a terabyte of
/// bytes; its rows are read as batches gather them, never all at once.
constexpr std::int64_t max_data_elements = std::int64_t{1} << 40;
/// The most bytes of one CSV table (runtime/data/csv.hpp), mapped and parsed once: 1 TiB.
constexpr std::int64_t max_csv_bytes = std::int64_t{1} << 40;
/// The most columns one CSV table may have.
constexpr std::int64_t max_csv_columns = std::int64_t{1} << 16;
/// An image of an image folder: pixels a side and in all (checked from its header before
/// anything is decoded), and its file's bytes.
constexpr std::int64_t max_image_side = std::int64_t{1} << 15;
constexpr std::int64_t max_image_pixels = std::int64_t{1} << 26;
constexpr std::int64_t max_image_file_bytes = std::int64_t{256} << 20;
/// The most features (pixels) one sample may have (IDX rows x cols, synthetic_features).
constexpr std::int64_t max_sample_features = std::int64_t{1} << 20;
/// The most values (elements) one tensor a user's sizes decide may hold: 2^30 (4 GiB).
constexpr std::int64_t max_tensor_elements = std::int64_t{1} << 30;
/// The most floating-point work `troupe check-layer` takes on: four forward passes per
/// checked value (central differences at two steps) at each setting checked, each costing
/// the layer's cost estimate; 2e10 is about half a minute on one core.
constexpr double max_gradient_check_flops = 2e10;
/// The longest duration a setting in seconds may give ([run] watchdog, [cluster] timeout,
/// node_timeout, [parallel] gloo_timeout): 10^7 s, 116 days; converted to milliseconds it
/// fits every clock type.
constexpr double max_seconds = 1e7;
/// The most arguments one command line takes: boost's parser erases each from the front of
/// its list, so its time grows with the square of their number (20,000 took 2.4 s).
constexpr std::size_t max_command_line_arguments = 4096;
/// The longest piece of user text a message quotes (longer text is cut, with its length).
constexpr std::size_t max_quoted_length = 80;
/// The longest path a message quotes whole: paths are longer than names, and worth seeing.
constexpr std::size_t max_quoted_path_length = 256;

}  // namespace troupe::limits

namespace troupe {

/// `text` for an error message: in single quotes, control characters and bytes that are not
/// UTF-8 as \xNN, invisible or look-alike characters (a no-break space) as \uXXXX, cut to
/// `limit` bytes (at a UTF-8 character boundary) with "..." and the full length noted:
/// 'aaaa'... (20000000 bytes). Every message that echoes user text (a key, a value, a
/// path, a string from a trace) quotes it through here, so no message echoes megabytes.
std::string quote_user_text(std::string_view text, std::size_t limit = limits::max_quoted_length);

/// A path for an error message: quote_user_text with the longer limit paths have.
inline std::string quote_user_path(std::string_view path) {
  return quote_user_text(path, limits::max_quoted_path_length);
}

/// a * b, or nothing when it overflows std::int64_t.
std::optional<std::int64_t> checked_multiply(std::int64_t a, std::int64_t b);
/// a + b, or nothing when it overflows std::int64_t.
std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b);

/// The contents of the file at `path`, read with a cap: throws user_error when the file
/// cannot be opened or read, or holds more than `max_bytes` (found by reading at most
/// max_bytes + 1 bytes, so /dev/zero and FIFOs are refused too). `what` names the file in
/// messages ("config file", "trace file"); `hint` ends the open error.
std::string read_file_capped(const std::string& path, std::int64_t max_bytes,
                             const std::string& what, const std::string& hint = "");

/// "16 MiB", "1 GiB", "300 bytes": a byte count for a message.
std::string describe_bytes(std::int64_t bytes);

}  // namespace troupe
