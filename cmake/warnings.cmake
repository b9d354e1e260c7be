# One warning policy for the project's own targets (never for third-party or
# generated code). Clang additionally checks ABSL_GUARDED_BY annotations.
function(ipupod_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Werror -Wshadow -Wnon-virtual-dtor -Wcast-qual
    -Wmissing-declarations -Wno-unused-parameter)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    target_compile_options(${target} PRIVATE -Wthread-safety)
  endif()
endfunction()

# Declares a library of this project: ipupod_library(NAME SOURCES ... DEPS ...).
function(ipupod_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  ipupod_warnings(${name})
endfunction()
