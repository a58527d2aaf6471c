// The doctest main for troupe_tests; each suite lives in tests/<tree>/<name>_test.cpp.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
