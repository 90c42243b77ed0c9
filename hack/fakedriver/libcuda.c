/*
 * STAND-IN for the NVIDIA driver's libcuda.so.1, for machines without a GPU (CI, `make up`): it lets
 * the tests show that a job step finds ITS node's driver through the dynamic loader. Nothing here
 * touches a GPU. Built by hack/fakedriver/Makefile with the version it pretends to be:
 *   WARDEN_DRIVER_VERSION "580.159.04"   the driver release (also the file name libcuda.so.<version>)
 *   WARDEN_CUDA_VERSION   13000          what cuDriverGetVersion reports (CUDA 13.0)
 * Devices are the /dev/nvidia<N> character devices this process can see and open, as with the real
 * driver.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_NO_DEVICE = 100 };

/* Read by the tests (ctypes) to tell two stand-in drivers apart. */
const char warden_fake_driver_version[] = WARDEN_DRIVER_VERSION;

static int is_gpu_device(const char *name)
{
	const char *p = name + strlen("nvidia");

	if (strncmp(name, "nvidia", strlen("nvidia")) != 0 || *p == '\0')
		return 0;
	for (; *p; p++)
		if (*p < '0' || *p > '9')
			return 0;
	return 1;
}

/* A device this process may use: one the devices cgroup lets it open. No driver owns the stand-in
 * devices (ENXIO); a denied one fails with EPERM, which is how a real driver's device disappears from
 * a job step that was not given it. */
static int usable(const char *name)
{
	char path[64];
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "/dev/%s", name) >= sizeof(path))
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return 1;
	}
	return errno != EPERM && errno != EACCES;
}

static int count_devices(void)
{
	DIR *d = opendir("/dev");
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL)
		if (is_gpu_device(e->d_name) && usable(e->d_name))
			n++;
	closedir(d);
	return n;
}

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
