/*
 * pam_warden_filter.c - a PAM session module for the workers' sshd
 * (spec.workerSsh; images/worker/pam-sshd): an ordinary user's SSH session on
 * a worker runs under the seccomp filter of ordinary users' job steps
 * (job_filter.h: no new namespaces, no mounts, no bpf, perf_event_open or
 * io_uring), so that every process a user starts on a worker does, whether
 * Slurm or sshd started it.
 *
 * sshd opens the PAM session in its privileged process, as root with the
 * container's capabilities, before it forks the process that becomes the user
 * and runs the session: the filter installed here stays on every process of
 * the session (a filter is never removed, across fork, execve and setuid), and
 * needs no no_new_privs (job_filter_install.c), so setuid programs in the jail
 * keep working, filtered. The privileged process itself, which only waits on
 * the session and cleans up after it, makes none of the calls the filter
 * refuses. root's sessions are not filtered, as root's job steps are not.
 * Any failure refuses the session: never an unfiltered one.
 */
#define _GNU_SOURCE
#define PAM_SM_SESSION

#include <pwd.h>
#include <stddef.h>
#include <syslog.h>

#include <security/pam_ext.h>
#include <security/pam_modules.h>
#include <security/pam_modutil.h>

#include "job_filter.h"

PAM_EXTERN int pam_sm_open_session(pam_handle_t *pamh, int flags, int argc,
				   const char **argv)
{
	const char *user = NULL;
	const struct passwd *pw;
	char err[256] = "", note[256] = "";

	(void)flags;
	(void)argc;
	(void)argv;
	if (pam_get_user(pamh, &user, NULL) != PAM_SUCCESS || !user) {
		pam_syslog(pamh, LOG_ERR, "no user");
		return PAM_SESSION_ERR;
	}
	pw = pam_modutil_getpwnam(pamh, user);
	if (!pw) {
		pam_syslog(pamh, LOG_ERR, "%s does not resolve", user);
		return PAM_SESSION_ERR;
	}
	if (pw->pw_uid == 0)
		return PAM_IGNORE;
	if (job_filter_install(err, sizeof(err), note, sizeof(note)) < 0) {
		pam_syslog(pamh, LOG_ERR,
			   "cannot install the seccomp filter for %s: %s",
			   user, err);
		return PAM_SESSION_ERR;
	}
	if (note[0])
		pam_syslog(pamh, LOG_NOTICE, "%s", note);
	return PAM_SUCCESS;
}

PAM_EXTERN int pam_sm_close_session(pam_handle_t *pamh, int flags, int argc,
				    const char **argv)
{
	(void)pamh;
	(void)flags;
	(void)argc;
	(void)argv;
	return PAM_SUCCESS;
}
