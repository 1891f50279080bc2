# Sanitizer and fuzzer builds (scripts/sanitize.sh and scripts/fuzz.sh configure
# them in build-asan/ and build-tsan/; docs/HARDENING.md says what each covers).
#   SSDTRAIN_SANITIZE=asan  AddressSanitizer + UndefinedBehaviorSanitizer, and the
#                           first report aborts (-fno-sanitize-recover=all)
#   SSDTRAIN_SANITIZE=tsan  ThreadSanitizer
#   SSDTRAIN_FUZZ=ON        the libFuzzer targets in fuzz/ (clang only); every
#                           library gets libFuzzer's coverage instrumentation
# The flags apply to every target of the project; Debian's prebuilt libraries
# (GoogleTest, liburing, libstdc++) stay uninstrumented.
set(SSDTRAIN_SANITIZE OFF CACHE STRING "Sanitizer build: OFF, asan (ASan+UBSan) or tsan")
set_property(CACHE SSDTRAIN_SANITIZE PROPERTY STRINGS OFF asan tsan)
option(SSDTRAIN_FUZZ "Build the libFuzzer targets in fuzz/ (clang only)" OFF)

if(SSDTRAIN_SANITIZE STREQUAL "asan")
  set(ssdtrain_sanitize_flags -fsanitize=address,undefined -fno-sanitize-recover=all)
elseif(SSDTRAIN_SANITIZE STREQUAL "tsan")
  set(ssdtrain_sanitize_flags -fsanitize=thread)
elseif(NOT SSDTRAIN_SANITIZE STREQUAL "OFF")
  message(FATAL_ERROR "SSDTRAIN_SANITIZE must be OFF, asan or tsan, not '${SSDTRAIN_SANITIZE}'")
endif()
if(ssdtrain_sanitize_flags)
  if(SSDTRAIN_HAVE_CUDA)
    message(FATAL_ERROR "SSDTRAIN_SANITIZE needs -DSSDTRAIN_CUDA=OFF (nvcc does not take these flags)")
  endif()
  # CUDA is off (checked above), so every compiled source is C++.
  add_compile_options(${ssdtrain_sanitize_flags} -fno-omit-frame-pointer)
  add_link_options(${ssdtrain_sanitize_flags})
endif()

if(SSDTRAIN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "SSDTRAIN_FUZZ=ON needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
