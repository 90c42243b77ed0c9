/*
 * job_filter_install.c - install the job step's seccomp filter (job_filter.h)
 * in the calling process.
 *
 * Why not PR_SET_NO_NEW_PRIVS: the plugin installs the filter in
 * slurm_spank_task_init_privileged, still root with the container's
 * capabilities (CAP_SYS_ADMIN among them: entering the jail needed it), and
 * the kernel lets a task with CAP_SYS_ADMIN install a filter without
 * no_new_privs. Setting it would stop setuid and file-capability programs in
 * the jail (sudo, su, ping, passwd) from gaining anything, for the whole
 * job step. The filter stays on those programs too: a filter is never
 * removed, across execve and setuid alike.
 *
 * Without CAP_SYS_ADMIN the kernel refuses (EACCES) unless no_new_privs is
 * set. The step is then still filtered: no_new_privs is set, the filter
 * installed, and the caller gets a note to log. Every other failure fails.
 *
 * SECCOMP_FILTER_FLAG_SPEC_ALLOW: without it, kernels before 5.16 (whose
 * spec_store_bypass_disable and spectre_v2_user default to "seccomp") turn
 * on speculation mitigations for every filtered task, slowing down compute
 * jobs; the task had none before the filter. Kernels before 4.17 do not know
 * the flag (EINVAL): then it goes without.
 */
#define _GNU_SOURCE
#include "job_filter.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/seccomp.h>

#include "jail_helpers.h"

#ifndef SECCOMP_FILTER_FLAG_SPEC_ALLOW
#define SECCOMP_FILTER_FLAG_SPEC_ALLOW (1UL << 2)
#endif

int job_filter_install_raw(bool *nnp, const char **what)
{
	struct sock_filter insns[JOB_FILTER_MAX_INSNS];
	struct sock_fprog prog;
	unsigned long flags = SECCOMP_FILTER_FLAG_SPEC_ALLOW;
	int n;

	*nnp = false;
	*what = "build the filter";
	n = job_filter_build(job_filter_native_arch(), insns,
			     JOB_FILTER_MAX_INSNS, NULL, 0);
	if (n < 0)
		return ENOEXEC;
	prog.len = (unsigned short)n;
	prog.filter = insns;

	for (;;) {
		*what = flags ? "seccomp(SECCOMP_SET_MODE_FILTER, SPEC_ALLOW)" :
				"seccomp(SECCOMP_SET_MODE_FILTER, 0)";
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags,
			    &prog) == 0)
			return 0;
		if (errno == EINVAL && (flags & SECCOMP_FILTER_FLAG_SPEC_ALLOW)) {
			flags &= ~SECCOMP_FILTER_FLAG_SPEC_ALLOW;
			continue;
		}
		if (errno == EACCES && !*nnp) {
			*what = "prctl(PR_SET_NO_NEW_PRIVS)";
			if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
				return errno;
			*nnp = true;
			continue;
		}
		return errno;
	}
}

int job_filter_install(char *err, size_t errlen, char *note, size_t notelen)
{
	struct sock_filter insns[JOB_FILTER_MAX_INSNS];
	const char *what;
	bool nnp;
	int e;

	if (note && notelen > 0)
		note[0] = '\0';
	/* an architecture the filter does not know: say which */
	if (job_filter_build(job_filter_native_arch(), insns,
			     JOB_FILTER_MAX_INSNS, err, errlen) < 0)
		return -1;
	e = job_filter_install_raw(&nnp, &what);
	if (nnp && note && notelen > 0)
		(void)snprintf(note, notelen,
			       "no CAP_SYS_ADMIN to install the seccomp filter "
			       "alone: no_new_privs is set, setuid programs "
			       "gain nothing in this step");
	if (e != 0)
		return jail_fail(err, errlen, "%s: %s", what, strerror(e));
	return 0;
}
