/*
 * STAND-IN for nvidia-smi, for machines without a GPU. Like the real one it loads libnvidia-ml.so.1
 * through the dynamic loader at run time (and fails with status 12 when it cannot), so it shows which
 * driver a process really finds. Understands:
 *   nvidia-smi            a short summary: driver version, the NVML file it loaded, GPU count
 *   nvidia-smi -L         one "GPU <i>: ..." line per device
 *   nvidia-smi --query-gpu=driver_version --format=csv,noheader    the version, once per GPU
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*init_fn)(void);
typedef int (*version_fn)(char *, unsigned int);
typedef int (*count_fn)(unsigned int *);

int main(int argc, char **argv)
{
	void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	init_fn init;
	version_fn get_version;
	count_fn get_count;
	char version[80];
	unsigned int count = 0, i;
	Dl_info info;

	if (nvml == NULL) {
		fprintf(stderr, "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. "
				"Please make sure that the NVIDIA Display Driver is properly installed and present in your system.\n");
		return 12;
	}
	init = (init_fn)dlsym(nvml, "nvmlInit_v2");
	get_version = (version_fn)dlsym(nvml, "nvmlSystemGetDriverVersion");
	get_count = (count_fn)dlsym(nvml, "nvmlDeviceGetCount_v2");
	if (init == NULL || get_version == NULL || get_count == NULL || init() != 0 ||
	    get_version(version, sizeof(version)) != 0 || get_count(&count) != 0) {
		fprintf(stderr, "Failed to initialize NVML: Unknown Error\n");
		return 255;
	}
	if (argc > 1 && strcmp(argv[1], "-L") == 0) {
		for (i = 0; i < count; i++)
			printf("GPU %u: Warden stand-in GPU (UUID: GPU-warden-fake-%s-%u)\n", i, version, i);
		return 0;
	}
	if (argc > 1 && strcmp(argv[1], "--query-gpu=driver_version") == 0) {
		for (i = 0; i < count; i++)
			printf("%s\n", version);
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "stand-in nvidia-smi: unsupported arguments\n");
		return 2;
	}
	if (dladdr((void *)get_version, &info) == 0 || info.dli_fname == NULL)
		info.dli_fname = "?";
	printf("Driver Version: %s\n", version);
	printf("NVML: %s\n", info.dli_fname);
	printf("GPUs: %u\n", count);
	return 0;
}
