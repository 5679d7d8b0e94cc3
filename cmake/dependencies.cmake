# Third-party libraries, all from Debian 12 packages (see README.md / .ci/run):
#   nlohmann-json3-dev, libcli11-dev, libfmt-dev, libpcre2-dev, libgtest-dev, OpenMP (gcc),
#   libboost-dev (Boost.Asio and Beast, header-only: the server), libcpp-httplib-dev (the
#   HTTP client of the server tests), libeigen3-dev (the quantizers' linear algebra).
find_package(nlohmann_json 3.10 REQUIRED)
find_package(fmt REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)
# Header-only; Cholesky factorisations and matrix products for GPTQ/AWQ (src/quant), where a
# library's blocked, vectorised code beats a hand-written loop.
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_package(Boost 1.74 REQUIRED)
# Debian builds cpp-httplib as a shared library with OpenSSL/zlib/brotli on; its .pc file
# carries the matching CPPHTTPLIB_*_SUPPORT defines, which change class layouts, so use them.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

# CLI11 is header-only; Debian ships a CMake config for it.
find_package(CLI11 CONFIG QUIET)
if(NOT TARGET CLI11::CLI11)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
endif()

if(TF_TESTS)
  find_package(GTest REQUIRED)
endif()
