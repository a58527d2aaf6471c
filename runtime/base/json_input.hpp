// json_input.hpp: reading JSON that arrives from a file (a safetensors header, a checkpoint
// manifest, a trace), and describing its values in error messages.
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

#include "runtime/base/limits.hpp"  // quote_user_text, limits::max_json_nesting

namespace troupe {

/// The deepest nesting of arrays and objects parse_untrusted_json accepts. Our formats
/// need 4 levels; 64 leaves room for other writers' metadata and keeps recursion shallow.
constexpr int max_json_depth = limits::max_json_nesting;

/// The byte offset in [begin, end) where arrays and objects (outside strings) first nest
/// deeper than max_json_depth, or end - begin when they never do. Validates nothing else.
std::size_t json_too_deep_at(const char* begin, const char* end);

/// What a JSON value is, for "expected ..., found ..." messages: "the string 'x'",
/// "the number 1.5", "an array of 3 elements", "an object with 2 fields", "null".
std::string describe_json_value(const nlohmann::json& value);

/// " at byte N" for a JSON syntax error at nlohmann's 1-based byte N of [begin, end), with
/// the character there named when it is not printable ASCII: " at byte 17, U+00A0 (a
/// no-break space)".
std::string json_error_place(const char* begin, const char* end, std::size_t byte);

/// Parses [begin, end) as JSON. UTF-16 text is refused as such. Throws data_error("<what>: ...") when the text nests deeper
/// than max_json_depth, is not valid JSON (with the byte offset nlohmann reports) or has
/// an object with a repeated key. `what` names the file and the part, e.g.
/// "safetensors file 'x.safetensors': header".
nlohmann::json parse_untrusted_json(const char* begin, const char* end, const std::string& what);

}  // namespace troupe
