/* A stand-in for NVIDIA's libnvidia-ml.so.1 for the tests (no GPU is lent
 * to CI): two fake devices with fixed figures.
 *   device 0: uuid GPU-stub-0, utilisation 37%, 1 GiB used of 16 GiB
 *   device 1: uuid GPU-stub-1, utilisation 81%, 2 GiB used of 16 GiB
 * Only the entries common/nvml.cc resolves, with NVML's documented layouts.
 * NVML_STUB_FAIL_INIT=1 in the environment makes nvmlInit_v2 fail (999,
 * NVML_ERROR_UNKNOWN); NVML_STUB_FAIL_UTILIZATION=I makes device I's
 * nvmlDeviceGetUtilizationRates fail with NOT_SUPPORTED (3), as a
 * MIG-enabled GPU's does. */
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;
typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

#define STUB_SUCCESS 0
#define STUB_INVALID_ARGUMENT 2
#define STUB_UNINITIALIZED 1
#define STUB_INSUFFICIENT_SIZE 7
#define STUB_NOT_SUPPORTED 3
#define STUB_UNKNOWN 999
#define GIB (1024ULL * 1024ULL * 1024ULL)

static int g_initialized = 0;
/* The handles are the addresses of these two bytes. */
static char g_devices[2];

static int DeviceIndex(nvmlDevice_t device) {
  if ((char*)device == &g_devices[0]) return 0;
  if ((char*)device == &g_devices[1]) return 1;
  return -1;
}

nvmlReturn_t nvmlInit_v2(void) {
  const char* fail = getenv("NVML_STUB_FAIL_INIT");
  if (fail != NULL && strcmp(fail, "1") == 0) return STUB_UNKNOWN;
  g_initialized = 1;
  return STUB_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
  g_initialized = 0;
  return STUB_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  return result == STUB_SUCCESS ? "Success" : "stub error";
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!g_initialized) return STUB_UNINITIALIZED;
  if (count == NULL) return STUB_INVALID_ARGUMENT;
  *count = 2;
  return STUB_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (!g_initialized) return STUB_UNINITIALIZED;
  if (device == NULL || index > 1) return STUB_INVALID_ARGUMENT;
  *device = (nvmlDevice_t)&g_devices[index];
  return STUB_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  int i = DeviceIndex(device);
  if (!g_initialized) return STUB_UNINITIALIZED;
  const char* fail = getenv("NVML_STUB_FAIL_UTILIZATION");
  if (i < 0 || utilization == NULL) return STUB_INVALID_ARGUMENT;
  if (fail != NULL && fail[0] == (char)('0' + i) && fail[1] == '\0') return STUB_NOT_SUPPORTED;
  utilization->gpu = i == 0 ? 37 : 81;
  utilization->memory = i == 0 ? 10 : 20;
  return STUB_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  int i = DeviceIndex(device);
  if (!g_initialized) return STUB_UNINITIALIZED;
  if (i < 0 || memory == NULL) return STUB_INVALID_ARGUMENT;
  memory->total = 16 * GIB;
  memory->used = (i == 0 ? 1 : 2) * GIB;
  memory->free = memory->total - memory->used;
  return STUB_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  int i = DeviceIndex(device);
  const char* value = i == 0 ? "GPU-stub-0" : "GPU-stub-1";
  if (!g_initialized) return STUB_UNINITIALIZED;
  if (i < 0 || uuid == NULL) return STUB_INVALID_ARGUMENT;
  if (length < strlen(value) + 1) return STUB_INSUFFICIENT_SIZE;
  strcpy(uuid, value);
  return STUB_SUCCESS;
}
