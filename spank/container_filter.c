/*
 * container_filter.c - linked into enroot-switchroot (images/container-runtime/Dockerfile): the
 * job step's seccomp filter (spank/job_filter.h) for the first program of every container enroot
 * starts, installed after enroot has set the container up (its namespaces, mounts, pivot_root) and
 * just before enroot-switchroot execs the image's shell with its start-up file (/etc/rc, then
 * /etc/rc.local and the entrypoint or command). Those are the image's, that is the user's, choice and
 * would otherwise run unfiltered in the user namespace enroot made. The process holds CAP_SYS_ADMIN in
 * that namespace, so the filter goes on without no_new_privs when it can (job_filter_install says so
 * otherwise). A filter that cannot be installed stops the container: the image's code never runs
 * unfiltered.
 */
#include <err.h>
#include <stdlib.h>

#include "job_filter.h"

void warden_container_filter(void);

void warden_container_filter(void)
{
	char e[512];
	char note[512];

	if (job_filter_install(e, sizeof(e), note, sizeof(note)) < 0)
		errx(EXIT_FAILURE, "warden: cannot install the job step's seccomp filter in the container: %s", e);
}
