/*
 * cuda_probe.c - what every CUDA program does first, without the CUDA
 * toolkit: load libcuda.so.1 by its soname through the dynamic loader (no
 * path, so LD_LIBRARY_PATH and /etc/ld.so.cache decide), then ask it for its
 * version and the GPUs it sees. Works against the real driver and the
 * stand-in (hack/fakedriver). Run inside a jail by hack/gpu-check.sh to show
 * where a job step finds its driver.
 *
 * Prints one line:
 *   libcuda.so.1: <file the loader mapped> cuInit=<rc> version=<n> devices=<n>
 *   libcuda.so.1: not found (<loader message>)
 * Exit status: 0 when cuInit succeeded, 3 when libcuda.so.1 cannot be loaded,
 * 4 when it loads but a call is missing or fails.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>

typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_int_fn)(int *);

int main(void)
{
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
	struct link_map *map = NULL;
	cu_init_fn cu_init;
	cu_int_fn cu_version, cu_count;
	int init_rc, version = -1, count = -1;

	if (cuda == NULL) {
		printf("libcuda.so.1: not found (%s)\n", dlerror());
		return 3;
	}
	if (dlinfo(cuda, RTLD_DI_LINKMAP, &map) != 0 || map == NULL) {
		printf("libcuda.so.1: loaded, but dlinfo failed: %s\n", dlerror());
		return 4;
	}
	cu_init = (cu_init_fn)dlsym(cuda, "cuInit");
	cu_version = (cu_int_fn)dlsym(cuda, "cuDriverGetVersion");
	cu_count = (cu_int_fn)dlsym(cuda, "cuDeviceGetCount");
	if (cu_init == NULL || cu_version == NULL || cu_count == NULL) {
		printf("libcuda.so.1: %s lacks cuInit/cuDriverGetVersion/"
		       "cuDeviceGetCount\n", map->l_name);
		return 4;
	}
	init_rc = cu_init(0);
	if (cu_version(&version) != 0)
		version = -1;
	if (init_rc != 0 || cu_count(&count) != 0)
		count = -1;
	printf("libcuda.so.1: %s cuInit=%d version=%d devices=%d\n",
	       map->l_name, init_rc, version, count);
	if (fflush(stdout) != 0)
		return 4;
	return init_rc == 0 ? 0 : 4;
}
