# The I/O half of ssdtrain::exec: I/O backends, the offload engine, bench-io.
list(APPEND SSDTRAIN_EXEC_IO_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/io_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/uring_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/posix_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/fault_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/checksum.cc
  ${CMAKE_CURRENT_LIST_DIR}/offload_engine.cc
  ${CMAKE_CURRENT_LIST_DIR}/offload_dir.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_jobs.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_file_table.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_io_loop.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_bandwidth_cap.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_failure.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_sweep.cc
  ${CMAKE_CURRENT_LIST_DIR}/staging_lease.cc
  ${CMAKE_CURRENT_LIST_DIR}/file_names.cc
  ${CMAKE_CURRENT_LIST_DIR}/detail/cleanup_registry.cc
  ${CMAKE_CURRENT_LIST_DIR}/detail/staging_pool.cc
  ${CMAKE_CURRENT_LIST_DIR}/detail/test_points.cc
  ${CMAKE_CURRENT_LIST_DIR}/bench_io.cc
  ${CMAKE_CURRENT_LIST_DIR}/cufile.cc
  ${CMAKE_CURRENT_LIST_DIR}/cufile_backend.cc
)

function(ssdtrain_exec_tests)
  # The cuFile loader against stand-in libraries (no cuFile on this machine).
  if(SSDTRAIN_BUILD_TESTS)
    foreach(variant ok no_write old driver_error write_error)
      add_library(fake_cufile_${variant} SHARED
        ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/fake_cufile.cc)
      set_target_properties(fake_cufile_${variant} PROPERTIES
        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake_cufile)
      target_include_directories(fake_cufile_${variant} PRIVATE ${PROJECT_SOURCE_DIR})
    endforeach()
    target_compile_definitions(fake_cufile_ok PRIVATE FAKE_CUFILE_VERSION=1130)
    target_compile_definitions(fake_cufile_no_write PRIVATE FAKE_CUFILE_VERSION=1130
      FAKE_CUFILE_NO_WRITE)
    target_compile_definitions(fake_cufile_old PRIVATE FAKE_CUFILE_VERSION=900)
    target_compile_definitions(fake_cufile_driver_error PRIVATE FAKE_CUFILE_VERSION=1130
      FAKE_CUFILE_DRIVER_ERROR)
    target_compile_definitions(fake_cufile_write_error PRIVATE FAKE_CUFILE_VERSION=1130
      FAKE_CUFILE_WRITE_ERROR)
    ssdtrain_test(exec_cufile_test
      SOURCES ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/cufile_test.cc
              ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_test_util.cc
      DEPS ssdtrain::exec)
    target_compile_definitions(exec_cufile_test PRIVATE
      SSDTRAIN_FAKE_CUFILE_DIR="${CMAKE_CURRENT_BINARY_DIR}/fake_cufile")
    add_dependencies(exec_cufile_test fake_cufile_ok fake_cufile_no_write fake_cufile_old
      fake_cufile_driver_error fake_cufile_write_error)
  endif()
  ssdtrain_test(exec_io_checksum_test
    SOURCES ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_checksum_test.cc
    DEPS ssdtrain::exec)
  ssdtrain_test(exec_io_backend_test
    SOURCES ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_backend_test.cc
            ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_test_util.cc
    DEPS ssdtrain::exec)
  ssdtrain_test(exec_io_engine_test
    SOURCES ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_engine_test.cc
            ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_stripe_test.cc
            ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_test_util.cc
    DEPS ssdtrain::exec)
  ssdtrain_test(exec_io_fault_test
    SOURCES ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_fault_test.cc
            ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_unwind_test.cc
            ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_cleanup_test.cc
            ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_test_util.cc
    DEPS ssdtrain::exec)
  ssdtrain_test(exec_io_stress_test
    SOURCES ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_stress_test.cc
            ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_test_util.cc
    DEPS ssdtrain::exec)
  ssdtrain_test(exec_io_fault_matrix_test
    SOURCES ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_fault_matrix_test.cc
            ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_signal_matrix_test.cc
            ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/io_test_util.cc
    DEPS ssdtrain::exec)
  # Under clang: the thread-safety analysis the build runs with (Helpers.cmake)
  # does reject an unguarded access and a helper called without its lock.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND SSDTRAIN_BUILD_TESTS)
    add_test(NAME exec_thread_safety_analysis_rejects_unlocked_access
      COMMAND ${CMAKE_CXX_COMPILER} -std=c++20 -fsyntax-only -Wthread-safety -Werror
              -I${PROJECT_SOURCE_DIR}
              ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests/thread_safety_violation.cc)
    set_tests_properties(exec_thread_safety_analysis_rejects_unlocked_access PROPERTIES
      LABELS exec_thread_safety
      PASS_REGULAR_EXPRESSION
      "writing variable 'count_' requires holding mutex 'mu_'.*calling function 'BumpLocked' requires holding mutex 'mu_'")
  endif()
endfunction()
