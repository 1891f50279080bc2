# Warnings for our own targets. Under clang (the sanitizer builds) also its
# thread-safety analysis: members marked SSDTRAIN_GUARDED_BY touched without
# their lock fail the build (exec/detail/annotated_mutex.h).
function(ssdtrain_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-error=deprecated-declarations>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:Clang>>:-Wthread-safety>)
endfunction()

# Precompiled headers (SSDTRAIN_PCH, on by default): the third-party headers
# most translation units parse, compiled once per target instead of once per
# file: the libraries and the CLI (nlohmann/json, CLI11), not the tests
# (ssdtrain_test). -DSSDTRAIN_PCH=OFF builds each file with its own includes only,
# e.g. to check that it includes what it uses.
# C++ files only (exec's CUDA kernels are compiled by nvcc without them).
function(ssdtrain_pch target)
  if(NOT SSDTRAIN_PCH)
    return()
  endif()
  set(headers)
  foreach(header IN LISTS ARGN)
    string(REPLACE ">" "$<ANGLE-R>" header "${header}")
    list(APPEND headers "$<$<COMPILE_LANGUAGE:CXX>:${header}>")
  endforeach()
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()

# ssdtrain_library(NAME SOURCES ... DEPS ...): a module library with alias ssdtrain::NAME.
function(ssdtrain_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  add_library(ssdtrain::${name} ALIAS ${name})
  # Installed as libssdtrain_<name>.a, exported as ssdtrain::<name>
  # (cmake/Install.cmake), with its headers under include/ssdtrain.
  set_target_properties(${name} PROPERTIES OUTPUT_NAME ssdtrain_${name} EXPORT_NAME ${name})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                            $<INSTALL_INTERFACE:include/ssdtrain>)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  ssdtrain_warnings(${name})
  ssdtrain_pch(${name} <nlohmann/json.hpp> <string> <vector> <map> <optional>)
endfunction()

# ssdtrain_test(NAME SOURCES ... DEPS ... [COST N]): one GoogleTest binary registered
# with ctest.
function(ssdtrain_test name)
  cmake_parse_arguments(ARG "" "COST" "SOURCES;DEPS" ${ARGN})
  if(NOT SSDTRAIN_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} ssdtrain::build_paths GTest::gtest
                        GTest::gtest_main)
  ssdtrain_warnings(${name})
  # The test files themselves at -O1 in a Release build: the code they test is
  # the libraries', compiled at -O3 as users get it; the tests' own code (gtest
  # macros, json of CLI outputs) compiles in two thirds of -O3's time.
  target_compile_options(${name} PRIVATE $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
  # No precompiled header here: with one, g++ 12 raises its known
  # -Warray-bounds and -Wstringop-overflow false positives on libstdc++'s string
  # concatenation (char_traits::copy inlined into operator+) in 18 test files
  # that compile clean without it.
  # A module's own tests (traces/, models/, sim/, exec/, analysis/, fuzz/) are its
  # unit tests: label `unit` (a directory label: gtest_discover_tests would split
  # a list of test labels), and the target unit_tests builds them all
  # (scripts/test.sh --quick). tests/ holds the cross-module and end-to-end ones.
  if(NOT CMAKE_CURRENT_SOURCE_DIR STREQUAL "${PROJECT_SOURCE_DIR}/tests")
    set_property(DIRECTORY PROPERTY LABELS unit)
    set_property(GLOBAL APPEND PROPERTY SSDTRAIN_UNIT_TEST_TARGETS ${name})
  endif()
  include(GoogleTest)
  # Each test carries its binary's name as a label (ctest -L exec_ runs the executor's).
  # COST N: ctest starts the costlier tests first (a clean clone has no timing
  # data of its own), so that a long test does not run alone at the end.
  if(NOT ARG_COST)
    set(ARG_COST 0)
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS ${name} COST ${ARG_COST})
endfunction()

# unit_tests: every module's test programs (above), without the end-to-end ones.
# Called once, after every module's tests are declared.
function(ssdtrain_unit_tests_target)
  get_property(targets GLOBAL PROPERTY SSDTRAIN_UNIT_TEST_TARGETS)
  if(targets)
    add_custom_target(unit_tests DEPENDS ${targets})
  endif()
endfunction()

# ssdtrain_benchmark(NAME SOURCES ... DEPS ...): a Google Benchmark program (not a test).
function(ssdtrain_benchmark name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} ssdtrain::build_paths benchmark::benchmark)
  ssdtrain_warnings(${name})
endfunction()
