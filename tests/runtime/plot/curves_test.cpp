// curves_test.cpp: `troupe plot`'s reading of metrics files (what counts as a point, errors
// with file and line) and its pictures (one curve per run and panel, safe labels, long runs
// bucketed), and the command's exit codes.
#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <string>

#include "runtime/plot/curves.hpp"
#include "tests/cli/run_troupe.hpp"
#include "tests/temp_files.hpp"
#include "troupe/error.hpp"

using namespace troupe;
using troupe::testing::run_troupe;

namespace {

std::string write(const test::temp_directory& d, const std::string& name, const std::string& text) {
  const auto path = d.file(name);
  std::ofstream{path} << text;
  return path;
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

const char* const troupe_lines =
    "{\"accuracy\":0.1,\"epoch\":0,\"loss\":2.3,\"lr\":0.001,\"step\":0}\n"
    "{\"accuracy\":0.5,\"epoch\":0,\"loss\":1.1,\"lr\":0.001,\"step\":1}\n"
    "\n"
    "{\"epoch\":0,\"step\":2,\"test_accuracy\":0.81,\"test_loss\":0.52}\n"
    "{\"accuracy\":0.7,\"epoch\":1,\"loss\":0.7,\"lr\":0.001,\"step\":2}\n"
    "{\"event\":\"done\",\"steps\":3,\"test_accuracy\":0.83,\"samples_per_s\":100}\n";

}  // namespace

TEST_CASE(
    "metrics files give training and evaluation points, and summaries and blanks are skipped") {
  test::temp_directory d{"troupe-plot"};
  const auto run = read_metrics(write(d, "a.jsonl", troupe_lines), "a");
  REQUIRE(run.train_loss.size() == 3);
  CHECK(run.train_loss[1].step == 1);
  CHECK(run.train_loss[1].value == doctest::Approx(1.1));
  REQUIRE(run.test_accuracy.size() == 1);  // the "done" event's accuracy is not a point
  CHECK(run.test_accuracy[0].value == doctest::Approx(0.81));
  REQUIRE(run.test_loss.size() == 1);
  CHECK(run.label == "a");
}

TEST_CASE(
    "over seconds, each point sits at its step's train_s, an evaluation at the step before it") {
  test::temp_directory d{"troupe-plot"};
  const auto path = write(d, "timed.jsonl",
                          "{\"loss\":2.3,\"step\":0,\"train_s\":0.25}\n"
                          "{\"loss\":1.1,\"step\":1,\"train_s\":0.75}\n"
                          "{\"step\":2,\"test_accuracy\":0.8,\"test_loss\":0.5}\n"
                          "{\"loss\":0.7,\"step\":2,\"train_s\":1.5}\n");
  const auto run = read_metrics(path, "t", curve_axis::seconds);
  REQUIRE(run.train_loss.size() == 3);
  CHECK(run.train_loss[1].step == 0.75);
  CHECK(run.train_loss[2].step == 1.5);
  REQUIRE(run.test_loss.size() == 1);
  CHECK(run.test_loss[0].step == 0.75);
  const auto svg = render_curves_svg({run}, 900, curve_axis::seconds);
  CHECK(svg.find(">seconds of training</text>") != std::string::npos);
  CHECK(svg.find(">step</text>") == std::string::npos);
  // A file of step lines without seconds (an older run's, or another program's) cannot be
  // drawn over them, and says so.
  CHECK_THROWS_WITH_AS(read_metrics(write(d, "a.jsonl", troupe_lines), "a", curve_axis::seconds),
                       doctest::Contains("without \"train_s\""), user_error);
}

TEST_CASE("a bad metrics file is an error naming the file and the line") {
  test::temp_directory d{"troupe-plot"};
  CHECK_THROWS_WITH_AS(read_metrics(write(d, "bad.jsonl", "{\"step\":0,\"loss\":1}\n\n{\"step\":1,"), "x"),
                       doctest::Contains("bad.jsonl' line 3"), user_error);
  CHECK_THROWS_WITH_AS(read_metrics(write(d, "type.jsonl", "{\"step\":0,\"loss\":\"low\"}\n"), "x"),
                       doctest::Contains("line 1: \"loss\" should be a number, found the string"),
                       user_error);
  CHECK_THROWS_WITH_AS(read_metrics(write(d, "array.jsonl", "[1, 2]\n"), "x"),
                       doctest::Contains("line 1: expected a JSON object, found an array"),
                       user_error);
  CHECK_THROWS_WITH_AS(read_metrics(write(d, "empty.jsonl", "{\"event\":\"done\"}\n"), "x"),
                       doctest::Contains("no training or evaluation lines"), user_error);
  CHECK_THROWS_AS(read_metrics(d.file("missing.jsonl"), "x"), user_error);
  // Nested past the JSON depth limit: refused before the parser recurses.
  CHECK_THROWS_WITH_AS(read_metrics(write(d, "deep.jsonl", std::string(100000, '[') + "\n"), "x"),
                       doctest::Contains("deep.jsonl' line 1"), user_error);
}

TEST_CASE("troupe plot refuses an endless or nested metrics file with exit code 2") {
  test::temp_directory d{"troupe-plot"};
  // /dev/zero: read up to the 256 MiB limit and refused, not read forever.
  auto endless = run_troupe("plot /dev/zero -o " + d.file("c.svg"));
  CHECK(endless.exit_code == 2);
  CHECK(endless.output.find("metrics file") != std::string::npos);
  auto deep = run_troupe("plot " + write(d, "deep.jsonl", std::string(100000, '{') + "\n") +
                         " -o " + d.file("c.svg"));
  CHECK(deep.exit_code == 2);
  CHECK(deep.output.find("line 1") != std::string::npos);
}

TEST_CASE("the picture has a curve per run and panel, safe labels, and buckets long runs") {
  test::temp_directory d{"troupe-plot"};
  std::string long_run;
  for (int step = 0; step < 5000; ++step)
    long_run += "{\"step\":" + std::to_string(step) + ",\"loss\":" +
                std::to_string(2.0 / (1 + step)) + "}\n";
  const std::vector<run_curves> runs{read_metrics(write(d, "a.jsonl", troupe_lines), "troupe"),
                                     read_metrics(write(d, "b.jsonl", long_run), "<torch> & co")};
  const auto svg = render_curves_svg(runs, 900);
  CHECK(svg.find("<svg") == 0);
  // Three panels; run 0 has a curve in each, run 1 (training only) in the first.
  CHECK(occurrences(svg, "class=\"panel\"") == 3);
  CHECK(occurrences(svg, "class=\"run-0\"") == 3);
  CHECK(occurrences(svg, "class=\"run-1\"") == 1);
  CHECK(svg.find("&lt;torch&gt; &amp; co") != std::string::npos);
  CHECK(svg.find("<torch>") == std::string::npos);
  // 5000 steps drawn as at most (900 - 90) / 2 bucket means.
  const std::regex long_curve{"class=\"run-1\"[^>]*points=\"([^\"]*)\""};
  std::smatch match;
  REQUIRE(std::regex_search(svg, match, long_curve));
  CHECK(occurrences(match[1].str(), ",") <= 405);
  // Only training lines: one panel.
  const auto only_training = render_curves_svg({runs[1]}, 900);
  CHECK(occurrences(only_training, "class=\"panel\"") == 1);
  CHECK(render_curves_html(runs, 900).find("<!DOCTYPE html>") == 0);
  // Huge values a hair apart (a diverged run): a few ticks, drawn at once, not a loop that
  // never ends.
  run_curves diverged;
  diverged.label = "diverged";
  diverged.train_loss = {{0, 1e20}, {1, 1e20 * (1 + 1e-15)}, {2, 1e20}};
  CHECK(occurrences(render_curves_svg({diverged}, 900), "stroke=\"#e4e4e4\"") <= 13);
}

TEST_CASE("troupe plot writes the picture, and refuses a bad suffix or mismatched labels") {
  test::temp_directory d{"troupe-plot"};
  const auto a = write(d, "a.jsonl", troupe_lines);
  const auto b = write(d, "b.jsonl", troupe_lines);
  auto ok = run_troupe("plot " + a + " " + b + " --labels troupe,pytorch -o " + d.file("c.svg"));
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  std::ifstream written{d.file("c.svg")};
  std::string svg((std::istreambuf_iterator<char>(written)), std::istreambuf_iterator<char>());
  CHECK(svg.find("pytorch") != std::string::npos);
  auto suffix = run_troupe("plot " + a + " -o " + d.file("c.png"));
  CHECK(suffix.exit_code == 2);
  CHECK(suffix.output.find("should end in .svg or .html") != std::string::npos);
  auto labels = run_troupe("plot " + a + " " + b + " --labels one -o " + d.file("c.svg"));
  CHECK(labels.exit_code == 2);
  CHECK(labels.output.find("--labels names 1 run(s) for 2 file(s)") != std::string::npos);
  auto none = run_troupe("plot -o " + d.file("c.svg"));
  CHECK(none.exit_code == 2);
}
