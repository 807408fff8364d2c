# det_add_trial(NAME SOURCES...): a trial library NAME.so (a MODULE library,
# no "lib" prefix) built from SOURCES and linked with the Trial SDK
# (det::sdk), ready for `det-cli experiment create CONFIG NAME.so`.
# It lands in the current binary directory, or in DET_TRIAL_OUTPUT_DIRECTORY
# when that is set (the det-cpp tree sets it to <build>/trials).
# Shared by the det-cpp tree and the installed package (detConfig.cmake).
function(det_add_trial name)
  if(NOT ARGN)
    message(FATAL_ERROR "det_add_trial(${name}): no sources; write det_add_trial(${name} ${name}.cc)")
  endif()
  add_library(${name} MODULE ${ARGN})
  set_target_properties(${name} PROPERTIES PREFIX "" OUTPUT_NAME ${name})
  if(DET_TRIAL_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${DET_TRIAL_OUTPUT_DIRECTORY})
  else()
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  target_link_libraries(${name} PRIVATE det::sdk)
endfunction()
