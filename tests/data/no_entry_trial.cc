// A shared library that is not a trial: it exports no det_trial_plugin_entry.
extern "C" int not_a_trial(void) { return 42; }
