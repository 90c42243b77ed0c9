/*
 * STAND-IN for the NVIDIA driver's libcuda.so.1, for machines without a GPU (CI, `make up`): it lets
 * the tests show that a job step finds ITS node's driver through the dynamic loader. Nothing here
 * touches a GPU. Built by hack/fakedriver/Makefile with the version it pretends to be:
 *   WARDEN_DRIVER_VERSION "580.159.04"   the driver release (also the file name libcuda.so.<version>)
 *   WARDEN_CUDA_VERSION   13000          what cuDriverGetVersion reports (CUDA 13.0)
 * Devices are the /dev/nvidia<N> character devices this process can see and open, as with the real
 * driver.
 */
#include "gpu_devices.h"

typedef int CUresult;
enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_NO_DEVICE = 100 };

/* Read by the tests (ctypes) to tell two stand-in drivers apart. */
const char warden_fake_driver_version[] = WARDEN_DRIVER_VERSION;

CUresult cuInit(unsigned int flags)
{
	(void)flags;
	return count_devices() > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult cuDriverGetVersion(int *version)
{
	if (version == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*version = WARDEN_CUDA_VERSION;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
	if (count == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*count = count_devices();
	return CUDA_SUCCESS;
}
