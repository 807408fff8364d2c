// A stand-in for another Trial SDK release: built as libdet_sdk.so.9 (its
// soname), which no det-cpp cluster has. trial_abi_test links a trial to it.
extern "C" int det_sdk_stub_version(void) { return 9; }
