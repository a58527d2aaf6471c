// not_a_plugin.cpp: a shared library that is not a troupe plugin (no TROUPE_PLUGIN), for
// load_plugin's "is not a troupe plugin" error.
extern "C" int troupe_test_not_a_plugin_answer() {
  return 42;
}
