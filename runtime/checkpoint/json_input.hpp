// json_input.hpp: reading JSON that arrives from a file (a safetensors header, a checkpoint
// manifest), and quoting the file's text in error messages. Internal to runtime/checkpoint.
//
// Before nlohmann sees the text, its nesting depth is measured on the raw bytes: a header of
// 100000 '[' must be refused, not handed to code that recurses per level (nlohmann's
// destructor and dump). Duplicate keys in an object are refused too (nlohmann would keep the
// last one without a word). What the JSON must contain is not checked here: safetensors.cpp
// and manifest.cpp check their own schemas and name the field.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace troupe {

/// The deepest nesting of arrays and objects parse_untrusted_json accepts. Our formats
/// need 3 levels; 64 leaves room for other writers' metadata and keeps recursion shallow.
constexpr int max_json_depth = 64;

/// `text` for an error message: in single quotes, control characters as \xNN, cut to
/// `limit` bytes (at a UTF-8 character boundary) with "..." and the full length noted.
std::string quote_user_text(const std::string& text, std::size_t limit = 80);

/// What a JSON value is, for "expected ..., found ..." messages: "the string 'x'",
/// "the number 1.5", "an array of 3 elements", "an object with 2 fields", "null".
std::string describe_json_value(const nlohmann::json& value);

/// Parses [begin, end) as JSON. Throws data_error("<what>: ...") when the text nests deeper
/// than max_json_depth, is not valid JSON (with the byte offset nlohmann reports) or has
/// an object with a repeated key. `what` names the file and the part, e.g.
/// "safetensors file 'x.safetensors': header".
nlohmann::json parse_untrusted_json(const char* begin, const char* end, const std::string& what);

}  // namespace troupe
