/*
 * jail_enter.h - move the calling process into the jail (mount namespace +
 * pivot_root). Needs CAP_SYS_ADMIN; does not depend on Slurm, so a plain
 * test driver (spank/tests/jail_enter_test.c) can exercise it as root.
 */
#ifndef WARDEN_JAIL_ENTER_H
#define WARDEN_JAIL_ENTER_H

#include <stddef.h>

#include "jail_helpers.h"

/*
 * Enter the jail described by cfg, then chdir to `cwd` inside it (NULL or a
 * path missing in the jail: stay at "/" and describe why in `note`).
 *
 * Returns 0 on success. On failure returns -1 with a message naming the path
 * and strerror(errno) in err; the process may then be half-way (own mount
 * namespace, old root still reachable) and must not run the task.
 */
int jail_enter(const struct jail_config *cfg, const char *cwd,
	       char *err, size_t errlen, char *note, size_t notelen);

/*
 * The step's view: the calling *thread* works inside the jail for a while,
 * then returns. slurmstepd's main thread uses it while it opens a job step's
 * --output/--error/--input files and changes to its working directory, so
 * those paths resolve in the jail, as the user, with the user's permissions.
 *
 * unshare(CLONE_NEWNS) gives only the calling thread its own file-system
 * attributes and mount namespace; the threads the process already has
 * (slurmstepd's message and accounting threads, which authenticate) never
 * move. A thread the caller starts while in the view shares the view, and
 * keeps it after the caller has left.
 */
struct jail_return {
	int mntns; /* the thread's own mount namespace; -1: not in a view */
	int cwd;   /* its working directory before the view (O_PATH) */
};

#define JAIL_RETURN_NONE { -1, -1 }

/*
 * Enter the jail as jail_enter does, after keeping in `back` the way out:
 * the thread's mount namespace and working directory. On failure the thread
 * is back where it was (or, if even that failed, err says so) and `back` is
 * empty.
 */
int jail_view_enter(const struct jail_config *cfg, const char *cwd,
		    struct jail_return *back, char *err, size_t errlen,
		    char *note, size_t notelen);

/*
 * Return the calling thread to the namespace and working directory kept in
 * `back` (setns needs CAP_SYS_ADMIN and CAP_SYS_CHROOT: the caller's
 * effective ids must be root). Nothing to do when `back` is empty. `back`
 * is empty afterwards, also on failure.
 */
int jail_view_leave(struct jail_return *back, char *err, size_t errlen);

/*
 * Before a view is entered: keep in `back` the way out, the calling thread's
 * mount namespace and working directory. On failure err says why and `back`
 * is empty.
 */
int jail_view_keep_way_back(struct jail_return *back, char *err,
			    size_t errlen);

/*
 * A view could not be entered (err says why): back to where the thread was,
 * best effort; when even that fails err says so too. Returns -1, and `back`
 * is empty.
 */
int jail_view_abandon(struct jail_return *back, char *err, size_t errlen);

/*
 * The mount namespace of the view the calling thread is in, held open: an
 * O_CLOEXEC descriptor, or -1 with err saying why. A view's namespace goes
 * when its last thread leaves it or ends; holding it makes the holder's
 * close its end instead. slurmstepd's I/O thread, started in the view, would
 * otherwise end it on its way out, while slurmstepd moves itself out of the
 * step's cgroups: the thread is still the step's until its namespace is torn
 * down, and Slurm polls every 100 ms until it is gone. Held, the view can
 * also be entered again (jail_view_reenter) instead of being made anew.
 */
int jail_view_hold(char *err, size_t errlen);

/*
 * Enter again, as jail_view_enter does, a view of `cfg`'s jail held with
 * jail_view_hold: the calling thread gets its own file-system attributes,
 * joins the view's namespace (setns: root and working directory become the
 * view's root, checked to be the jail root `cfg` names) and changes to `cwd`
 * as jail_enter does (missing: "/", with a note). Nothing is mounted. On
 * failure the thread is back where it was, or err says it could not return,
 * and `back` is empty.
 */
int jail_view_reenter(const struct jail_config *cfg, int view, const char *cwd,
		      struct jail_return *back, char *err, size_t errlen,
		      char *note, size_t notelen);

#endif /* WARDEN_JAIL_ENTER_H */
