# SPDX-License-Identifier: Apache-2.0
# cmake/package.cmake - the Debian package (CPack DEB; `make deb` -> build/
# sluice_<version>_<arch>.deb): /usr/bin/sluice and sluicectl, the plugins in
# /usr/lib/sluice/plugins (where /usr/bin/sluice looks: ../lib/sluice/plugins),
# the plugin headers, the systemd template unit sluice@.service and a drop-in
# per stage (its resources and network), the /etc/sluice/sluice.env
# template (a conffile, 0640) and the docs.
# Depends: the packages of tools/packages/runtime.txt (the list the image
# installs; tests/deploy/test_packages.sh checks it covers every library the
# binaries link), plus dpkg-shlibdeps' versioned library dependencies.
# The unit, env file and docs are the "deb" component, left out of a plain
# `cmake --install` (the image's /opt/sluice tree, tests) so that one never
# writes to /etc or /lib/systemd.
install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/sluice@.service
  DESTINATION lib/systemd/system COMPONENT deb EXCLUDE_FROM_ALL)
# each stage's resources and network (deploy/debian/dropins/<stage>.conf):
# sluice@<stage>.service.d/50-sluice.conf beside the template
file(GLOB sluice_dropins ${PROJECT_SOURCE_DIR}/deploy/debian/dropins/*.conf)
foreach(f ${sluice_dropins})
  get_filename_component(stage ${f} NAME_WE)
  install(FILES ${f} DESTINATION lib/systemd/system/sluice@${stage}.service.d
    RENAME 50-sluice.conf COMPONENT deb EXCLUDE_FROM_ALL)
endforeach()
# the settings file holds the storage, Redis and JWT secrets: 0640 root:root.
# systemd reads EnvironmentFile= as root before it switches to the unit's
# DynamicUser, so the stage itself never opens it and needs no group on it.
install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/sluice.env
  DESTINATION /etc/sluice COMPONENT deb EXCLUDE_FROM_ALL
  PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/CHANGELOG.md
  ${PROJECT_SOURCE_DIR}/docs/deploy.md ${PROJECT_SOURCE_DIR}/docs/configuration.md
  ${PROJECT_SOURCE_DIR}/docs/operations.md
  DESTINATION share/doc/sluice COMPONENT deb EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION share/doc/sluice
  RENAME copyright COMPONENT deb EXCLUDE_FROM_ALL)

file(STRINGS ${PROJECT_SOURCE_DIR}/tools/packages/runtime.txt runtime_pkgs REGEX "^[a-z0-9]")
list(JOIN runtime_pkgs ", " runtime_depends)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME sluice)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "Sluice maintainers <sluice@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "scale-out pipeline that transcribes and grades spoken answers")
set(CPACK_PACKAGE_DESCRIPTION
  "Sluice's stages (every stage of the pipeline) in one binary, sluicectl, the STT, grading and step plugins, and a systemd unit per stage (sluice@<stage>.service). Kafka, Redis and S3-compatible storage are yours.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_COMPONENTS_ALL Unspecified deb)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${runtime_depends}")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/deploy/debian/conffiles
  ${PROJECT_SOURCE_DIR}/deploy/debian/postinst)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
