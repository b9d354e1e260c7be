# One warning policy for the project's own targets (never for third-party or
# generated code). Clang additionally checks ABSL_GUARDED_BY annotations.
# -Werror only with IPUPOD_WERROR (deploy/build.sh, and so CI and development, turn it on): a
# user's build with another compiler's new warnings still succeeds.
function(ipupod_warnings target)
  set(werror "")
  if(IPUPOD_WERROR)
    set(werror -Werror)
  endif()
  target_compile_options(${target} PRIVATE
    -Wall -Wextra ${werror} -Wshadow -Wnon-virtual-dtor -Wcast-qual
    -Wmissing-declarations -Wno-unused-parameter)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    target_compile_options(${target} PRIVATE -Wthread-safety)
  endif()
endfunction()

# Declares a library of this project: ipupod_library(NAME SOURCES ... DEPS ...).
# COMPUTE marks the libraries that hold the numeric inner loops (kernels,
# training): in optimised builds they get -O3, because GCC 12's -O2 vectorises
# only loops that need no runtime alias check, so element-wise loops over two
# buffers stay scalar (ReLU on [128, 1024]: 1.1 ns/element at -O2, 0.17 at
# -O3). No fast-math: results stay bit-identical. Sanitizer builds keep -O1.
function(ipupod_library name)
  cmake_parse_arguments(ARG "COMPUTE" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  ipupod_export_include_root(${name})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  ipupod_warnings(${name})
  if(ARG_COMPUTE AND NOT IPUPOD_SANITIZE AND NOT IPUPOD_FUZZ)
    target_compile_options(${name} PRIVATE $<$<CONFIG:Release,RelWithDebInfo>:-O3>)
  endif()
  if(IPUPOD_UNITY_BUILD)
    set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()
