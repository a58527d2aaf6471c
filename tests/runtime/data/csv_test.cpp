// csv_test.cpp: CSV tables as a data source (runtime/data/csv.hpp). Every file is written by
// the test: the fields as Python's csv module and pandas write them (quotes, CRLF, a BOM,
// blank lines) read back as NumPy's float32 of the same numbers; targets as class labels or
// float values; every bad table refused at its file:line:column; and a run on a CSV table
// trains exactly as the same numbers as .npy files do.
#include "runtime/data/csv.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "actors/session/prepare.hpp"
#include "actors/session/session.hpp"
#include "runtime/graph/topology.hpp"
#include "runtime/config/config.hpp"
#include "tests/actors/equivalence_support.hpp"
#include "tests/data_error_of.hpp"
#include "tests/npy_files.hpp"
#include "tests/temp_files.hpp"
#include "troupe/error.hpp"

using namespace troupe;
using troupe::test::data_error_of;
using troupe::test::temp_directory;

namespace {

std::string write_text(const temp_directory& dir, const std::string& name,
                       const std::string& text) {
  const auto path = dir / name;
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
  return path;
}

dataset read(const std::string& path, std::vector<std::string> targets,
             std::vector<std::string> features = {}, target_kind kind = target_kind::values,
             char delimiter = ',') {
  return read_csv(path, csv_columns{std::move(targets), std::move(features), delimiter}, kind,
                  feature_normalisation{});
}

std::vector<float> images_of(const dataset& d) {
  return std::vector<float>(d.images.begin(), d.images.end());
}

std::vector<float> floats(const std::vector<double>& values) {
  return std::vector<float>(values.begin(), values.end());
}

}  // namespace

TEST_CASE("a table's numbers read back as NumPy's float32 of them, quoted, CRLF or with a BOM") {
  temp_directory dir{"troupe-csv"};
  // What Python's csv module writes for a name with a comma, and pandas for floats.
  const auto path = write_text(dir, "t.csv",
                               "\xEF\xBB\xBF"
                               "a,\"b, with a comma\",y\r\n"
                               "1,0.1,3\r\n"
                               "\r\n"
                               "+2.5e-3,\"-7\",4.25\r\n"
                               " 3 , 1e30 ,-0\r\n");
  const auto d = read(path, {"y"});
  CHECK(d.count == 3);
  CHECK(d.features == 2);
  CHECK(d.outputs == 1);
  CHECK(images_of(d) == floats({1, 0.1, 2.5e-3, -7, 3, 1e30}));
  CHECK(d.values == floats({3, 4.25, -0.0}));
  // Columns picked by name, in the order named; a quoted header name with its comma.
  const auto picked = read(path, {"a", "y"}, {"b, with a comma"});
  CHECK(picked.features == 1);
  CHECK(picked.outputs == 2);
  CHECK(images_of(picked) == floats({0.1, -7, 1e30}));
  CHECK(picked.values == floats({1, 3, 2.5e-3, 4.25, 3, -0.0}));
}

TEST_CASE("class labels, a tab delimiter, quotes inside quotes and a normalisation") {
  temp_directory dir{"troupe-csv-labels"};
  const auto path = write_text(dir, "t.tsv",
                               "x\t\"the \"\"label\"\"\"\n"
                               "10\t0\n"
                               "20\t2\n"
                               "30\t1");  // no line end at the end
  auto d = read_csv(path, csv_columns{{"the \"label\""}, {}, '\t'}, target_kind::class_ids,
                    feature_normalisation{{0.5}, {5}, {2}});
  CHECK(d.labels == std::vector<std::int32_t>{0, 2, 1});
  CHECK(d.outputs == 0);
  // (x * 0.5 - 5) / 2, in double then float: the npy source's arithmetic.
  CHECK(images_of(d) == floats({0, 2.5, 5}));
  const auto split = load_csv(path, path, csv_columns{{"the \"label\""}, {}, '\t'},
                              target_kind::class_ids, feature_normalisation{});
  CHECK(split.train.classes == 3);
}

TEST_CASE("a bad table is a data_error at its file:line:column saying what was expected") {
  temp_directory dir{"troupe-csv-bad"};
  auto error_of = [&](const std::string& text, std::vector<std::string> targets = {"y"},
                      std::vector<std::string> features = {},
                      target_kind kind = target_kind::values) {
    const auto path = write_text(dir, "bad.csv", text);
    return data_error_of([&] { read(path, targets, features, kind); });
  };
  const auto at = [&](const std::string& where) { return "bad.csv':" + where + ": "; };
  CHECK(error_of("a,y\n1,2\n3\n").find(at("3:1") + "a row of 1 fields; the header has 2") !=
        std::string::npos);
  CHECK(error_of("a,y\n1,2\n3,4,5\n").find(at("3:1") + "a row of 3 fields") != std::string::npos);
  const auto categorical = error_of("a,color,y\n1,red,2\n", {"y"});
  CHECK(categorical.find(at("2:3") + "column 'color' holds 'red', not a finite number") !=
        std::string::npos);
  CHECK(categorical.find("features = [...]") != std::string::npos);
  CHECK(error_of("a,y\n1,\n").find(at("2:3") + "an empty cell (a missing value) in column 'y'") !=
        std::string::npos);
  CHECK(error_of("a,y\n1,nan\n").find("holds 'nan', not a finite number") != std::string::npos);
  CHECK(error_of("").find(at("1:1") + "the file is empty") != std::string::npos);
  CHECK(error_of("a,y\n\n").find("a header and no rows") != std::string::npos);
  CHECK(error_of("a,a,y\n1,2,3\n").find(at("1:3") + "the header names column 'a' twice") !=
        std::string::npos);
  CHECK(error_of("a,,y\n1,2,3\n").find(at("1:3") + "an empty column name") != std::string::npos);
  CHECK(error_of("a,price\n1,2\n", {"prise"})
            .find("names column 'prise', which the header does not have; did you mean "
                  "'price'? (columns: a, price)") != std::string::npos);
  CHECK(error_of("a,y\n1,2\n", {"y"}, {"a", "y"}).find("is both a feature and a target") !=
        std::string::npos);
  CHECK(error_of("a,y\n1,2\"x\n").find(at("2:3") + "a quote inside an unquoted field") !=
        std::string::npos);
  CHECK(error_of("a,y\n1,\"2\n").find(at("2:3") + "a quoted field that never ends") !=
        std::string::npos);
  CHECK(error_of("a,y\n\"1\"x,2\n").find(at("2:4") + "after a quoted field") != std::string::npos);
  CHECK(error_of("a,y\n1,2.5\n", {"y"}, {}, target_kind::class_ids)
            .find(at("2:3") + "target '2.5' of column 'y' is not a class label") !=
        std::string::npos);
  CHECK(error_of("a,y\n1,-1\n", {"y"}, {}, target_kind::class_ids).find("not a class label") !=
        std::string::npos);
  CHECK(error_of("a,y,z\n1,2,3\n", {"y", "z"}, {}, target_kind::class_ids)
            .find("reads one target column, not 2") != std::string::npos);
  // A million columns: refused at the header, before any row is parsed.
  std::string wide;
  for (int c = 0; c < 1'000'000; ++c)
    wide += "c" + std::to_string(c) + ",";
  wide += "y\n";
  CHECK(error_of(wide).find(at("1:1") + "the header names 1000001 columns; troupe reads at "
                                        "most 65536") != std::string::npos);
  const auto missing = data_error_of([&] { read(dir / "absent.csv", {"y"}); });
  CHECK(missing.find("absent.csv") != std::string::npos);
}

TEST_CASE("a run on a CSV table trains as a run on the same numbers as .npy files does") {
  temp_directory dir{"troupe-csv-run"};
  // 64 + 32 samples of 3 features, y = x0 - 2 x1 + x2 / 2, written exactly (multiples of
  // 1/8) so that the CSV text and the float32 .npy hold the same numbers.
  auto make = [&](int count, int seed, const std::string& csv, const std::string& x_npy,
                  const std::string& y_npy) {
    std::string text = "x0,x1,x2,y\n";
    std::vector<float> x, y;
    for (int i = 0; i < count; ++i) {
      const float a = static_cast<float>((i * 7 + seed) % 17 - 8) / 8;
      const float b = static_cast<float>((i * 5 + seed) % 13 - 6) / 8;
      const float c = static_cast<float>((i * 3 + seed) % 11 - 5) / 8;
      x.insert(x.end(), {a, b, c});
      y.push_back(a - 2 * b + c / 2);
      text += std::to_string(a) + "," + std::to_string(b) + "," + std::to_string(c) + "," +
              std::to_string(y.back()) + "\n";
    }
    write_text(dir, csv, text);
    test::write_float_npy(dir / x_npy, "(" + std::to_string(count) + ", 3)", x);
    test::write_float_npy(dir / y_npy, "(" + std::to_string(count) + ", 1)", y);
  };
  make(64, 1, "train.csv", "x.npy", "y.npy");
  make(32, 2, "test.csv", "tx.npy", "ty.npy");
  const std::string rest = "batch_size = 16\n[model]\nloss = \"mse\"\n" + test::linear(8) +
                           test::layer("tanh") + test::linear(1) +
                           "[optimizer]\ntype = \"adam\"\nlr = 0.01\n";
  const auto csv = "[run]\nsteps = 20\nseed = 3\n[data]\nsource = \"csv\"\npath = \"" +
                   dir / "train.csv" + "\"\ntest_path = \"" + dir / "test.csv" +
                   "\"\ntarget = \"y\"\n" + rest;
  const auto npy = "[run]\nsteps = 20\nseed = 3\n[data]\nsource = \"npy\"\nfeatures = \"" +
                   dir / "x.npy" + "\"\ntargets = \"" + dir / "y.npy" + "\"\ntest_features = \"" +
                   dir / "tx.npy" + "\"\ntest_targets = \"" + dir / "ty.npy" + "\"\n" + rest;
  CHECK(test::train_twenty_steps(csv) == test::train_twenty_steps(npy));
  // Standardised by the training split's statistics, the same on both.
  const auto standard = [](std::string text) {
    return text.insert(text.find("batch_size"), "normalize = \"standard\"\n");
  };
  CHECK(test::train_twenty_steps(standard(csv)) == test::train_twenty_steps(standard(npy)));
  CHECK(test::train_twenty_steps(standard(csv)) != test::train_twenty_steps(csv));
  // And on two replicas, as every wiring does.
  CHECK(test::largest_difference(
            test::train_twenty_steps(csv),
            test::train_twenty_steps(csv + "[parallel]\ndevices = [\"cpu:0\", \"cpu:1\"]\n"
                                           "data = 2\n")) <= 1e-5);
}

TEST_CASE("source = \"csv\" names its tables and target, and a one-character delimiter") {
  temp_directory dir{"troupe-csv-config"};
  const auto table = write_text(dir, "t.csv", "a,y\n1,2\n");
  const std::string model = "[[model.layers]]\ntype = \"linear\"\nout = 1\n";
  auto config_error_of = [&](const std::string& data) {
    try {
      parse_config("[data]\nsource = \"csv\"\n" + data + model, "c.toml", dir.string());
    } catch (const config_error& e) {
      return std::string(e.what());
    }
    FAIL("no config_error for " << data);
    return std::string{};
  };
  CHECK(config_error_of("test_path = \"t.csv\"\ntarget = \"y\"\n")
            .find("[data] source = \"csv\" needs path") != std::string::npos);
  CHECK(config_error_of("path = \"t.csv\"\ntarget = \"y\"\n").find("needs test_path") !=
        std::string::npos);
  CHECK(config_error_of("path = \"t.csv\"\ntest_path = \"t.csv\"\n").find("needs target") !=
        std::string::npos);
  CHECK(config_error_of("path = \"t.csv\"\ntest_path = \"u.csv\"\ntarget = \"y\"\n")
            .find("c.toml:4:1: [data] test_path: ") != std::string::npos);
  CHECK(config_error_of("path = \"t.csv\"\ntest_path = \"t.csv\"\ntarget = 3\n")
            .find("expected a column name or an array of them, found an integer") !=
        std::string::npos);
  CHECK(config_error_of("path = \"t.csv\"\ntest_path = \"t.csv\"\ntarget = \"y\"\n"
                        "delimiter = \";;\"\n")
            .find("expected one character") != std::string::npos);
  const auto config = parse_config("[data]\nsource = \"csv\"\npath = \"t.csv\"\ntest_path = "
                                   "\"t.csv\"\ntarget = [\"y\"]\nfeatures = [\"a\"]\n"
                                   "delimiter = \"\\t\"\n" +
                                       model,
                                   "c.toml", dir.string());
  CHECK(config.data.path == table);
  CHECK(config.data.target_columns == std::vector<std::string>{"y"});
  CHECK(config.data.feature_columns == std::vector<std::string>{"a"});
  CHECK(config.data.delimiter == '\t');
}

TEST_CASE("plan --eject keeps a CSV or .npy source's own keys, so the ejected config runs") {
  temp_directory dir{"troupe-csv-eject"};
  const auto table = write_text(dir, "t.csv", "a;b;c;y1;y2\n1;2;3;4;5\n6;7;8;9;10\n");
  const auto config = parse_config(
      "[data]\nsource = \"csv\"\npath = \"t.csv\"\ntest_path = \"t.csv\"\n"
      "target = [\"y1\", \"y2\"]\nfeatures = [\"c\", \"a\"]\ndelimiter = \";\"\n"
      "scale = [0.5, 2]\nbatch_size = 2\n[model]\nloss = { type = \"huber\", delta = 0.25 }\n"
      "[[model.layers]]\ntype = \"linear\"\nout = 2\n",
      "c.toml", dir.string());
  const auto prepared = prepare_session(config);
  const auto ejected = parse_config(format_explicit(prepared.graph, config), "e.toml", "/");
  const auto& d = ejected.data;
  CHECK(d.source == data_source::csv);
  CHECK(d.path == table);
  CHECK(d.test_path == table);
  CHECK(d.target_columns == std::vector<std::string>{"y1", "y2"});
  CHECK(d.feature_columns == std::vector<std::string>{"c", "a"});
  CHECK(d.delimiter == ';');
  CHECK(d.scale == std::vector<double>{0.5, 2});
  CHECK(ejected.model.loss == "huber");
  REQUIRE(ejected.model.loss_settings.count("delta") == 1);
  CHECK(std::get<double>(ejected.model.loss_settings.at("delta").value) == 0.25);
  CHECK(prepare_session(ejected).data->train.images == prepared.data->train.images);
}

TEST_CASE("normalize = \"standard\" gives every training feature mean 0 and std 1") {
  temp_directory dir{"troupe-csv-standard"};
  // Features far from 0 with a small spread (no cancellation), one that never varies.
  std::string text = "big,small,constant,y\n";
  for (int i = 0; i < 100; ++i)
    text += std::to_string(1e6 + i) + "," + std::to_string(0.001 * (i % 7)) + ",5," +
            std::to_string(i % 2) + "\n";
  write_text(dir, "t.csv", text);
  auto config = parse_config("[data]\nsource = \"csv\"\npath = \"t.csv\"\ntest_path = \"t.csv\"\n"
                             "target = \"y\"\nnormalize = \"standard\"\nbatch_size = 10\n"
                             "[[model.layers]]\ntype = \"linear\"\nout = 2\n",
                             "s.toml", dir.string());
  const auto data = load_session_data(config);
  REQUIRE(data->feature_mean.size() == 3);
  CHECK(data->feature_mean[0] == doctest::Approx(1e6 + 49.5));
  CHECK(data->feature_std[2] == 1.0);  // never varies: divided by 1, as StandardScaler does
  for (std::size_t f = 0; f < 3; ++f) {
    double sum = 0, squares = 0;
    for (std::int64_t i = 0; i < 100; ++i) {
      const double v = data->train.images[static_cast<std::size_t>(i * 3) + f];
      sum += v;
      squares += v * v;
    }
    CHECK(std::abs(sum / 100) < 1e-6);
    CHECK(squares / 100 == doctest::Approx(f == 2 ? 0.0 : 1.0).epsilon(1e-5));
  }
  auto refused = [&](const std::string& data_text) {
    try {
      parse_config(data_text + "[[model.layers]]\ntype = \"linear\"\nout = 2\n", "s.toml",
                   dir.string());
    } catch (const config_error& e) {
      return std::string(e.what());
    }
    return std::string{};
  };
  CHECK(refused("[data]\nsource = \"csv\"\npath = \"t.csv\"\ntest_path = \"t.csv\"\n"
                "target = \"y\"\nnormalize = \"standard\"\nmean = 3\n")
            .find("remove mean") != std::string::npos);
  CHECK(refused("[data]\nsource = \"synthetic\"\nnormalize = \"standard\"\n")
            .find("is for source = \"npy\", \"npz\", \"safetensors\" or \"csv\"") != std::string::npos);
  CHECK(refused("[data]\nsource = \"csv\"\npath = \"t.csv\"\ntest_path = \"t.csv\"\n"
                "target = \"y\"\nnormalize = \"standrad\"\n")
            .find("did you mean 'standard'") != std::string::npos);
}

TEST_CASE("a table past its share of memory is parsed once into a scratch file and read as rows") {
  temp_directory dir{"troupe-csv-scratch"};
  std::string text = "a,b,c,y\n";
  for (int i = 0; i < 500; ++i)
    text += std::to_string(i * 0.25) + "," + std::to_string(-i) + ",\"" + std::to_string(i % 7) +
            "\"," + std::to_string(i % 3) + "\n";
  const auto path = write_text(dir, "t.csv", text);
  const csv_columns columns{{"y"}, {}, ','};
  const feature_normalisation scaled{{0.5}, {1.0}, {2.0}};
  const auto memory = read_csv(path, columns, target_kind::class_ids, scaled);
  REQUIRE(memory.rows == nullptr);
  // 1500 values; past 100 of them in memory, all of them go to the file.
  const auto spilled = read_csv(path, columns, target_kind::class_ids, scaled, 100);
  REQUIRE(spilled.rows != nullptr);
  CHECK(spilled.images.empty());
  CHECK(spilled.count == 500);
  CHECK(spilled.features == 3);
  CHECK(spilled.labels == memory.labels);
  std::vector<std::int64_t> picked{499, 0, 250, 17};
  std::vector<float> a(12), b(12);
  memory.gather(picked.data(), 0, picked.size(), a.data());
  spilled.gather(picked.data(), 0, picked.size(), b.data());
  CHECK(a == b);
  // A table of size 0 and a directory are refused as before, naming them.
  CHECK(data_error_of([&] { read(write_text(dir, "empty.csv", ""), {"y"}); })
            .find("the file is empty") != std::string::npos);
  CHECK(data_error_of([&] { read(dir.string(), {"y"}); }).find("is not a regular file") !=
        std::string::npos);
}
