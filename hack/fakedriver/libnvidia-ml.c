/*
 * STAND-IN for the NVIDIA driver's libnvidia-ml.so.1 (NVML), for machines without a GPU: the few
 * calls the stand-in nvidia-smi and the tests make. See libcuda.c for the version macros.
 */
#include "gpu_devices.h"

typedef int nvmlReturn_t;
enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_INSUFFICIENT_SIZE = 7 };

const char warden_fake_driver_version[] = WARDEN_DRIVER_VERSION;

nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlInit(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	if (version == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if ((size_t)snprintf(version, length, "%s", WARDEN_DRIVER_VERSION) >= length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = (unsigned int)count_devices();
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }
