/* cudacount: the smallest CUDA driver call. It dlopens libcuda.so.1 as
 * every CUDA program does, calls cuInit(0) and cuDeviceGetCount, and prints
 * "cuDeviceGetCount: N". Built on the preparing machine
 * (scripts/gpu-container-check.sh prepare) against glibc only, with no
 * CUDA headers: the two entry points are declared here as the driver API
 * defines them. */
#include <dlfcn.h>
#include <stdio.h>

typedef int (*cuInit_t)(unsigned int);
typedef int (*cuDeviceGetCount_t)(int *);

int main(void) {
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
		return 2;
	}
	cuInit_t cuInit = (cuInit_t)dlsym(h, "cuInit");
	cuDeviceGetCount_t count = (cuDeviceGetCount_t)dlsym(h, "cuDeviceGetCount");
	if (!cuInit || !count) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 2;
	}
	int rc = cuInit(0);
	if (rc != 0) {
		fprintf(stderr, "cuInit: CUresult %d\n", rc);
		return 3;
	}
	int n = -1;
	rc = count(&n);
	if (rc != 0) {
		fprintf(stderr, "cuDeviceGetCount: CUresult %d\n", rc);
		return 3;
	}
	printf("cuDeviceGetCount: %d\n", n);
	return 0;
}
