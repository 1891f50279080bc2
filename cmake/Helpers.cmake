# Warnings for our own targets. Under clang (the sanitizer builds) also its
# thread-safety analysis: members marked SSDTRAIN_GUARDED_BY touched without
# their lock fail the build (exec/detail/annotated_mutex.h).
function(ssdtrain_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-error=deprecated-declarations>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:Clang>>:-Wthread-safety>)
endfunction()

# ssdtrain_library(NAME SOURCES ... DEPS ...): a module library with alias ssdtrain::NAME.
function(ssdtrain_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  add_library(ssdtrain::${name} ALIAS ${name})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  ssdtrain_warnings(${name})
endfunction()

# ssdtrain_test(NAME SOURCES ... DEPS ...): one GoogleTest binary registered with ctest.
function(ssdtrain_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT SSDTRAIN_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    SSDTRAIN_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    SSDTRAIN_BINARY_DIR="${PROJECT_BINARY_DIR}")
  ssdtrain_warnings(${name})
  include(GoogleTest)
  # Each test carries its binary's name as a label (ctest -L exec_ runs the executor's).
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${name};${ARG_LABELS}")
endfunction()

# ssdtrain_benchmark(NAME SOURCES ... DEPS ...): a Google Benchmark program (not a test).
function(ssdtrain_benchmark name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
  target_compile_definitions(${name} PRIVATE SSDTRAIN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  ssdtrain_warnings(${name})
endfunction()
