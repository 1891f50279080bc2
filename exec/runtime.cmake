# The runtime half of ssdtrain::exec: device backends, tensor cache, replay.
# Included by exec/CMakeLists.txt, which builds one library from these lists.
list(APPEND SSDTRAIN_EXEC_RUNTIME_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/detail/stream_worker.cc
  ${CMAKE_CURRENT_LIST_DIR}/detail/cpu_affinity.cc
  ${CMAKE_CURRENT_LIST_DIR}/detail/file_limit.cc
  ${CMAKE_CURRENT_LIST_DIR}/detail/host_staging.cc
  ${CMAKE_CURRENT_LIST_DIR}/device.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu_device.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/tensor_cache.cc
  ${CMAKE_CURRENT_LIST_DIR}/rank_place.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay_setup.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay_beside.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay_issue.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay_recompute.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay_memory.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay_io_threads.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay_timeline.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay_gradients.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay_pipeline.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay_ring.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay_tensor_parallel.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay_expert_parallel.cc
  ${CMAKE_CURRENT_LIST_DIR}/host_sum.cc
  ${CMAKE_CURRENT_LIST_DIR}/replay_output.cc
)
# Sanitizer builds compile at -O1 (scripts/sanitize.sh), where Eigen's GEMM
# kernels, which rely on inlining, crawl: `ssdtrain calibrate` timed GEMMs for
# over 6 minutes under ASan. The CPU backend's files keep their instrumentation
# and get -O2 (it comes after -O1 on the command line, so it wins).
if(NOT SSDTRAIN_SANITIZE STREQUAL "OFF")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/cpu_device.cc
    ${CMAKE_CURRENT_LIST_DIR}/cpu_ops.cc PROPERTIES COMPILE_OPTIONS -O2)
endif()
if(NOT SSDTRAIN_HAVE_CUDA)
  list(APPEND SSDTRAIN_EXEC_RUNTIME_SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_unavailable.cc)
endif()
list(APPEND SSDTRAIN_EXEC_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/cuda_device.cc
  ${CMAKE_CURRENT_LIST_DIR}/cublas_api.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_streams.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_kernels.cu
)

function(ssdtrain_exec_runtime_tests)
  set(dir ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tests)
  ssdtrain_test(exec_device_test
    SOURCES ${dir}/device_conformance_test.cc
    DEPS ssdtrain::exec)
  # The CUDA backend's host-side arithmetic (event clock, per-stream words,
  # GEMM workspace): header-only, built and run in every build.
  ssdtrain_test(exec_cuda_host_logic_test
    SOURCES ${dir}/cuda_host_logic_test.cc
    DEPS ssdtrain::exec)
  if(SSDTRAIN_HAVE_CUDA)
    # cuBLAS loaded at run time (exec/detail/cublas_api.h): no GPU needed.
    ssdtrain_test(exec_cublas_loader_test
      SOURCES ${dir}/cublas_loader_test.cc
      DEPS ssdtrain::exec)
  endif()
  ssdtrain_test(exec_cpu_affinity_test
    SOURCES ${dir}/cpu_affinity_test.cc
    DEPS ssdtrain::exec)
  ssdtrain_test(exec_host_sum_test
    SOURCES ${dir}/host_sum_test.cc
    DEPS ssdtrain::exec)
  ssdtrain_test(exec_tensor_cache_test
    SOURCES ${dir}/tensor_cache_test.cc
    DEPS ssdtrain::exec)
  ssdtrain_test(exec_replay_test
    SOURCES ${dir}/replay_test.cc ${dir}/replay_faults_test.cc ${dir}/replay_set_to_none_test.cc
            ${dir}/replay_test_util.cc ${dir}/io_test_util.cc
    DEPS ssdtrain::exec ssdtrain::models)
  ssdtrain_test(exec_calibrate_test
    SOURCES ${dir}/calibrate_test.cc ${dir}/replay_test_util.cc
    DEPS ssdtrain::exec ssdtrain::models)
  ssdtrain_test(exec_replay_ranks_test
    SOURCES ${dir}/replay_ranks_test.cc ${dir}/replay_streams_test.cc ${dir}/replay_test_util.cc
            ${dir}/io_test_util.cc
    DEPS ssdtrain::exec ssdtrain::models)
  ssdtrain_test(exec_replay_tp_ranks_test
    SOURCES ${dir}/replay_tp_ranks_test.cc ${dir}/replay_zero_cp_ranks_test.cc
            ${dir}/replay_test_util.cc ${dir}/io_test_util.cc
    DEPS ssdtrain::exec ssdtrain::models)
  ssdtrain_test(exec_replay_ep_ranks_test
    SOURCES ${dir}/replay_ep_ranks_test.cc ${dir}/replay_test_util.cc ${dir}/io_test_util.cc
    DEPS ssdtrain::exec ssdtrain::models)
endfunction()
