// plugin.cpp: marks this library as a troupe plugin named "custom_layers".
//
// Exactly once per plugin: it exports the name (shown by `troupe layers` and used in error
// messages) and the TROUPE_ABI_VERSION this plugin was compiled against, which the loader
// compares with its own before trusting anything else in the library. What the plugin adds
// registers itself where it is defined (swish.cpp, grad_clipper.cpp).
#include "troupe/plugin.hpp"

TROUPE_PLUGIN("custom_layers");
