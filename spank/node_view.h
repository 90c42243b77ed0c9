/*
 * node_view.h - the view of slurmstepd's main thread while it opens the files
 * of an srun step with an MPI plugin (spank/README.md, "Which process sees
 * which root").
 *
 * Such a step's MPI server starts in the window where slurmstepd opens the
 * step's files (slurm_spank_init_post_opt .. slurm_spank_user_init) and loads
 * the node's libraries and plugins by path, so the main thread cannot enter
 * the jail then. It gets this instead: a mount namespace of its own that is a
 * copy of the worker container's (no pivot_root), with each of the job's own
 * directories (jobtmpfs=, job_space.h) bound over the container's directory
 * of the same path. `srun --mpi=pmi2 -o /tmp/out-%t` then writes into the
 * job's /tmp, where every step of the job reads it and which goes with the
 * job, as it does for every other step. The homes need nothing: the worker
 * container shows the jail's /home and /root at the same paths (the worker
 * entrypoint binds them), and so does every node-local mount without perJob
 * (bind=). The way back is jail_view_leave (jail_enter.h).
 *
 * The pure part (node_view.c: which binds, which directories on their way
 * are trusted) has no system calls; `make test-node-view` checks it and the
 * mounts (node_view_io.c) as root.
 */
#ifndef WARDEN_NODE_VIEW_H
#define WARDEN_NODE_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "jail_enter.h"
#include "jail_helpers.h"
#include "job_space.h"

struct node_view_bind {
	char src[JAIL_PATH_MAX]; /* the job's directory: BASE/<jobid>/<n> */
	char dst[JAIL_PATH_MAX]; /* the same path in the worker container */
};

/*
 * Fill out[0..max) with one bind per job space of js: src is
 * job_space_dir(base, jobid, i), dst the space's destination. Returns the
 * number of binds (0 without job spaces), or -1 (with err) when max is too
 * small or a path does not fit.
 */
int node_view_binds(const struct job_space_config *js, const char *base,
		    uint32_t jobid, struct node_view_bind *out, size_t max,
		    char *err, size_t errlen);

/*
 * Whether root may mount from or onto a path through a directory of owner
 * `uid` and mode `mode` (st_mode): NULL when it may, else why not. Every
 * directory on the way must be root's, and, but for the last (the one
 * mounted from or onto, which the mount does not resolve through), writable
 * by nobody else unless it is sticky (a sticky directory's entries that are
 * root's only root can rename or remove). Anything but a directory is
 * refused.
 */
const char *node_view_untrusted(uid_t uid, mode_t mode, bool last);

/*
 * Enter the view: keep the calling thread's mount namespace and working
 * directory in `back`, unshare(CLONE_FS | CLONE_NEWNS) (the calling thread
 * alone moves), make '/' a recursive slave (nothing propagates back to the
 * node) and bind every binds[i].src over binds[i].dst, each opened one
 * component at a time from '/' with O_NOFOLLOW and checked with
 * node_view_untrusted, the mount made on the descriptors and the target
 * checked to show the source afterwards. A destination missing in the
 * container is skipped and named in `note` (files there fail as before).
 * Needs root. On failure the thread is back where it was (or err says it
 * could not return) and `back` is empty. Leave with jail_view_leave.
 */
int node_view_enter(const struct node_view_bind *binds, size_t n,
		    struct jail_return *back, char *err, size_t errlen,
		    char *note, size_t notelen);

#endif /* WARDEN_NODE_VIEW_H */
