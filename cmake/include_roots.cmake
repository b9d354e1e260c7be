# Include roots that follow declared dependencies.
#
# Every file includes project headers by their path from the source root
# ("scheduler/scheduler.h", "device/kernels/matmul.h"). If every library exported the source root,
# any file could include any header and DEPS would be advisory. Instead each library folder F
# (a group's root, "scheduler", or one of its sub-libraries, "scheduler/sharing") gets a root of
# its own in the build tree,
#   ${PROJECT_BINARY_DIR}/include_roots/F/F -> ${PROJECT_SOURCE_DIR}/F
# and a library of folder F exports only that root. A target therefore sees the headers of its own
# folder and of the libraries it links (PUBLIC DEPS propagate), and an include from a folder it does
# not declare fails to compile: "fatal error: server/store/x.h: No such file or directory".
#
# A folder that holds sub-libraries of its own (scheduler/ holds scheduler/sharing/ ...) cannot be
# linked whole, or its root would show its sub-libraries' headers too: its root is a folder of one
# link per file of its own (not its subfolders'), made again at every configure, and the glob below
# re-runs the configure when a file is added or removed there.
#
# Diagnostics name headers by their path under include_roots/; the links lead to the source.

# The include root of library folder `folder` (a path from the source root), made at configure time.
function(ipupod_folder_include_root folder out_var)
  string(REPLACE "/" "_" key ${folder})
  set(root ${PROJECT_BINARY_DIR}/include_roots/${key})
  set(${out_var} ${root} PARENT_SCOPE)
  set(source ${PROJECT_SOURCE_DIR}/${folder})
  set(sublibs "")
  if(NOT folder STREQUAL "tests")
    file(GLOB sublibs LIST_DIRECTORIES true ${source}/*/CMakeLists.txt)
  endif()
  if(NOT sublibs)
    if(NOT IS_SYMLINK ${root}/${folder})
      get_filename_component(parent ${root}/${folder} DIRECTORY)
      file(MAKE_DIRECTORY ${parent})
      file(CREATE_LINK ${source} ${root}/${folder} SYMBOLIC)
    endif()
    return()
  endif()
  get_property(made GLOBAL PROPERTY ipupod_include_root_${key})
  if(made)
    return()
  endif()
  set_property(GLOBAL PROPERTY ipupod_include_root_${key} TRUE)
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root}/${folder})
  file(GLOB own LIST_DIRECTORIES false CONFIGURE_DEPENDS ${source}/*.h ${source}/*.inc)
  foreach(file IN LISTS own)
    get_filename_component(name ${file} NAME)
    file(CREATE_LINK ${file} ${root}/${folder}/${name} SYMBOLIC)
  endforeach()
endfunction()

# Exports the include root of the library folder the calling CMakeLists.txt is in from `target`.
# Under tests/ the root is the whole of tests/: the tests' own headers (tests/support/...) are
# shared among them.
function(ipupod_export_include_root target)
  file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  if(folder MATCHES "^tests(/|$)")
    set(folder tests)
  endif()
  ipupod_folder_include_root(${folder} root)
  target_include_directories(${target} PUBLIC ${root})
endfunction()
