// The trace readers: trace_file parsing, trace_summary numbers against hand computation on
// the GPipe trace of trace_test_trace.hpp, and the timeline's SVG and HTML.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/trace_tools/summary.hpp"
#include "runtime/trace_tools/timeline.hpp"
#include "tests/runtime/trace/test_events.hpp"
#include "tests/runtime/trace_tools/test_trace.hpp"
#include "tests/temp_files.hpp"
#include "troupe/error.hpp"
#include "troupe/trace.hpp"

using namespace troupe;

namespace {

trace_file gpipe(std::int64_t dropped = 0) {
  return parse_trace(test::gpipe_trace(dropped).dump(), "gpipe.json");
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size()))
    ++n;
  return n;
}

// A small XML well-formedness check: tags balance, attribute values are quoted, '&' starts
// an entity, and there is exactly one root element, named `root`. Returns "" or the problem.
std::string check_xml(const std::string& text, const std::string& root) {
  std::vector<std::string> open;
  int roots = 0;
  std::size_t i = 0;
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' || c == '.';
  };
  while (i < text.size()) {
    if (text[i] != '<') {
      if (text[i] == '&') {
        auto semi = text.find(';', i);
        if (semi == std::string::npos || semi - i > 8)
          return "bare & at " + std::to_string(i);
      } else if (open.empty() && !std::isspace(static_cast<unsigned char>(text[i]))) {
        return "text outside the root at " + std::to_string(i);
      }
      ++i;
      continue;
    }
    if (text.compare(i, 4, "<!--") == 0) {
      auto end = text.find("-->", i);
      if (end == std::string::npos)
        return "unclosed comment";
      i = end + 3;
      continue;
    }
    bool closing = i + 1 < text.size() && text[i + 1] == '/';
    std::size_t j = i + (closing ? 2 : 1);
    std::size_t name_start = j;
    while (j < text.size() && name_char(text[j]))
      ++j;
    std::string name = text.substr(name_start, j - name_start);
    if (name.empty())
      return "a tag without a name at " + std::to_string(i);
    if (closing) {
      while (j < text.size() && std::isspace(static_cast<unsigned char>(text[j])))
        ++j;
      if (j >= text.size() || text[j] != '>')
        return "bad closing tag at " + std::to_string(i);
      if (open.empty() || open.back() != name)
        return "</" + name + "> does not close <" + (open.empty() ? "" : open.back()) + ">";
      open.pop_back();
      i = j + 1;
      continue;
    }
    // Attributes: name="value" or name='value', then > or />.
    bool self_closing = false;
    while (true) {
      while (j < text.size() && std::isspace(static_cast<unsigned char>(text[j])))
        ++j;
      if (j >= text.size())
        return "unterminated tag <" + name + ">";
      if (text[j] == '>')
        break;
      if (text.compare(j, 2, "/>") == 0) {
        self_closing = true;
        ++j;
        break;
      }
      std::size_t attribute = j;
      while (j < text.size() && name_char(text[j]))
        ++j;
      if (j == attribute || j >= text.size() || text[j] != '=')
        return "bad attribute in <" + name + "> at " + std::to_string(attribute);
      char quote = text[++j];
      if (quote != '"' && quote != '\'')
        return "unquoted attribute in <" + name + "> at " + std::to_string(attribute);
      auto end = text.find(quote, j + 1);
      if (end == std::string::npos)
        return "unterminated attribute value in <" + name + ">";
      auto value = text.substr(j + 1, end - j - 1);
      if (value.find('<') != std::string::npos)
        return "'<' inside an attribute of <" + name + ">";
      j = end + 1;
    }
    if (open.empty()) {
      ++roots;
      if (name != root)
        return "the root is <" + name + ">, expected <" + root + ">";
    }
    if (!self_closing)
      open.push_back(name);
    i = j + 1;
  }
  if (!open.empty())
    return "<" + open.back() + "> is never closed";
  return roots == 1 ? "" : std::to_string(roots) + " root elements";
}

}  // namespace

TEST_CASE("a trace file is read into jobs, handlers, counters, markers and run metadata") {
  auto t = gpipe();
  CHECK(t.devices == std::vector<std::string>{"cpu:0", "cpu:1", "host"});
  CHECK(t.tracks.size() == 9);
  CHECK(t.wires.size() == 3);
  CHECK(t.stages == 2);
  CHECK(t.microbatches == 4);
  CHECK(t.jobs.size() == 4 * (9 + 10) + 1);
  CHECK(t.handlers.size() == 4 * 8);
  CHECK(t.markers.size() == 4);
  CHECK(t.counters.at("credits layer_0 -> layer_1").size() == 16);
  CHECK(t.first_us == 0);
  CHECK(t.last_us == 8000);
  // Jobs get their device from the process and their track from the thread metadata.
  CHECK(t.jobs.front().name == "copy");  // at 0 with cpu:0's first forward, recorded first
  CHECK(t.jobs.front().device == "cpu:1");
  CHECK(t.jobs.front().track == "cpu:1 stream");
  CHECK(t.jobs.front().bytes == 4096);
  CHECK(t.handlers.front().actor == "layer_1");
  CHECK(t.handlers.front().from == "layer_0");
}

TEST_CASE("natural order puts layer_2 before layer_10") {
  CHECK(natural_less("layer_2", "layer_10"));
  CHECK_FALSE(natural_less("layer_10", "layer_2"));
  CHECK(natural_less("cpu:1", "cpu:2"));
  CHECK(natural_less("loader", "loss"));
  CHECK_FALSE(natural_less("opt_0", "opt_0"));
}

TEST_CASE("the summary's utilisation and pipeline bubble match the hand-made GPipe schedule") {
  auto s = summarize_trace(gpipe());
  // The schedule's times are integers in microseconds, exactly representable: the sums are
  // exact, and the ratios are compared with doctest's default Approx (1e-5 relative).
  CHECK(s.run_us == 8000);
  REQUIRE(s.devices.size() == 2);
  CHECK(s.devices[0].name == "cpu:0");
  CHECK(s.devices[0].busy_us == 4 * 1300 + 50);  // + the eval forward
  CHECK(s.devices[0].jobs == 37);
  CHECK(s.devices[0].utilisation == doctest::Approx(5250.0 / 8000));
  CHECK(s.devices[1].utilisation == doctest::Approx(5400.0 / 8000));
  REQUIRE(s.pipeline.size() == 2);
  CHECK(s.pipeline[0].devices == std::vector<std::string>{"cpu:0"});
  CHECK(s.pipeline[0].bubble == doctest::Approx(1 - 5250.0 / 8000));
  CHECK(s.pipeline[1].bubble == doctest::Approx(1 - 5400.0 / 8000));
  CHECK(s.theory_bubble == doctest::Approx(1.0 / 5));  // (P - 1) / (M + P - 1), P = 2, M = 4
  // Equal stages (4 x (100 + 200) a step, 4 steps; the eval forward does not count_of): the
  // costed theory is the formula's.
  CHECK(s.pipeline[0].work_us == 4800);
  CHECK(s.pipeline[1].work_us == 4800);
  CHECK(s.pipeline[0].theory == doctest::Approx(0.2));
  CHECK(s.pipeline[1].theory == doctest::Approx(0.2));
}

TEST_CASE("for stages of unequal cost the summary's costed theory is the slower stage's pipeline") {
  // A 300 us loss job a step on cpu:1 makes stage 1 cost 1500 us a step to stage 0's 1200:
  // a step takes at least (1200 + 1500) / 4 + 3 x 1500 / 4 = 1800 us of which stage 0 is
  // busy 1200 (theory 1/3) and stage 1 1500 (1/6). Update jobs are not micro-batch work.
  auto json = test::gpipe_trace();
  for (std::int64_t step = 0; step < 4; ++step)
    json["traceEvents"].push_back(
        {{"ph", "X"},
         {"cat", "job"},
         {"name", "loss"},
         {"pid", 1},
         {"tid", 2},
         {"ts", 2000.0 * static_cast<double>(step) + 1400},
         {"dur", 300},
         {"args", {{"actor", "loss"}, {"step", step}, {"phase", "train"}, {"queued_us", 0}}}});
  auto s = summarize_trace(parse_trace(json.dump(), "unequal.json"));
  REQUIRE(s.pipeline.size() == 2);
  CHECK(s.pipeline[0].work_us == 4800);
  CHECK(s.pipeline[1].work_us == 6000);
  CHECK(s.pipeline[0].theory == doctest::Approx(1.0 / 3));
  CHECK(s.pipeline[1].theory == doctest::Approx(1.0 / 6));
  CHECK(s.theory_bubble == doctest::Approx(0.2));  // the equal-stage formula is unchanged
  auto text = format_summary_text(s);
  CHECK(text.find("costed") != std::string::npos);
  CHECK(text.find("33.3%") != std::string::npos);
  auto out = nlohmann::json::parse(format_summary_json(s));
  CHECK(out["pipeline"]["stages"][1]["theory"].get<double>() == doctest::Approx(1.0 / 6));
  CHECK(out["pipeline"]["stages"][1]["work_us"].get<double>() == 6000);
}

TEST_CASE("each job kind's name reads back as that kind, and other names as other") {
  for (auto kind : all_job_kinds) {
    CAPTURE(job_kind_name(kind));
    CHECK(job_kind_of(job_kind_name(kind)) == kind);
  }
  CHECK(job_kind_of("scale") == job_kind::other);  // a plugin's job
  CHECK(job_kind_of("") == job_kind::other);
  CHECK(job_kind_of("Forward") == job_kind::other);
  // A trace's jobs carry their kind; handlers (messages) have none.
  auto t = gpipe();
  for (const auto& j : t.jobs)
    CHECK(j.kind == job_kind_of(j.name));
  for (const auto& h : t.handlers)
    CHECK(h.kind == job_kind::other);
}

TEST_CASE("the summary splits each actor's time into compute, handling, waiting and idle") {
  auto s = summarize_trace(gpipe());
  std::vector<std::string> order;
  for (const auto& a : s.actors)
    order.push_back(a.name);
  // By device in trace order, then by name.
  CHECK(order == std::vector<std::string>{"layer_0", "loader", "opt_0", "layer_1", "loss", "opt_1",
                                          "trainer"});
  const auto& layer_0 = s.actors[0];
  CHECK(layer_0.compute_us == 4 * 1200 + 50);
  CHECK(layer_0.handling_us == 16 * 10);
  CHECK(layer_0.waiting_us == 16 * 5);
  CHECK(layer_0.idle_us == 8000 - 4850 - 160 - 80);
  const auto& layer_1 = s.actors[3];
  CHECK(layer_1.compute_us == 4 * 1250);
  CHECK(layer_1.waiting_us == 0);
  CHECK(s.actors[1].idle_us == 8000);  // the loader did nothing recorded
}

TEST_CASE("the summary counts messages and bytes per wire") {
  auto s = summarize_trace(gpipe());
  REQUIRE(s.wires.size() == 2);
  CHECK(s.wires[0].from == "layer_0");
  CHECK(s.wires[0].to == "layer_1");
  CHECK(s.wires[0].kind == "forward");
  CHECK(s.wires[0].messages == 16);
  CHECK(s.wires[0].bytes == 16 * 1024);
  CHECK(s.wires[1].kind == "backward");
  CHECK(s.wires[1].messages == 16);
}

TEST_CASE("each step splits into compute, communication and waiting on its busiest device") {
  auto s = summarize_trace(gpipe());
  REQUIRE(s.steps.size() == 4);  // the eval job makes no step of its own
  for (const auto& step : s.steps) {
    INFO("step " << step.step);
    CHECK(step.device == "cpu:1");  // 1350 us of jobs against cpu:0's 1300
    CHECK(step.compute_us == 1300);
    CHECK(step.communication_us == 50);
    CHECK(step.slowest_actor == "layer_1");
    CHECK(step.slowest_actor_us == 1250);
  }
  CHECK(s.steps[0].time_us == 1600);
  CHECK(s.steps[0].waiting_us == 250);
  // A step starts where the one before ended (Note [step time]): the steps start every
  // 2000 us, and step 3's ends 300 us late (cpu:0's update started late).
  CHECK(s.steps[1].time_us == 2000);
  CHECK(s.steps[1].waiting_us == 650);
  CHECK(s.steps[3].time_us == 2300);
  CHECK(s.steps[3].waiting_us == 950);
  // The run's step time: the steps after the first (none of three is a tenth to trim).
  CHECK(s.average.time_us == doctest::Approx((2000 + 2000 + 2300) / 3.0));
  CHECK(s.average.waiting_us == doctest::Approx((650 + 650 + 950) / 3.0));

  auto text = format_summary_text(s);
  CHECK(text.find("warning") == std::string::npos);
  CHECK(text.find("slowest steps") != std::string::npos);
  // The slowest step is listed first.
  auto slowest = text.substr(text.find("slowest steps"));
  CHECK(slowest.find("       3 ") < slowest.find("       0 "));
}

TEST_CASE("the summary's JSON parses and carries every table") {
  auto json = nlohmann::json::parse(format_summary_json(summarize_trace(gpipe())));
  CHECK(json["run_us"] == 8000);
  CHECK(json["actors"].size() == 7);
  CHECK(json["devices"][1]["utilisation"].get<double>() == doctest::Approx(0.675));
  CHECK(json["pipeline"]["theory_bubble"].get<double>() == doctest::Approx(0.2));
  CHECK(json["pipeline"]["stages"][0]["bubble"].get<double>() == doctest::Approx(1 - 0.65625));
  CHECK(json["wires"][0]["bytes"] == 16384);
  CHECK(json["steps"].size() == 4);
  CHECK(json["steps"][3]["slowest_actor"] == "layer_1");
  CHECK(json["steps"][3]["waiting_us"] == 950);
  CHECK(json["step_average"]["time_us"].get<double>() == doctest::Approx(2100));
  CHECK(json["dropped_events"] == 0);
  CHECK_FALSE(json.contains("warning"));
}

TEST_CASE("a trace that dropped events makes the summary warn first") {
  auto s = summarize_trace(gpipe(7));
  auto text = format_summary_text(s);
  CHECK(text.rfind("warning: the trace dropped 7 events", 0) == 0);
  CHECK(nlohmann::json::parse(format_summary_json(s)).contains("warning"));
}

TEST_CASE("a one-stage trace has no pipeline table") {
  auto json = test::gpipe_trace();
  json["otherData"]["stages"] = 1;
  auto s = summarize_trace(parse_trace(json.dump(), "one_stage.json"));
  CHECK(s.pipeline.empty());
  CHECK(format_summary_text(s).find("bubble") == std::string::npos);
}

TEST_CASE("the timeline SVG is well-formed with one rect per forward and backward job in the window") {
  auto t = gpipe();
  auto svg = render_timeline_svg(t, timeline_options{});
  CHECK(check_xml(svg, "svg") == "");
  // Default window: steps 1 to 3 = 3 steps x 2 stages x 4 micro-batches of each.
  CHECK(count_of(svg, "class=\"forward\"") == 24);
  CHECK(count_of(svg, "class=\"backward\"") == 24);
  CHECK(count_of(svg, "class=\"forward eval\"") == 1);  // at 3700 us, inside step 1's window
  CHECK(count_of(svg, "class=\"update\"") == 6);
  CHECK(count_of(svg, "data-step=\"0\"") == 1);  // only the eval forward (eval step 0)
  // Credits layer_0 -> layer_1 are all in use from S+200 to S+700 in each step.
  CHECK(count_of(svg, "class=\"credit-wait\"") == 3);
  CHECK(svg.find("stage 1") != std::string::npos);

  timeline_options first;
  parse_step_range("0:0", first);
  auto step_0 = render_timeline_svg(t, first);
  CHECK(check_xml(step_0, "svg") == "");
  CHECK(count_of(step_0, "class=\"forward\"") == 8);
  CHECK(count_of(step_0, "class=\"backward\"") == 8);
  CHECK(count_of(step_0, "class=\"forward\" x=") == 8);
  CHECK(count_of(step_0, "data-step=\"0\" data-microbatch=\"3\"") == 4);  // F and B on each stage
  CHECK(count_of(step_0, "class=\"credit-wait\"") == 1);
}

TEST_CASE("a trace of two nodes shows each node's rows on its own band, node0 first") {
  // The GPipe trace with its second stage on another node, listed first, as a merged
  // trace may list them: node1's device row must still come after node0's.
  auto text = test::gpipe_trace().dump();
  for (auto at = text.find("\"cpu:1"); at != std::string::npos; at = text.find("\"cpu:1", at))
    text.replace(at + 1, 5, "node1/cpu:0");
  auto json = nlohmann::json::parse(text);
  auto t = parse_trace(json.dump(), "two_nodes.json");
  REQUIRE(std::find(t.devices.begin(), t.devices.end(), "node1/cpu:0") != t.devices.end());
  std::iter_swap(t.devices.begin(), std::find(t.devices.begin(), t.devices.end(), "node1/cpu:0"));
  auto svg = render_timeline_svg(t, timeline_options{});
  CHECK(check_xml(svg, "svg") == "");
  CHECK(count_of(svg, "class=\"node\"") == 2);
  auto node0 = svg.find("data-node=\"0\"");
  auto node1 = svg.find("data-node=\"1\"");
  REQUIRE(node0 != std::string::npos);
  REQUIRE(node1 != std::string::npos);
  CHECK(node0 < node1);
  CHECK(svg.find(">node0 (coordinator)</text>") != std::string::npos);
  CHECK(svg.find(">node1</text>") != std::string::npos);
  // The band of node1 starts below every job row of node0: the y of node1's band is past
  // cpu:0's row label, and node1's device label is inside its band.
  auto y_of_element_at = [&](std::size_t inside) {
    auto start = svg.rfind('<', inside);
    return std::stod(svg.substr(svg.find(" y=\"", start) + 4));
  };
  const double band1 = y_of_element_at(node1);
  const double cpu0_label = y_of_element_at(svg.find(">cpu:0</text>"));
  const double node1_label = y_of_element_at(svg.find(">node1/cpu:0</text>"));
  CHECK(cpu0_label < band1);
  CHECK(node1_label > band1);
  // Every job still drawn: 24 forwards in the default window, as on one node.
  CHECK(count_of(svg, "class=\"forward\"") == 24);

  // One node: no bands.
  CHECK(count_of(render_timeline_svg(gpipe(), timeline_options{}), "class=\"node\"") == 0);
}

TEST_CASE("the XML checker rejects what a browser would") {
  CHECK(check_xml("<svg><g></g></svg>", "svg") == "");
  CHECK(check_xml("<svg><g></svg>", "svg") != "");
  CHECK(check_xml("<svg a=1></svg>", "svg") != "");
  CHECK(check_xml("<svg>a & b</svg>", "svg") != "");
  CHECK(check_xml("<svg/><svg/>", "svg") != "");
  CHECK(check_xml("<html></html>", "svg") != "");
}

TEST_CASE("the timeline HTML embeds the SVG with a legend and loads nothing from elsewhere") {
  auto t = gpipe();
  auto html = render_timeline_html(t, timeline_options{});
  auto svg = render_timeline_svg(t, timeline_options{});
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find(svg) != std::string::npos);
  CHECK(html.find("legend") != std::string::npos);
  CHECK(html.find("<title>") != std::string::npos);
  CHECK(html.find("http://") == html.find("http://www.w3.org/2000/svg"));  // only the namespace
  CHECK(html.find("https://") == std::string::npos);
  CHECK(html.find("<script") == std::string::npos);
}

TEST_CASE("a step window the trace does not have is an error naming the steps it has") {
  timeline_options options;
  parse_step_range("7:9", options);
  CHECK_THROWS_WITH_AS(render_timeline_svg(gpipe(), options),
                       "gpipe.json: no training steps 7 to 9 in the trace (it has steps 0 to 3)",
                       user_error);
  for (const char* bad : {"", "a:b", "3:1", "1:", "-1:2"})
    CHECK_THROWS_AS(parse_step_range(bad, options), user_error);
}

TEST_CASE("a missing file, text that is not JSON and JSON that is not a troupe trace are user errors") {
  auto missing = troupe::test::temp_file("troupe_no_such_trace.json");
  CHECK_THROWS_WITH_AS(load_trace(missing), doctest::Contains("cannot open the trace file"), user_error);
  CHECK_THROWS_WITH_AS(parse_trace("{\"traceEvents\": [", "cut.json"),
                       doctest::Contains("cut.json: not JSON (at byte"), user_error);
  CHECK_THROWS_WITH_AS(parse_trace("{\"traceEvents\": []}", "chrome.json"),
                       doctest::Contains("chrome.json: not a troupe trace"), user_error);
  CHECK_THROWS_WITH_AS(parse_trace("[1, 2]", "list.json"), doctest::Contains("not a troupe trace"),
                       user_error);
  CHECK_THROWS_WITH_AS(
      parse_trace(R"({"traceEvents": [{"ph": "X", "ts": "soon"}], "otherData": {"tracks": []}})",
                  "odd.json"),
      "odd.json: traceEvents[0]: \"ts\" should be a number, found the string 'soon'", user_error);
}

TEST_CASE("a trace written by the recorder reads back") {
  // The recorder (include/troupe/trace.hpp) and the readers meet only in the file format; this
  // checks that they agree on it: processes, track names, job actors, counters, markers.
  trace::recorder_settings settings;
  settings.record = true;
  auto recorder = std::make_shared<trace::recorder>(settings);
  trace::thread_binding bound{recorder};
  auto stream = recorder->register_track({"cpu:0 stream", "stream", "cpu:0"});
  auto layer_0 = recorder->register_track({"layer_0", "layer", "cpu:0", 0, 0, 0});
  auto layer_1 = recorder->register_track({"layer_1", "layer", "cpu:0", 0, 1, 1});
  auto job = test::event_of(trace::event_type::job, "forward", stream, layer_0, 1000);
  job.duration_ns = 4000;
  job.step = 1;
  job.microbatch = 2;
  trace::record(job);
  auto credits = test::event_of(trace::event_type::counter, "credits", layer_0, layer_1, 2000);
  credits.value = 1;
  trace::record(credits);
  auto marker = test::event_of(trace::event_type::marker, "step", 0, 0, 9000);
  marker.step = 1;
  trace::record(marker);
  { trace::handler_span span(layer_1, "forward", layer_0, 0, 1, 2, 0, 0, 512); }
  auto path = troupe::test::temp_file("troupe_recorder_roundtrip.json");
  recorder->freeze();
  recorder->write(path, R"({"stages": 2, "microbatches": 4,
                         "wires": [{"from": "layer_0", "to": "layer_1", "kind": "activations", "capacity": 1}]})");

  auto t = load_trace(path);
  CHECK(t.devices == std::vector<std::string>{"cpu:0", "host"});
  CHECK(t.stages == 2);
  REQUIRE(t.jobs.size() == 1);
  CHECK(t.jobs[0].actor == "layer_0");
  CHECK(t.jobs[0].device == "cpu:0");
  CHECK(t.jobs[0].track == "cpu:0 stream");
  CHECK(t.jobs[0].start_us == 1);
  CHECK(t.jobs[0].duration_us == 4);
  CHECK(t.jobs[0].microbatch == 2);
  REQUIRE(t.handlers.size() == 1);
  CHECK(t.handlers[0].from == "layer_0");
  CHECK(t.handlers[0].actor == "layer_1");
  CHECK(t.handlers[0].bytes == 512);
  CHECK(t.counters.count("credits layer_0 -> layer_1") == 1);
  REQUIRE(t.markers.size() == 1);
  CHECK(t.markers[0].name == "step 1");
  auto svg = render_timeline_svg(t, timeline_options{});
  CHECK(check_xml(svg, "svg") == "");
  CHECK(count_of(svg, "class=\"forward\"") == 1);
  CHECK(count_of(svg, "class=\"credit-wait\"") == 1);  // 1 of 1 credit in use from 2 us on
}

TEST_CASE("the timeline escapes every name a user chose, however long, in the SVG and the HTML") {
  auto t = gpipe();
  // Names arrive from the trace file: an actor, a schedule, a marker, a config path may hold
  // markup, quotes, an ampersand, a control character, and be longer than any buffer.
  const std::string hostile = "<script>alert(\"x\")</script> & 'q'\x01";
  const std::string long_tail(5000, 'y');
  for (auto& job : t.jobs)
    if (job.actor == "layer_1")
      job.actor = hostile + long_tail;
  t.schedule = "<1f1b>&";
  for (auto& m : t.markers)
    m.name = "step <" + m.name + ">";
  t.config = "runs/a&b<c>.toml";
  auto svg = render_timeline_svg(t, timeline_options{});
  CHECK(check_xml(svg, "svg") == "");
  CHECK(svg.find("<script>") == std::string::npos);
  CHECK(svg.find('\x01') == std::string::npos);
  CHECK(svg.find("&lt;1f1b&gt;&amp;") != std::string::npos);
  CHECK(svg.find("step &lt;") != std::string::npos);
  const std::string escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &apos;q&apos;"
                              "\xEF\xBF\xBD" + long_tail;
  // Every job of that actor in the window names it whole, in data-actor and in its title.
  auto window = choose_window(t, timeline_options{});
  std::size_t in_window = 0;
  for (const auto& job : t.jobs)
    if (job.actor == hostile + long_tail && job.end_us() > window.start_us &&
        job.start_us < window.end_us)
      ++in_window;
  CHECK(in_window >= 24);  // steps 1 to 3: 12 forward, 12 backward, and copies
  CHECK(count_of(svg, "data-actor=\"" + escaped + "\"") == in_window);
  CHECK(count_of(svg, "<title>forward by " + escaped + ", step ") == 12);
  auto html = render_timeline_html(t, timeline_options{});
  CHECK(html.find("(config runs/a&amp;b&lt;c&gt;.toml)") != std::string::npos);
}
