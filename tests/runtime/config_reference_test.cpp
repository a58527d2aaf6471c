// config_reference_test.cpp: docs/reference/config.md documents every key the config
// parser accepts, and no key it refuses.
//
// The accepted keys come from the parser itself, never from a list written here. A section
// refuses an unknown key far from every valid one with the list of its keys (Note [keys as
// read] in runtime/config/config.cpp: "valid keys: epochs, steps, ..."); so do [[actor]] and
// [[wire]] tables (topology_from_explicit, "valid keys: 'name', 'kind', ...") and a layer's
// settings (create_layer, "(valid: bias, init, out)"). Each section is probed once for every
// value of the choices that could make it read other keys (the data source, the optimizer
// and schedule types, averaging, the pipeline schedule, tls; every actor kind), and the lists
// are merged: a key read only for one of them is still found. The documented keys are the
// first cells (`key`) of the tables under the page's heading for that section: `[run]`,
// `[[actor]]`, and one `### \`type\`` heading per built-in layer type (the types are those
// registered in actors/layers/*.cpp; test layers registered by other test files are not
// users' and are left out).
//
// Not covered: the keys of [[model.layers]] itself (type, name, inputs), which the reader
// takes out of a layer's table before the layer sees it and lists nowhere; the test checks
// only that each documented one is taken out (not handed to the layer as a setting).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/config/choices.hpp"
#include "runtime/config/config.hpp"
#include "runtime/graph/kinds.hpp"
#include "runtime/graph/topology.hpp"
#include "runtime/model/layer.hpp"
#include "troupe/error.hpp"
#include "troupe/layer.hpp"

namespace {

namespace fs = std::filesystem;
using key_set = std::set<std::string>;

// A key no section has, and far from every key (no did-you-mean, so the full list comes).
const std::string unknown_key = "qqqqqqqqqqqqqqqqqqqqqqqq";
const std::int64_t input_features = 784;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in, "cannot read " << path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string join(const key_set& keys) {
  std::string out;
  for (const auto& key : keys)
    out += (out.empty() ? "" : ", ") + key;
  return out;
}

// ---- what the page documents ----

/// The page's headings (without '#', spaces and backticks) and, under each, the keys in the
/// first column of its tables, up to the next heading.
std::map<std::string, key_set> documented_keys() {
  const auto text = read_text(fs::path{TROUPE_SOURCE_DIR} / "docs/reference/config.md");
  std::map<std::string, key_set> out;
  std::istringstream lines{text};
  std::string line;
  std::string heading;
  bool in_code = false;
  while (std::getline(lines, line)) {
    if (line.rfind("```", 0) == 0)
      in_code = !in_code;
    if (in_code)
      continue;
    if (line.rfind("#", 0) == 0 && line.find_first_not_of('#') != std::string::npos) {
      heading.clear();
      for (char c : line.substr(line.find_first_not_of('#')))
        if (c != '`')
          heading += c;
      heading.erase(0, heading.find_first_not_of(' '));
      out[heading];
      continue;
    }
    if (!heading.empty() && line.rfind("| `", 0) == 0) {
      const auto end = line.find('`', 3);
      REQUIRE_MESSAGE(end != std::string::npos, "a table row without its closing '`': " << line);
      out[heading].insert(line.substr(3, end - 3));
    }
  }
  return out;
}

// ---- what the parser accepts ----

/// The names listed after `marker` in `message`, up to its end or a closing parenthesis:
/// "a, b" or "'a', 'b'".
key_set listed_after(const std::string& message, const std::string& marker) {
  const auto at = message.find(marker);
  REQUIRE_MESSAGE(at != std::string::npos, "no '" << marker << "' in: " << message);
  auto list = message.substr(at + marker.size());
  const auto close = list.find(')');
  if (close != std::string::npos)
    list.erase(close);
  key_set keys;
  std::istringstream parts{list};
  std::string part;
  while (std::getline(parts, part, ',')) {
    part.erase(0, part.find_first_not_of(" '"));
    part.erase(part.find_last_not_of(" '") + 1);
    if (!part.empty())
      keys.insert(part);
  }
  return keys;
}

/// A config as tables of "key = TOML value" lines.
using config_tables = std::map<std::string, std::map<std::string, std::string>>;

std::string render(const config_tables& tables) {
  std::string text;
  for (const auto& [table, keys] : tables) {
    text += "[" + table + "]\n";
    for (const auto& [key, value] : keys)
      text += key + " = " + value + "\n";
  }
  return text;
}

/// The keys section `section` accepts with the other keys `settings` set: read from the
/// error its unknown key gets.
key_set section_keys(const std::string& section, const std::map<std::string, std::string>& settings) {
  config_tables tables;
  tables["data"]["source"] = "\"synthetic\"";  // no data files needed
  for (const auto& [key, value] : settings)
    tables[section][key] = value;
  tables[section][unknown_key] = "1";
  // A layer, since [model] needs one before the sections read after it.
  const auto text = render(tables) + "[[model.layers]]\ntype = \"relu\"\n";
  INFO("config:\n" << text);
  try {
    troupe::parse_config(text, "probe.toml");
  } catch (const troupe::config_error& error) {
    const std::string message = error.what();
    INFO("message: " << message);
    REQUIRE(message.find("unknown key '" + unknown_key + "' in [" + section + "]") !=
            std::string::npos);
    return listed_after(message, "valid keys: ");
  }
  FAIL("[" << section << "] accepted the key " << unknown_key);
  return {};
}

/// One probe a value of each choice that could make a section read other keys.
template <class Enum>
std::vector<std::map<std::string, std::string>> each_of(const std::string& key) {
  std::vector<std::map<std::string, std::string>> variants;
  for (const auto& name : troupe::enum_names<Enum>())
    variants.push_back({{key, "\"" + name + "\""}});
  return variants;
}

/// Section name -> the keys it accepts, merged over its probes.
std::map<std::string, key_set> accepted_section_keys() {
  // An existing file, for the paths tls = true needs to exist.
  const auto file = "\"" + (fs::path{TROUPE_SOURCE_DIR} / "CMakeLists.txt").string() + "\"";
  using variants = std::vector<std::map<std::string, std::string>>;
  const variants once(1);  // one probe, nothing else set
  variants tls_either_way;
  tls_either_way.push_back({{"tls", "false"}});
  tls_either_way.push_back({{"tls", "true"}, {"certificate", file}, {"key", file}, {"ca_file", file}});
  const std::map<std::string, variants> probes = {
      {"run", once},
      {"data", each_of<troupe::data_source>("source")},
      {"model", once},
      {"optimizer", each_of<troupe::optimizer_type>("type")},
      {"optimizer.schedule", each_of<troupe::lr_schedule_type>("type")},
      {"parallel", [] {
         auto list = each_of<troupe::averaging_method>("averaging");
         for (const auto& v : each_of<troupe::pipeline_schedule>("schedule"))
           list.push_back(v);
         return list;
       }()},
      {"cluster", tls_either_way},
  };
  std::map<std::string, key_set> out;
  for (const auto& [section, settings_list] : probes)
    for (const auto& settings : settings_list) {
      auto keys = section_keys(section, settings);
      out[section].insert(keys.begin(), keys.end());
    }
  return out;
}

/// The error topology_from_explicit gives an explicit config, or "" if it reads.
std::string explicit_error(const std::string& text) {
  INFO("config:\n" << text);
  auto config = troupe::parse_config(text, "probe.toml");
  try {
    troupe::topology_from_explicit(config, input_features);
  } catch (const troupe::config_error& error) {
    return error.what();
  }
  return {};
}

const std::string synthetic_run = "[data]\nsource = \"synthetic\"\n";

std::string actor_table(const std::map<std::string, std::string>& keys) {
  std::string text = "[[actor]]\n";
  for (const auto& [key, value] : keys)
    text += key + " = " + value + "\n";
  return text;
}

const std::string plain_wire = "[[wire]]\nfrom = \"probe\"\nto = \"probe\"\nkind = \"grads\"\n";

/// The keys an [[actor]] table accepts, over every built-in kind. A built-in kind other
/// than layer lists them when refusing an unknown key; a layer actor hands unknown keys to
/// its layer as settings, so its own keys are those it says are missing ("missing key
/// 'type' (e.g. type = \"linear\")"), added one at a time.
key_set accepted_actor_keys() {
  key_set keys;
  for (const auto& kind : troupe::enum_names<troupe::actor_kind>()) {
    INFO("actor kind " << kind);
    std::map<std::string, std::string> table = {
        {"name", "\"probe\""}, {"kind", "\"" + kind + "\""}, {"device", "\"cpu:0\""}};
    if (kind != troupe::to_string(troupe::actor_kind::layer)) {
      table[unknown_key] = "1";
      const auto message = explicit_error(synthetic_run + actor_table(table) + plain_wire);
      INFO("message: " << message);
      REQUIRE(message.find("unknown key '" + unknown_key + "'") != std::string::npos);
      const auto listed = listed_after(message, "valid keys: ");
      keys.insert(listed.begin(), listed.end());
      continue;
    }
    for (const auto& [key, value] : table)
      keys.insert(key);
    for (int round = 0; round < 16; ++round) {
      const auto message = explicit_error(synthetic_run + actor_table(table) + plain_wire);
      const std::string missing = "missing key '";
      const auto at = message.find(missing);
      if (at == std::string::npos)
        break;  // read as far as its own keys go
      const auto start = at + missing.size();
      const auto key = message.substr(start, message.find('\'', start) - start);
      // The example the message gives, as a TOML value ("(e.g. type = \"linear\")"), else 0.
      const std::string example = "(e.g. " + key + " = ";
      const auto example_at = message.find(example);
      auto value = std::string{"0"};
      if (example_at != std::string::npos) {
        const auto from = example_at + example.size();
        value = message.substr(from, message.rfind(')') - from);
      }
      REQUIRE_MESSAGE(table.count(key) == 0, "asked for '" << key << "' twice: " << message);
      table[key] = value;
      keys.insert(key);
    }
  }
  return keys;
}

key_set accepted_wire_keys() {
  const auto actor = actor_table({{"name", "\"probe\""},
                                  {"kind", "\"" + std::string{troupe::to_string(
                                                      troupe::actor_kind::data_loader)} +
                                               "\""},
                                  {"device", "\"cpu:0\""}});
  const auto message = explicit_error(synthetic_run + actor + plain_wire + unknown_key + " = 1\n");
  INFO("message: " << message);
  REQUIRE(message.find("unknown key '" + unknown_key + "'") != std::string::npos);
  return listed_after(message, "valid keys: ");
}

/// The built-in layer types: those registered in actors/layers/.
std::vector<std::string> built_in_layer_types() {
  const std::regex registration{R"re(TROUPE_REGISTER_LAYER\(\s*"([^"]+)")re"};
  std::vector<std::string> types;
  for (const auto& entry : fs::directory_iterator(fs::path{TROUPE_SOURCE_DIR} / "actors/layers")) {
    if (entry.path().extension() != ".cpp")
      continue;
    const auto text = read_text(entry.path());
    for (auto it = std::sregex_iterator(text.begin(), text.end(), registration);
         it != std::sregex_iterator(); ++it)
      types.push_back((*it)[1]);
  }
  std::sort(types.begin(), types.end());
  return types;
}

/// What a layer said about its settings: the ones it reads, or another error.
struct layer_probe {
  bool listed = false;
  key_set keys;         // when listed: the settings it reads
  std::string message;  // else: its error
};

/// The settings layer `type` reads with `settings` given: from the error its unknown
/// setting gets, after adding (as 1) each required setting it asks for.
layer_probe probe_layer(const std::string& type, troupe::setting_map settings) {
  const troupe::source_position where{"probe.toml", 1, 1};
  settings[unknown_key] = troupe::setting_value{std::int64_t{1}, where};
  const std::vector<std::pair<std::string, troupe::setting_value>> required = {
      {"needs the integer setting '", troupe::setting_value{std::int64_t{1}, where}},
      {"needs the number setting '", troupe::setting_value{1.0, where}}};
  for (int round = 0; round < 16; ++round) {
    troupe::layer_config config;
    config.type = type;
    config.settings = settings;
    config.where = where;
    config.type_where = where;
    std::string message;
    try {
      troupe::create_layer(config);
      return {false, {}, "accepted the setting " + unknown_key};
    } catch (const troupe::config_error& error) {
      message = error.what();
    }
    bool added = false;
    for (const auto& [needs, value] : required) {
      const auto at = message.find(needs);
      if (at == std::string::npos)
        continue;
      const auto start = at + needs.size();
      const auto key = message.substr(start, message.find('\'', start) - start);
      if (settings.count(key))
        return {false, {}, "asked for '" + key + "' twice: " + message};
      settings[key] = value;
      added = true;
    }
    if (added)
      continue;
    if (message.find("unknown setting '") == std::string::npos)
      return {false, {}, message};
    if (message.find("takes no settings") != std::string::npos)
      return {true, {}, message};
    return {true, listed_after(message, "(valid: "), message};
  }
  return {false, {}, "kept asking for settings"};
}

/// The settings layer `type` reads with none given but those it requires.
key_set layer_settings_read(const std::string& type) {
  const auto probe = probe_layer(type, {});
  INFO("layer " << type << ": " << probe.message);
  REQUIRE(probe.listed);
  return probe.keys;
}

/// The settings layer `type` reads with `key` given too: as an integer, or, when the layer
/// expects another type for it, as a boolean.
key_set layer_settings_read_with(const std::string& type, const std::string& key) {
  const troupe::source_position where{"probe.toml", 1, 1};
  std::string messages;
  for (const auto& value : {troupe::setting_value{std::int64_t{1}, where},
                            troupe::setting_value{true, where}}) {
    const auto probe = probe_layer(type, {{key, value}});
    if (probe.listed)
      return probe.keys;
    messages += probe.message + "\n";
  }
  INFO("layer " << type << " with setting " << key << ":\n" << messages);
  FAIL("the layer reads no setting '" << key << "' with it given as an integer or a boolean");
  return {};
}

}  // namespace

TEST_CASE("the config reference documents every key the parser accepts, and none it refuses") {
  const auto documented = documented_keys();
  auto check = [&](const std::string& heading, const key_set& accepted) {
    INFO("docs/reference/config.md, the table under the heading '" << heading << "'");
    INFO("the parser accepts: " << join(accepted));
    REQUIRE_MESSAGE(documented.count(heading), "no heading '" << heading << "'");
    const auto& listed = documented.at(heading);
    for (const auto& key : accepted)
      CHECK_MESSAGE(listed.count(key), "accepted but not documented: " << key);
    for (const auto& key : listed)
      CHECK_MESSAGE(accepted.count(key), "documented but refused: " << key);
  };

  // The fixed sections.
  const auto sections = accepted_section_keys();
  for (const auto& [section, keys] : sections)
    check("[" + section + "]", keys);

  // An explicit config's tables.
  check("[[actor]]", accepted_actor_keys());
  check("[[wire]]", accepted_wire_keys());

  // Each built-in layer type's settings, with the settings the page documents for it given
  // too: a setting read only when another is given (unflatten's positions and features)
  // counts as accepted once the page names it and the layer then reads it.
  const auto types = built_in_layer_types();
  REQUIRE(types.size() >= 10);
  for (const auto& type : types) {
    INFO("layer type " << type);
    auto accepted = layer_settings_read(type);
    const auto heading = documented.find(type);
    REQUIRE_MESSAGE(heading != documented.end(),
                    "no heading '### `" << type << "`' for the built-in layer " << type);
    for (const auto& key : heading->second)
      if (!accepted.count(key)) {
        const auto more = layer_settings_read_with(type, key);
        accepted.insert(more.begin(), more.end());
      }
    check(type, accepted);
  }

  // [[model.layers]]'s own keys: each documented one is taken out of the table before the
  // layer sees its settings (an undocumented one cannot be found this way; see the top).
  // `precision` stays among the settings, so that `troupe plan --eject` writes it into the
  // layer's [[actor]] table, and create_layer takes it out instead.
  REQUIRE(documented.count("[[model.layers]]"));
  for (const auto& key : documented.at("[[model.layers]]")) {
    INFO("[[model.layers]] key " << key);
    std::map<std::string, std::string> values = {
        {"type", "\"relu\""}, {"name", "\"probed\""}, {"inputs", "[\"first\"]"},
        {"precision", "\"fp32\""}};
    REQUIRE_MESSAGE(values.count(key), "documented but not probed here: " << key);
    std::string text = synthetic_run + "[[model.layers]]\nname = \"first\"\ntype = \"relu\"\n" +
                       "[[model.layers]]\n" + key + " = " + values[key] + "\n";
    if (key != "type")
      text += "type = \"relu\"\n";
    INFO("config:\n" << text);
    const auto config = troupe::parse_config(text, "probe.toml");
    REQUIRE(config.model.layers.size() == 2);
    if (key == "precision")
      CHECK_NOTHROW(troupe::create_layer(config.model.layers[1]));
    else
      CHECK(config.model.layers[1].settings.count(key) == 0);
  }
}
