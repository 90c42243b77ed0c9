/*
 * STAND-IN for the NVIDIA driver's libnvidia-ml.so.1 (NVML), for machines without a GPU: the few
 * calls the stand-in nvidia-smi and the tests make. See libcuda.c for the version macros.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_INSUFFICIENT_SIZE = 7 };

const char warden_fake_driver_version[] = WARDEN_DRIVER_VERSION;

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

static unsigned int count_devices(void)
{
	DIR *d = opendir("/dev");
	struct dirent *e;
	unsigned int n = 0;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		const char *p = e->d_name + strlen("nvidia");

		if (strncmp(e->d_name, "nvidia", strlen("nvidia")) != 0 || *p == '\0')
			continue;
		while (*p >= '0' && *p <= '9')
			p++;
		if (*p == '\0' && usable(e->d_name))
			n++;
	}
	closedir(d);
	return n;
}

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
	*count = count_devices();
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }
