# IPUPOD_SANITIZE=address builds everything with ASan+UBSan (no recovery);
# IPUPOD_SANITIZE=thread builds with TSan. Applied globally so that our code
# and the test binaries agree; system libraries stay uninstrumented.
# Sanitizer builds use -O1 -g1: the sanitizers' own recommendation for useful
# stacks, and much faster to compile than -O2 -g on CI's two cores. GCC's
# -Wmaybe-uninitialized is unreliable under sanitizer instrumentation (it
# fires inside libstdc++'s <regex>, for one), so it is off for those builds;
# the plain gcc build keeps it.
if(IPUPOD_SANITIZE)
  add_compile_options(-O1 -g1)
  # IPUPOD_DCHECK is on in the instrumented builds (common/check.h).
  add_compile_definitions(IPUPOD_DCHECKS)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options(-Wno-maybe-uninitialized)
  endif()
endif()
if(IPUPOD_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
elseif(IPUPOD_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(IPUPOD_SANITIZE)
  message(FATAL_ERROR "IPUPOD_SANITIZE must be empty, 'address' or 'thread'")
endif()

# IPUPOD_FUZZ=ON (tools/fuzz/): every object gets libFuzzer's coverage
# instrumentation (fuzzer-no-link; the fuzz targets link -fsanitize=fuzzer)
# and ASan + UBSan, at the same -O1 -g1. With IPUPOD_SANITIZE=address too, the
# same build also holds every test: CI's ASan stage builds the fuzz targets
# with the tests instead of building the libraries a third time (the coverage
# hooks are no-ops outside a fuzz target).
if(IPUPOD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "IPUPOD_FUZZ needs clang: -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(IPUPOD_SANITIZE STREQUAL "thread")
    message(FATAL_ERROR "IPUPOD_FUZZ runs under ASan + UBSan; it cannot be combined with TSan")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
  add_compile_definitions(IPUPOD_DCHECKS)
  if(NOT IPUPOD_SANITIZE)
    add_compile_options(-O1 -g1 -fsanitize=address,undefined -fno-sanitize-recover=all
                        -fno-omit-frame-pointer)
    add_link_options(-fsanitize=address,undefined)
  endif()
endif()

# IPUPOD_INSTRUMENTED_O0: -O0 in the instrumented builds (sanitizers, fuzzing), empty
# otherwise. The tests' own code and the CLI's argument handling use it: their objects are
# most of an instrumented build's compile time, half of which is optimisation (clang, ASan:
# tests/server/server_test.cc 36.9 s of CPU at -O1, 19.4 s at -O0), and their run time is
# not what the tests measure. The code under test keeps -O1.
# Not under ThreadSanitizer: with the tests at -O0, soak_integration_test reported a race
# between two of libgrpc's own threads on a string libgrpc allocated and copied, the copy
# running in std::string code the test binary had emitted itself (2026-11-28). The likely
# cause: at -O0 the binary keeps out-of-line, instrumented copies of libstdc++'s inline
# string members, which interpose uninstrumented libgrpc's calls, so TSan sees gRPC's
# internal hand-offs without the synchronization inside libgrpc. The TSan build keeps -O1.
set(IPUPOD_INSTRUMENTED_O0 "")
if((IPUPOD_SANITIZE OR IPUPOD_FUZZ) AND NOT IPUPOD_SANITIZE STREQUAL "thread")
  set(IPUPOD_INSTRUMENTED_O0 -O0)
endif()
