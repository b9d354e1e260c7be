# ipupod_assert_link_closure(TARGET FORBIDDEN regex...): fails the configure
# step if anything TARGET links, directly or through the
# INTERFACE_LINK_LIBRARIES of what it links, matches one of the regexes
# (case-insensitive). Keeps a library's dependency promise checked, e.g. that
# an application embedding the client library links no BLAS, ONNX or
# compiler. REQUIRES: every target in the closure is already defined.
function(ipupod_link_closure target out_var)
  set(seen "")
  set(todo ${target})
  while(todo)
    list(POP_FRONT todo item)
    # $<LINK_ONLY:x> and friends: keep the library, drop the wrapper.
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
    if(item STREQUAL "" OR item MATCHES "^\\$<" OR item IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${item})
    if(TARGET ${item})
      get_target_property(aliased ${item} ALIASED_TARGET)
      if(aliased)
        list(APPEND todo ${aliased})
      endif()
      get_target_property(deps ${item} INTERFACE_LINK_LIBRARIES)
      if(deps)
        list(APPEND todo ${deps})
      endif()
    endif()
  endwhile()
  set(${out_var} ${seen} PARENT_SCOPE)
endfunction()

function(ipupod_assert_link_closure target)
  cmake_parse_arguments(ARG "" "" "FORBIDDEN" ${ARGN})
  ipupod_link_closure(${target} closure)
  foreach(item IN LISTS closure)
    string(TOLOWER "${item}" lower)
    foreach(pattern IN LISTS ARG_FORBIDDEN)
      if(lower MATCHES "${pattern}")
        message(FATAL_ERROR "${target} must not link '${item}' (matches '${pattern}'); "
                            "see docs/design.md's Layout and cmake/groups.cmake for what it may depend on")
      endif()
    endforeach()
  endforeach()
endfunction()
