# ctest search_efficiency_small: bench/search_efficiency on a tiny synthetic
# search (4 trials of 64 batches, one seed), behaviour only, never timings:
#  1. every kind of searcher runs through a real master and agents, and each
#     search's outcome is appended to the results file;
#  2. a second run with the same file trains nothing: every search comes
#     from the file;
#  3. --report prints the same summary from the file.
# Usage: cmake -DBIN=<search_efficiency> -DRESULTS=<file> -P search_efficiency_small.cmake
set(searchers promotion asha_tpe tpe pbt)
list(JOIN searchers "," searcher_list)
set(args --task synthetic --seeds 1 --max-trials 4 --max-length 64 --max-rungs 2 --searchers ${searcher_list}
         --results ${RESULTS})
file(REMOVE ${RESULTS})

function(run_bench out_var)
  execute_process(COMMAND ${BIN} ${args} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "search_efficiency ${ARGN}:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "search_efficiency ${ARGN} exited with ${rc}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

run_bench(first)
file(STRINGS ${RESULTS} lines)
list(LENGTH lines n)
if(NOT n EQUAL 5)
  message(FATAL_ERROR "expected 5 result lines (random and 4 searchers), found ${n}")
endif()
foreach(s random ${searchers})
  if(NOT first MATCHES "\\[${s}\\]: best validation_loss [0-9.]+")
    message(FATAL_ERROR "no outcome printed for ${s}")
  endif()
endforeach()
string(REGEX MATCH "summed-batches ratio.*" first_summary "${first}")
if(first_summary STREQUAL "")
  message(FATAL_ERROR "no summary")
endif()

run_bench(second)
string(REGEX MATCHALL "\\(from the results file\\)" taken "${second}")
list(LENGTH taken n_taken)
if(NOT n_taken EQUAL 5)
  message(FATAL_ERROR "the second run took ${n_taken} of 5 searches from the results file")
endif()
file(STRINGS ${RESULTS} lines)
list(LENGTH lines n)
if(NOT n EQUAL 5)
  message(FATAL_ERROR "the second run appended to the results file (${n} lines)")
endif()

run_bench(report --report)
string(REGEX MATCH "summed-batches ratio.*" report_summary "${report}")
if(NOT report_summary STREQUAL first_summary)
  message(FATAL_ERROR "--report printed another summary:\n${report_summary}\nthan the run:\n${first_summary}")
endif()
