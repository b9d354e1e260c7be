# The groups' rules: which part of the system may link which (docs/design.md, "Layout").
#
# The top-level folders are the system's parts. A library belongs to the group of the folder it
# is declared in; include roots (cmake/include_roots.cmake) make a header visible only to what
# links its library, so a rule on links is a rule on includes too. After every target exists,
# ipupod_check_group_rules() walks each library's and executable's whole link closure and fails
# the configure on a link the table below does not allow, naming the chain's two ends:
#
#   group       may link (besides its own group and third-party libraries)
#   proto       -
#   common      proto
#   device      common, proto                  the simulated IPU and its stack: no scheduler, no server
#   scheduler   common, ipupod_device          the pod's IPUs as the scheduler sees them, no compute
#   server      common, device, scheduler, proto
#   client      common, proto                  the C++ client links nothing of device/ or scheduler/
#   tools, tests, python: anything
#
# Exceptions are single targets, each with its reason (ipupod_group_exception below).
set(IPUPOD_GROUP_ALLOWS_proto "")
set(IPUPOD_GROUP_ALLOWS_common "proto")
set(IPUPOD_GROUP_ALLOWS_device "common;proto")
set(IPUPOD_GROUP_ALLOWS_scheduler "common;ipupod_device")
set(IPUPOD_GROUP_ALLOWS_server "common;device;scheduler;proto")
set(IPUPOD_GROUP_ALLOWS_client "common;proto")

# ipupod_group_exception(TARGET LINKED REASON): TARGET may link LINKED (a target or a group)
# although its group's rule does not allow it. REASON is for the reader; keep exceptions few.
function(ipupod_group_exception target linked reason)
  set_property(GLOBAL APPEND PROPERTY IPUPOD_GROUP_EXCEPTIONS_${target} ${linked})
endfunction()

# The group of a target defined in this project ("" for tools, tests, python and imported ones).
function(ipupod_target_group target out_var)
  set(${out_var} "" PARENT_SCOPE)
  get_target_property(imported ${target} IMPORTED)
  if(imported)
    return()
  endif()
  get_target_property(dir ${target} SOURCE_DIR)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${dir})
  string(REGEX REPLACE "/.*" "" group "${rel}")
  if(DEFINED IPUPOD_GROUP_ALLOWS_${group})
    set(${out_var} ${group} PARENT_SCOPE)
  elseif(group MATCHES "^(common|device|scheduler|server|client|proto)$")
    set(${out_var} ${group} PARENT_SCOPE)
  endif()
endfunction()

function(ipupod_check_target_group target)
  ipupod_target_group(${target} group)
  if(group STREQUAL "")
    return()
  endif()
  set(allowed ${group} ${IPUPOD_GROUP_ALLOWS_${group}})
  get_property(exceptions GLOBAL PROPERTY IPUPOD_GROUP_EXCEPTIONS_${target})
  list(APPEND allowed ${exceptions})
  ipupod_link_closure(${target} closure)
  foreach(item IN LISTS closure)
    if(NOT TARGET ${item} OR item STREQUAL target)
      continue()
    endif()
    ipupod_target_group(${item} linked_group)
    if(linked_group STREQUAL "" OR linked_group IN_LIST allowed OR item IN_LIST allowed)
      continue()
    endif()
    message(FATAL_ERROR "${target} (${group}/) links ${item} (${linked_group}/), which the groups' "
                        "rules do not allow (cmake/groups.cmake): ${group}/ may link "
                        "${IPUPOD_GROUP_ALLOWS_${group}}")
  endforeach()
endfunction()

# Checks every library and executable under the given folders (recursively).
function(ipupod_check_group_rules)
  set(dirs ${ARGN})
  while(dirs)
    list(POP_FRONT dirs dir)
    get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target IN LISTS targets)
      get_target_property(type ${target} TYPE)
      if(type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY|EXECUTABLE|INTERFACE_LIBRARY)$")
        ipupod_check_target_group(${target})
      endif()
    endforeach()
    get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
    list(APPEND dirs ${subdirs})
  endwhile()
endfunction()
