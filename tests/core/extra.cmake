# core_tests reads the generated build_info.h (src/lattice/core/build_info.cmake).
if(TARGET core_tests)
  target_link_libraries(core_tests PRIVATE lattice_build_info)
endif()
