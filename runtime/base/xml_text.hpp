// xml_text.hpp: user text (actor, device, run and file names) made safe inside SVG and HTML.
//
// The pictures troupe writes (trace timelines, training curves) carry names users chose;
// none of them may break or inject markup.
#pragma once

#include <string>

namespace troupe {

/// `text` as XML character data or an attribute value: the five special characters as
/// entities, and the control characters XML 1.0 cannot carry at all (not even as
/// references) as U+FFFD.
std::string xml_text(const std::string& text);

}  // namespace troupe
