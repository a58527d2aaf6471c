// toml_limits.hpp: the checks a config's text passes before toml++ parses it.
//
// toml++ builds one nested table per part of a dotted key (`a.b.c = 1`) and one level per
// array or inline table, and it recurses over them (parsing, destroying, printing): a key
// of a million parts overflows the stack inside the library. So the raw text is scanned
// first (a small lexer that skips strings and comments) and refused, at the line and
// column where it passes a limit, when a dotted key or table header has more than
// limits::max_toml_key_parts parts or arrays and inline tables nest deeper than
// limits::max_toml_nesting (Note [input limits] in runtime/base/limits.hpp).
//
// And it refuses what toml++ does not check itself (the config fuzzer found each): raw
// control characters (Note [control characters in TOML] in the .cpp), a table header
// that does not start with a name (Note [table headers and toml++]) and non-ASCII
// characters outside strings and comments (Note [non-ASCII outside strings]). It
// validates nothing else: text that is not TOML passes, and toml++ then says why.
#pragma once

#include <string>
#include <string_view>

namespace troupe {

/// Throws config_error("file:line:col: ...") when `text` has a dotted key or table header
/// of more than limits::max_toml_key_parts parts, or arrays and inline tables nested more
/// than limits::max_toml_nesting deep, a control character other than tab, CR and LF, or a
/// table header whose name does not start with a bare key character or a quote, or a
/// non-ASCII character outside a string or a comment.
/// `file` names the config in the error.
void check_toml_limits(std::string_view text, const std::string& file);

}  // namespace troupe
