# What `cmake --install` puts where, and the Debian packages CPack makes of it
# (deploy/package.sh; docs/operations.md, "Installing as a service").
#
# Component `ipupod` (the .deb `ipupod`): ipupodd, ipupod and ipupod-replay in bin/, the
# custom op helper in libexec/ipupod/ and its C header in include/ipupod/, the
# systemd unit in lib/systemd/system/, its system user in lib/sysusers.d/, a default config
# in ETC/ipupod/ipupodd.json, the README and docs/ in share/doc/ipupod/.
# Component `python` (the .deb `python3-ipupod`): the Python package in
# lib/python3/dist-packages/ipupod, the stubs generated at build time included.
#
# ETC is /etc for the prefix /usr (the package's), PREFIX/etc for any other prefix, as the
# GNU coding standards have it. Both it and the unit's paths are worked out when installing,
# not when configuring, so `cmake --install build --prefix DIR` and DESTDIR staging give a
# unit whose ExecStart names the ipupodd installed beside it.
include(GNUInstallDirs)

set(IPUPOD_DEPLOY_DIR ${PROJECT_SOURCE_DIR}/deploy)

install(TARGETS ipupodd ipupod ipupod-replay
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT ipupod)
# ipupodd's helper for custom op libraries (device/customop/host.h), where ipupodd looks for it
# (BINDIR/../libexec/ipupod), and the C header library authors build against.
install(TARGETS ipupod-custom-op-host
  RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/ipupod COMPONENT ipupod)
install(FILES ${PROJECT_SOURCE_DIR}/device/customop/custom_op_abi.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ipupod COMPONENT ipupod)
install(FILES ${IPUPOD_DEPLOY_DIR}/ipupod.sysusers
  DESTINATION lib/sysusers.d RENAME ipupod.conf COMPONENT ipupod)
install(FILES ${PROJECT_SOURCE_DIR}/README.md
  DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT ipupod)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/
  DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs COMPONENT ipupod)

# The unit and the default config, their paths rewritten for the prefix being installed to.
install(CODE "set(IPUPOD_DEPLOY_DIR \"${IPUPOD_DEPLOY_DIR}\")" COMPONENT ipupod)
install(CODE [[
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(ipupod_etc "/etc")
  else()
    set(ipupod_etc "${CMAKE_INSTALL_PREFIX}/etc")
  endif()
  file(READ "${IPUPOD_DEPLOY_DIR}/ipupodd.service" ipupod_unit)
  string(REPLACE "/usr/bin/" "${CMAKE_INSTALL_PREFIX}/bin/" ipupod_unit "${ipupod_unit}")
  string(REPLACE "/etc/ipupod/" "${ipupod_etc}/ipupod/" ipupod_unit "${ipupod_unit}")
  string(REPLACE "/usr/share/doc/" "${CMAKE_INSTALL_PREFIX}/share/doc/" ipupod_unit
         "${ipupod_unit}")
  set(ipupod_unit_dir "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
  file(MAKE_DIRECTORY "${ipupod_unit_dir}")
  message(STATUS "Installing: ${ipupod_unit_dir}/ipupodd.service")
  file(WRITE "${ipupod_unit_dir}/ipupodd.service" "${ipupod_unit}")
  # (file(INSTALL) prepends $DESTDIR itself; file(WRITE) above does not)
  file(INSTALL "${IPUPOD_DEPLOY_DIR}/ipupodd.json" DESTINATION "${ipupod_etc}/ipupod"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ)
]] COMPONENT ipupod)

if(TARGET ipupod_python)
  install(DIRECTORY ${PROJECT_BINARY_DIR}/python/ipupod
    DESTINATION lib/python3/dist-packages COMPONENT python
    FILES_MATCHING PATTERN "*.py" PATTERN "py.typed" PATTERN "__pycache__" EXCLUDE)
endif()

# ---- Debian packages: `cpack -G DEB` in the build directory (deploy/package.sh).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ipupod)
set(CPACK_PACKAGE_VENDOR "ipupod")
set(CPACK_PACKAGE_CONTACT "ipupod maintainers <ipupod@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "simulated Graphcore IPU pod shared over gRPC: ipupodd, the ipupod CLI")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)  # Debian packages live in /usr, whatever the build's prefix
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ipupod)
if(TARGET ipupod_python)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_IPUPOD_PACKAGE_NAME ipupod)
set(CPACK_DEBIAN_IPUPOD_PACKAGE_SHLIBDEPS ON)  # dpkg-shlibdeps: the Debian libraries it links
set(CPACK_DEBIAN_IPUPOD_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_IPUPOD_DESCRIPTION
    "simulated Graphcore IPU pod shared over gRPC\n ipupodd owns a simulated pod of GC200 IPUs and shares it among users (partitions,\n a fair queue, batch jobs, faults and resets as on real hardware); ipupod is its CLI.\n Includes the systemd unit ipupodd.service.")
set(CPACK_DEBIAN_IPUPOD_PACKAGE_CONTROL_EXTRA
    ${IPUPOD_DEPLOY_DIR}/debian/postinst ${IPUPOD_DEPLOY_DIR}/debian/prerm
    ${IPUPOD_DEPLOY_DIR}/debian/postrm ${IPUPOD_DEPLOY_DIR}/debian/conffiles)
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-ipupod)
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3, python3-grpcio, python3-protobuf, python3-numpy")
set(CPACK_DEBIAN_PYTHON_DESCRIPTION
    "Python client of ipupod, a simulated Graphcore IPU pod\n Client, sessions, runs, batch jobs and a PopTorch-shaped front end (ipupod.poptorch).")
include(CPack)
