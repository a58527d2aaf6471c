# FindCAF: locate the C++ Actor Framework 0.17 (Debian's libcaf-dev ships no CMake config).
# Defines CAF_FOUND, CAF_VERSION and the imported targets CAF::core, CAF::io and CAF::openssl
# (TLS between nodes; Debian's libcaf-openssl0.17, its headers in libcaf-dev).
find_path(CAF_INCLUDE_DIR caf/config.hpp)
find_library(CAF_CORE_LIBRARY caf_core)
find_library(CAF_IO_LIBRARY caf_io)
find_library(CAF_OPENSSL_LIBRARY caf_openssl)

if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE "^#define CAF_VERSION ([0-9]+).*" "\\1" _caf_version_int "${_caf_version_line}")
  if(_caf_version_int)
    math(EXPR _caf_major "${_caf_version_int} / 10000")
    math(EXPR _caf_minor "(${_caf_version_int} / 100) % 100")
    math(EXPR _caf_patch "${_caf_version_int} % 100")
    set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
  endif()
endif()

set(CAF_core_FOUND FALSE)
set(CAF_io_FOUND FALSE)
set(CAF_openssl_FOUND FALSE)
if(CAF_CORE_LIBRARY)
  set(CAF_core_FOUND TRUE)
endif()
if(CAF_IO_LIBRARY)
  set(CAF_io_FOUND TRUE)
endif()
if(CAF_OPENSSL_LIBRARY AND CAF_IO_LIBRARY)
  set(CAF_openssl_FOUND TRUE)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR CAF_CORE_LIBRARY
  VERSION_VAR CAF_VERSION
  HANDLE_COMPONENTS
  REASON_FAILURE_MESSAGE "install Debian's libcaf-dev (scripts/install-deps.sh does)")

if(CAF_FOUND)
  find_package(Threads REQUIRED)
  if(NOT TARGET CAF::core)
    add_library(CAF::core UNKNOWN IMPORTED)
    set_target_properties(CAF::core PROPERTIES
      IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES Threads::Threads)
  endif()
  if(CAF_IO_LIBRARY AND NOT TARGET CAF::io)
    add_library(CAF::io UNKNOWN IMPORTED)
    set_target_properties(CAF::io PROPERTIES
      IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
      INTERFACE_LINK_LIBRARIES CAF::core)
  endif()
  if(CAF_openssl_FOUND AND NOT TARGET CAF::openssl)
    add_library(CAF::openssl UNKNOWN IMPORTED)
    set_target_properties(CAF::openssl PROPERTIES
      IMPORTED_LOCATION "${CAF_OPENSSL_LIBRARY}"
      INTERFACE_LINK_LIBRARIES CAF::io)
  endif()
endif()
mark_as_advanced(CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_OPENSSL_LIBRARY)
