# IPUPOD_SANITIZE=address builds everything with ASan+UBSan (no recovery);
# IPUPOD_SANITIZE=thread builds with TSan. Applied globally so that our code
# and the test binaries agree; system libraries stay uninstrumented.
if(IPUPOD_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
elseif(IPUPOD_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(IPUPOD_SANITIZE)
  message(FATAL_ERROR "IPUPOD_SANITIZE must be empty, 'address' or 'thread'")
endif()
