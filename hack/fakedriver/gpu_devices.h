/*
 * The GPUs a STAND-IN driver library sees: the /dev/nvidia<N> character devices this process may
 * open, as with the real driver. Shared by libcuda.c and libnvidia-ml.c (one copy in each library).
 */
#ifndef WARDEN_FAKE_GPU_DEVICES_H
#define WARDEN_FAKE_GPU_DEVICES_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

#endif
