// A trial.so linked against libdet_sdk.so.9 (tests/data/sdk9_stub.cc) instead
// of the cluster's libdet_sdk.so.0: det-cli and the master refuse it at create
// (trial_abi_test). It exports the entry symbol, so only the soname is wrong;
// it is never loaded.
extern "C" int det_sdk_stub_version(void);
extern "C" const void* det_trial_plugin_entry(void) {
  static const int version = det_sdk_stub_version();
  (void)version;
  return nullptr;
}
