# ctest search_peers_small: both sides of bench/search_peers on a small
# configuration (2 seeds, tasks lr and the recorded Fashion-MNIST table), then the Optuna
# side with an interpreter that does not exist, which must fail naming
# python3-optuna. Never skips: without /usr/bin/python3 and python3-optuna
# (deploy/install-deps.sh) the first run fails.
# A third and fourth run check that the same searches give the same results
# file with one job and with two.
#   cmake -DBIN=<search_peers> -DTABLE=<table> -DPYTHON=/usr/bin/python3 -DRESULTS_DIR=<dir>
#         -P search_peers_small.cmake
set(searchers random adaptive_asha optuna_random optuna_tpe_sha)
string(REPLACE ";" "," searcher_list "${searchers}")
execute_process(
  COMMAND ${BIN} --tasks lr,fmnist --seeds 1-2 --check-seeds none --searchers ${searcher_list}
          --table ${TABLE} --python ${PYTHON} --jobs 2
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "search_peers exited with ${rc} (Optuna needs ${PYTHON} with python3-optuna: deploy/install-deps.sh)")
endif()
foreach(task lr fmnist)
  if(NOT out MATCHES "== task ${task}\ntarget [0-9.]+: the 98th percentile")
    message(FATAL_ERROR "no target line for task ${task}")
  endif()
endforeach()
foreach(s ${searchers})
  # A row: name, side, median time to target [interval], mean [interval], k/n.
  string(REGEX MATCHALL "\n${s} +(det-cpp|Optuna) +[0-9]+ \\[[0-9]+, [0-9]+\\] +[0-9]+ \\[[0-9]+, [0-9]+\\] +[0-2]/2" rows "${out}")
  list(LENGTH rows n)
  if(NOT n EQUAL 2)
    message(FATAL_ERROR "searcher ${s}: ${n} table rows with a time to target, expected 2 (one per task)")
  endif()
endforeach()
foreach(goal "goal 1 \\(adaptive_asha" "goal 2 \\(det-cpp's best" "goal 3 \\(reproducibility")
  string(REGEX MATCHALL "${goal}[^\n]*" lines "${out}")
  list(LENGTH lines n)
  if(NOT n EQUAL 2)
    message(FATAL_ERROR "expected the line '${goal}' once per task, found ${n}")
  endif()
endforeach()
if(NOT out MATCHES "goal 1 [^\n]*: (met|not met)\n" OR NOT out MATCHES "goal 2 [^\n]*: (met|not met)\n")
  message(FATAL_ERROR "goals 1 and 2 must each say met or not met")
endif()
# Reproducible: the same searches twice (one and two jobs) write the same
# results file (Optuna's HyperbandPruner hashes the study name into its
# brackets; the server fixes the name).
foreach(jobs 1 2)
  execute_process(
    COMMAND ${BIN} --tasks lr --seeds 1-2 --check-seeds none --searchers optuna_tpe_hyperband,pbt
            --python ${PYTHON} --jobs ${jobs} --results ${RESULTS_DIR}/search_peers_small_${jobs}.jsonl
    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "search_peers --jobs ${jobs} exited with ${rc}: ${err}")
  endif()
endforeach()
file(READ ${RESULTS_DIR}/search_peers_small_1.jsonl first)
file(READ ${RESULTS_DIR}/search_peers_small_2.jsonl second)
if(first STREQUAL "" OR NOT first STREQUAL second)
  message(FATAL_ERROR "two runs of the same searches differ (or wrote nothing):\n${first}\n${second}")
endif()
# A missing interpreter is an error naming python3-optuna, never a silent pass.
execute_process(
  COMMAND ${BIN} --tasks lr --seeds 1 --check-seeds none --searchers optuna_random --python /nonexistent/python3
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(rc EQUAL 0 OR NOT err MATCHES "python3-optuna" OR NOT err MATCHES "deploy/install-deps.sh")
  message(FATAL_ERROR "with --python /nonexistent/python3: exit ${rc}, stderr '${err}'; expected a failure naming python3-optuna and deploy/install-deps.sh")
endif()
