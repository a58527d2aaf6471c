// csv.cpp: reading a CSV table into a data set (see csv.hpp).
#include "runtime/data/csv.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <cmath>
#include <deque>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "runtime/base/limits.hpp"
#include "runtime/base/text_format.hpp"
#include "runtime/data/file_bytes.hpp"
#include "runtime/data/npy.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

constexpr double max_label = (1 << 24) - 1;

/// One field of a record, with where it starts (1-based line and byte column).
struct csv_field {
  std::string_view text;  // unquoted; a quoted field's "" already made one "
  std::int64_t line = 0;
  std::int64_t column = 0;
};

/// Splits a table's text into records of fields (RFC 4180, with `delimiter`).
class csv_reader {
 public:
  csv_reader(std::string_view text, std::string path, char delimiter)
      : text_(text), path_(std::move(path)), delimiter_(delimiter), stops_{delimiter, '\n', '\r'} {
    if (text_.substr(0, 3) == "\xEF\xBB\xBF")  // a UTF-8 byte-order mark
      at_ = start_of_line_ = 3;
    if (const auto utf16 = utf16_refusal(text_.substr(0, 4)); !utf16.empty())
      fail(1, 1, "the table " + utf16);
  }

  /// The next record's fields; false at the end of the text. Blank lines are skipped.
  bool next(std::vector<csv_field>& fields) {
    fields.clear();
    unescaped_.clear();
    while (at_ < text_.size() && (text_[at_] == '\n' || text_[at_] == '\r'))
      end_line();
    if (at_ >= text_.size())
      return false;
    for (;;) {
      fields.push_back(read_field());
      if (at_ >= text_.size())
        return true;
      const char c = text_[at_];
      if (c == delimiter_) {
        ++at_;
        continue;
      }
      end_line();  // '\n', or '\r' before it
      return true;
    }
  }

  const std::string& path() const { return path_; }

  /// A data_error at a field's position.
  [[noreturn]] void fail(std::int64_t line, std::int64_t column, const std::string& what) const {
    throw data_error(quote_user_path(path_) + ":" + std::to_string(line) + ":" +
                     std::to_string(column) + ": " + what);
  }

 private:
  void end_line() {
    if (text_[at_] == '\r' && at_ + 1 < text_.size() && text_[at_ + 1] == '\n')
      ++at_;
    ++at_;
    ++line_;
    start_of_line_ = at_;
  }

  csv_field read_field() {
    csv_field field{{}, line_, static_cast<std::int64_t>(at_ - start_of_line_) + 1};
    if (at_ < text_.size() && text_[at_] == '"')
      return read_quoted(field);
    const auto end = text_.find_first_of(stops_, at_);
    const auto stop = end == std::string_view::npos ? text_.size() : end;
    field.text = text_.substr(at_, stop - at_);
    at_ = stop;
    if (field.text.find('"') != std::string_view::npos)
      fail(field.line, field.column, "a quote inside an unquoted field; quote the whole field");
    return field;
  }

  csv_field read_quoted(csv_field field) {
    std::string value;
    ++at_;
    for (;;) {
      const auto quote = text_.find('"', at_);
      if (quote == std::string_view::npos)
        fail(field.line, field.column, "a quoted field that never ends (no closing \")");
      for (auto i = at_; i < quote; ++i)
        if (text_[i] == '\n')
          ++line_, start_of_line_ = i + 1;
      value.append(text_.substr(at_, quote - at_));
      at_ = quote + 1;
      if (at_ < text_.size() && text_[at_] == '"') {  // "" is one quote
        value += '"';
        ++at_;
        continue;
      }
      break;
    }
    if (at_ < text_.size() && text_[at_] != delimiter_ && text_[at_] != '\n' && text_[at_] != '\r')
      fail(line_, static_cast<std::int64_t>(at_ - start_of_line_) + 1,
           std::string("after a quoted field: expected '") + delimiter_ +
               "' or the end of the line, found " + quote_user_text(text_.substr(at_, 1)));
    unescaped_.push_back(std::move(value));  // a deque: earlier fields' views stay valid
    field.text = unescaped_.back();
    return field;
  }

  std::string_view text_;
  std::string path_;
  char delimiter_;
  std::string stops_;  // what ends an unquoted field
  std::size_t at_ = 0;
  std::size_t start_of_line_ = 0;
  std::int64_t line_ = 1;
  std::deque<std::string> unescaped_;  // this record's quoted fields
};

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
    text.remove_suffix(1);
  return text;
}

/// The number a field holds (as Python's float() reads it), or none.
std::optional<double> number_of(std::string_view text) {
  text = trimmed(text);
  if (!text.empty() && text.front() == '+')
    text.remove_prefix(1);
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size())
    return std::nullopt;
  return value;
}

/// The header's names, checked: none empty, none twice, not too many.
std::vector<std::string> column_names(const csv_reader& reader,
                                      const std::vector<csv_field>& header) {
  if (static_cast<std::int64_t>(header.size()) > limits::max_csv_columns)
    reader.fail(1, 1, "the header names " + std::to_string(header.size()) +
                          " columns; troupe reads at most " +
                          std::to_string(limits::max_csv_columns));
  // Sets and maps, not scans: 60,000 columns took seconds (a scan per column).
  std::vector<std::string> names;
  std::unordered_set<std::string> seen;
  for (const auto& field : header) {
    const auto name = std::string(trimmed(field.text));
    if (name.empty())
      reader.fail(field.line, field.column, "an empty column name in the header row");
    if (!seen.insert(name).second)
      reader.fail(field.line, field.column, "the header names column " + quote_user_text(name) +
                                                " twice");
    names.push_back(name);
  }
  return names;
}

/// The indices of `wanted` among `names`; a name that is not there fails at the header.
std::vector<std::size_t> indices_of(const csv_reader& reader, const std::vector<std::string>& names,
                                    const std::vector<std::string>& wanted, const char* key) {
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t c = 0; c < names.size(); ++c)
    index.emplace(names[c], c);
  std::vector<std::size_t> out;
  for (const auto& name : wanted) {
    const auto it = index.find(name);
    if (it == index.end())
      reader.fail(1, 1, std::string("[data] ") + key + " names column " + quote_user_text(name) +
                            ", which the header does not have" + did_you_mean(name, names) +
                            " (columns: " + comma_list(names) + ")");
    out.push_back(it->second);
  }
  return out;
}

/// Which columns are features and which targets.
struct column_plan {
  std::vector<std::string> names;
  std::vector<std::size_t> features, targets;
};

column_plan plan_columns(const csv_reader& reader, const std::vector<csv_field>& header,
                         const csv_columns& columns) {
  column_plan plan;
  plan.names = column_names(reader, header);
  const std::unordered_set<std::string> present(plan.names.begin(), plan.names.end());
  std::vector<std::string> targets;
  for (const auto& name : columns.targets)
    if (!columns.targets_optional || present.count(name) > 0)
      targets.push_back(name);
  plan.targets = indices_of(reader, plan.names, targets, "target");
  std::vector<bool> is_target(plan.names.size(), false);
  for (auto t : plan.targets)
    is_target[t] = true;
  if (columns.features.empty()) {
    for (std::size_t c = 0; c < plan.names.size(); ++c)
      if (!is_target[c])
        plan.features.push_back(c);
  } else {
    plan.features = indices_of(reader, plan.names, columns.features, "features");
  }
  for (auto f : plan.features)
    if (is_target[f])
      reader.fail(1, 1, "column " + quote_user_text(plan.names[f]) +
                            " is both a feature and a target");
  if (plan.features.empty())
    reader.fail(1, 1, "no feature columns: every column is a target");
  return plan;
}

/// A cell's number, or a data_error saying what the cell holds instead.
double cell_value(const csv_reader& reader, const csv_field& field, const std::string& column) {
  if (trimmed(field.text).empty())
    reader.fail(field.line, field.column,
                "an empty cell (a missing value) in column " + quote_user_text(column) +
                    "; fill or drop missing values first");
  const auto value = number_of(field.text);
  if (!value || !std::isfinite(*value))
    reader.fail(field.line, field.column,
                "column " + quote_user_text(column) + " holds " + quote_user_text(field.text) +
                    ", not a finite number; troupe reads numeric columns only (leave a "
                    "categorical column out with [data] features = [...], or encode it as "
                    "numbers first)");
  return *value;
}

}  // namespace

namespace {

/// Where a table's feature rows go as they are parsed: memory, or, past `memory_values`, a
/// scratch file of float32 rows that the split then reads as a .npy's (Note [a CSV table
/// larger than memory]).
class feature_sink {
 public:
  feature_sink(dataset& out, std::string path, std::int64_t memory_values)
      : out_(out), path_(std::move(path)), memory_values_(memory_values) {}

  void push(float value) {
    if (file_.fd < 0 && static_cast<std::int64_t>(out_.images.size()) < memory_values_) {
      out_.images.push_back(value);
      return;
    }
    if (file_.fd < 0) {  // past the memory's share: what is in memory moves to the file
      file_ = make_scratch_file(quote_user_path(path_));
      buffer_.assign(out_.images.begin(), out_.images.end());
      written_ = static_cast<std::int64_t>(buffer_.size());
      decltype(out_.images)().swap(out_.images);
    }
    buffer_.push_back(value);
    ++written_;
    if (buffer_.size() >= (std::size_t{1} << 20))
      flush();
  }

  /// The rows, once every one is pushed: in memory, or the file's through a .npy's reader.
  void finish() {
    if (file_.fd < 0)
      return;
    flush();
    npy_header header;
    header.type = npy_type::f32;
    header.item_bytes = 4;
    header.shape = {out_.count, out_.features};
    header.elements = written_;
    header.data_offset = 0;
    out_.rows = open_npy_rows(npy_array{file_.path, header, quote_user_text(path_), 0}, {});
  }

 private:
  void flush() {
    if (!write_all(file_.fd, buffer_.data(), buffer_.size() * sizeof(float)))
      throw data_error(quote_user_path(path_) +
                       ": cannot write its parsed rows to a temporary file: " +
                       std::strerror(errno) + " (set TMPDIR to a directory with room)");
    buffer_.clear();
  }

  dataset& out_;
  std::string path_;
  std::int64_t memory_values_;
  scratch_file file_;
  std::vector<float> buffer_;
  std::int64_t written_ = 0;
};

/// The table's bytes, mapped: a table larger than memory is read through the page cache.
std::unique_ptr<file_bytes> map_table(const std::string& path, std::int64_t& size) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0)
    throw data_error(quote_user_path(path) + ": cannot open: " + std::strerror(errno));
  if (!S_ISREG(info.st_mode))
    throw data_error(quote_user_path(path) +
                     " is not a regular file (a CSV table is read from a file)");
  size = info.st_size;
  if (size > limits::max_csv_bytes)
    throw data_error(quote_user_path(path) + ": " + describe_bytes(size) + ", more than the " +
                     describe_bytes(limits::max_csv_bytes) + " troupe reads of a CSV table");
  return std::make_unique<file_bytes>(path, size, file_access::mapped);
}

}  // namespace

// Note [a CSV table larger than memory]
// The table's text is mapped, not read: the kernel pages it in as the parser walks it and may
// drop what was parsed. Its rows are parsed once (not on every epoch) into memory as float32,
// up to `memory_values` feature values (2^27 = 512 MiB by default); past that, everything
// parsed goes to a scratch file of float32 rows (file_bytes.hpp: anonymous, gone when the
// process ends), which the split reads as a .npy file's rows are read: mapped, never whole.
// The targets (one label or K values a row) stay in memory.
dataset read_csv(const std::string& path, const csv_columns& columns, target_kind targets,
                 const feature_normalisation& normalisation, std::int64_t memory_values) {
  std::int64_t size = 0;
  const auto mapped = map_table(path, size);
  std::vector<unsigned char> unused;
  const auto* bytes = size > 0 ? mapped->at(0, static_cast<std::size_t>(size), unused) : nullptr;
  csv_reader reader{std::string_view(reinterpret_cast<const char*>(bytes), static_cast<std::size_t>(size)),
                    path, columns.delimiter};
  std::vector<csv_field> fields;
  if (!reader.next(fields))
    reader.fail(1, 1, "the file is empty; expected a header row naming the columns");
  auto plan = plan_columns(reader, fields, columns);
  const bool labels = targets == target_kind::class_ids;
  if (columns.targets_optional)
    plan.targets.clear();  // read no targets
  else if (labels && plan.targets.size() != 1)
    reader.fail(1, 1, "a loss of class labels reads one target column, not " +
                          std::to_string(plan.targets.size()));
  dataset out;
  out.features = static_cast<std::int64_t>(plan.features.size());
  out.outputs = labels || plan.targets.empty() ? 0 : static_cast<std::int64_t>(plan.targets.size());
  const auto norm = resolve_normalisation(normalisation, out.features, path);
  feature_sink sink{out, path, memory_values};
  while (reader.next(fields)) {
    const auto& first = fields.front();
    if (fields.size() != plan.names.size())
      reader.fail(first.line, 1, "a row of " + std::to_string(fields.size()) +
                                     " fields; the header has " +
                                     std::to_string(plan.names.size()) + " columns");
    if (out.count >= limits::max_samples)
      reader.fail(first.line, 1, "more than " + std::to_string(limits::max_samples) +
                                     " rows (the limit of samples in a data set)");
    for (std::size_t f = 0; f < plan.features.size(); ++f) {
      const auto column = plan.features[f];
      sink.push(norm.apply(static_cast<std::int64_t>(f),
                           cell_value(reader, fields[column], plan.names[column])));
    }
    for (const auto column : plan.targets) {
      const double value = cell_value(reader, fields[column], plan.names[column]);
      if (!labels) {
        out.values.push_back(static_cast<float>(value));
        continue;
      }
      if (value < 0 || value > max_label || value != std::floor(value))
        reader.fail(fields[column].line, fields[column].column,
                    "target " + quote_user_text(fields[column].text) + " of column " +
                        quote_user_text(plan.names[column]) +
                        " is not a class label (an integer in 0 .. 16777215)");
      out.labels.push_back(static_cast<std::int32_t>(value));
    }
    ++out.count;
  }
  if (out.count == 0)
    reader.fail(1, 1, "a header and no rows; expected one row a sample after it");
  sink.finish();
  return out;
}

dataset_split load_csv(const std::string& train_path, const std::string& test_path,
                       const csv_columns& columns, target_kind targets,
                       const feature_normalisation& normalisation, std::int64_t memory_values) {
  dataset_split out;
  out.train = read_csv(train_path, columns, targets, normalisation, memory_values);
  if (test_path.empty()) {  // [data] validation instead
    leave_test_empty(out, targets == target_kind::class_ids, train_path);
    return out;
  }
  out.test = read_csv(test_path, columns, targets, normalisation, memory_values);
  if (out.test.features != out.train.features)
    throw data_error(quote_user_path(test_path) + " has " + std::to_string(out.test.features) +
                     " feature columns, but " + quote_user_path(train_path) + " has " +
                     std::to_string(out.train.features) + "; the tables must agree");
  if (targets == target_kind::class_ids)
    count_classes(out, train_path);
  return out;
}

}  // namespace troupe
