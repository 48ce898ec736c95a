# manifest.cmake - writes the installed layer manifest at install time and installs it (run by
# layer/CMakeLists.txt's install(CODE), or alone with cmake -P by tests/vulkan/layer_capture_test.sh).
#
# The library path is computed when the install runs, with the prefix it runs with
# (`cmake --install build --prefix X` may differ from the prefix the build was configured with):
# - LIBDIR and DATADIR both relative (GNUInstallDirs' defaults): the path from the manifest's folder
#   <prefix>/<DATADIR>/vulkan/explicit_layer.d to <prefix>/<LIBDIR>/<library>, relative; the loader
#   takes a library_path with a slash relative to the manifest's folder, so the layer loads from any
#   prefix, after DESTDIR staging and after the whole tree is moved, with VK_LAYER_PATH alone;
# - either absolute: the library's absolute path (the manifest and the library do not move
#   together then); DESTDIR is not part of it, as it is not part of the installed system.
# A bare file name (what Debian's layers in /usr/lib use) would load only where the dynamic linker
# searches, and the loader skips a layer it cannot open without a word to the application.
#
# In: PSDB_LAYER_TEMPLATE (VkLayer_psdb_delivery.json.in), PSDB_LAYER_STAGING (where the manifest is
# written before file(INSTALL) copies it), PSDB_LAYER_LIBDIR, PSDB_LAYER_DATADIR (GNUInstallDirs'
# CMAKE_INSTALL_LIBDIR/DATADIR as configured), PSDB_LAYER_LIBRARY (the library's file name),
# CMAKE_INSTALL_PREFIX (the install's prefix).
foreach(v PSDB_LAYER_TEMPLATE PSDB_LAYER_STAGING PSDB_LAYER_LIBDIR PSDB_LAYER_DATADIR
          PSDB_LAYER_LIBRARY CMAKE_INSTALL_PREFIX)
  if("${${v}}" STREQUAL "")
    message(FATAL_ERROR "layer manifest: ${v} is not set")
  endif()
endforeach()

set(libdir "${PSDB_LAYER_LIBDIR}")
set(manifest_dir "${PSDB_LAYER_DATADIR}/vulkan/explicit_layer.d")
if(IS_ABSOLUTE "${libdir}" OR IS_ABSOLUTE "${manifest_dir}")
  if(NOT IS_ABSOLUTE "${libdir}")
    set(libdir "${CMAKE_INSTALL_PREFIX}/${libdir}")
  endif()
  if(NOT IS_ABSOLUTE "${manifest_dir}")
    set(manifest_dir "${CMAKE_INSTALL_PREFIX}/${manifest_dir}")
  endif()
  file(TO_CMAKE_PATH "${libdir}/${PSDB_LAYER_LIBRARY}" library_path)
else()
  # Any absolute root gives the same relative path; "/" keeps it independent of the prefix.
  file(RELATIVE_PATH library_path "/${manifest_dir}" "/${libdir}/${PSDB_LAYER_LIBRARY}")
  if(NOT library_path MATCHES "/")
    set(library_path "./${library_path}") # a bare name would be looked up in the linker's path
  endif()
endif()
# A JSON string: backslashes and quotes escaped (a prefix may hold either).
string(REPLACE "\\" "\\\\" library_path "${library_path}")
string(REPLACE "\"" "\\\"" library_path "${library_path}")
set(PSDB_LAYER_LIBRARY_PATH "${library_path}")
configure_file("${PSDB_LAYER_TEMPLATE}" "${PSDB_LAYER_STAGING}/VkLayer_psdb_delivery.json" @ONLY)
if(NOT IS_ABSOLUTE "${manifest_dir}")
  set(manifest_dir "${CMAKE_INSTALL_PREFIX}/${manifest_dir}")
endif()
# As install(FILES) does: DESTDIR prepended, the file listed in install_manifest.txt.
file(INSTALL DESTINATION "${manifest_dir}" TYPE FILE
  FILES "${PSDB_LAYER_STAGING}/VkLayer_psdb_delivery.json")
