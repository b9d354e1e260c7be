# Include roots that follow declared dependencies.
#
# Every file includes project headers by their path from the source root ("scheduler/scheduler.h").
# If every library exported the source root, any file could include any header and DEPS would be
# advisory. Instead each top-level folder F gets a root of its own in the build tree,
#   ${PROJECT_BINARY_DIR}/include_roots/F/F -> ${PROJECT_SOURCE_DIR}/F   (a symlink),
# and a library of folder F exports only that root. A target therefore sees the headers of its own
# folder and of the libraries it links (PUBLIC DEPS propagate), and an include from a folder it does
# not declare fails to compile: "fatal error: store/x.h: No such file or directory".
#
# Diagnostics name headers by their path under include_roots/; the symlink leads to the source.

# The include root of top-level folder `folder`, created at configure time.
function(ipupod_folder_include_root folder out_var)
  set(root ${PROJECT_BINARY_DIR}/include_roots/${folder})
  if(NOT IS_SYMLINK ${root}/${folder})
    file(MAKE_DIRECTORY ${root})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
  endif()
  set(${out_var} ${root} PARENT_SCOPE)
endfunction()

# Exports the include root of the folder the calling CMakeLists.txt is in (its top-level folder,
# for tests/compiler and the like) from `target`.
function(ipupod_export_include_root target)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  string(REGEX REPLACE "/.*" "" folder "${rel}")
  ipupod_folder_include_root(${folder} root)
  target_include_directories(${target} PUBLIC ${root})
endfunction()
