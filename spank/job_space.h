/*
 * job_space.h - each job's own /tmp and /dev/shm, and a process limit.
 *
 * Arguments of the spank_jail plugin (README.md, "Job space"):
 *
 *   jobtmpfs=DST[:SIZE]  the job gets a directory of its own at DST in the
 *                        jail (every step and task of the job on a node sees
 *                        the same one), on the job's tmpfs, which every
 *                        jobtmpfs= shares: its size is the job's memory on the
 *                        node less JOB_SPACE_RESERVE_MIB (at most half of it),
 *                        and at most the smallest SIZE given (bytes; suffix k,
 *                        m, g or t: binary multiples); unmounted when the job
 *                        ends.
 *   nproc=N              the soft and hard RLIMIT_NPROC of every task of an
 *                        ordinary user's step (0: leave it as it is).
 *
 * A job's tmpfs is mounted at BASE/<jobid> in the worker container (BASE is
 * JOB_SPACE_BASE: root's, mode 0700; the tmpfs root 0700 too) by the first
 * step of the job on the node (slurmstepd, as root, under a lock); each
 * jobtmpfs= is its directory BASE/<jobid>/<n> (1777), bound at DST into the
 * jail view of slurmstepd and of every task like a `bind=`. The job's epilog
 * (slurm_spank_job_epilog) unmounts and removes it. tmpfs pages are charged
 * to the memory cgroup of the step that writes them, so a job that fills its
 * space fails itself (ENOSPC, or its memory limit), never the pod. One tmpfs
 * for all, smaller than the job's memory: the pages stay charged to the job
 * until the epilog, so the job's slurmstepd, in the same memory cgroup, must
 * still find room to end the job once the space is full.
 *
 * The pure part (job_space.c: parsing, sizes, paths, the binds added to a
 * jail config) is unit-tested through cffi (tests/unit/test_job_space.py);
 * the mounts (job_space_io.c) are exercised by `make test-job-space` as root
 * and by the dataplane tier (tests/dataplane/test_job_space.py).
 */
#ifndef WARDEN_JOB_SPACE_H
#define WARDEN_JOB_SPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jail_helpers.h"

/* Where jobs' tmpfs are mounted in the worker container. */
#define JOB_SPACE_BASE "/run/warden/jobs"
/* Memory of a job kept from its tmpfs for slurmstepd (at most half the job's). */
#define JOB_SPACE_RESERVE_MIB 64
/* Most jobtmpfs= arguments. */
#define JOB_SPACE_MAX 8

struct job_space {
	char dst[JAIL_PATH_MAX];    /* normalised absolute path in the jail */
	unsigned long long max_bytes; /* 0: no cap beyond the job's memory */
};

struct job_space_config {
	size_t nspaces;
	struct job_space spaces[JOB_SPACE_MAX];
	unsigned long nproc; /* 0: no limit set by the plugin */
};

/*
 * Take this file's arguments (jobtmpfs=, nproc=) out of argv: they are
 * parsed into *js (zeroed first); every other argument is copied, in order,
 * into rest[] (borrowed pointers; rest has room for argc entries) and
 * counted in *nrest, for jail_config_parse. Fails on a malformed value, a
 * DST given twice, a DST of "/", or more than JOB_SPACE_MAX jobtmpfs=.
 */
int job_space_split_args(int argc, char *const argv[],
			 struct job_space_config *js, char **rest, int *nrest,
			 char *err, size_t errlen);

/*
 * Parse every plugin argument: job_space_split_args into *js, the rest with
 * jail_config_parse into *cfg (which must be zeroed or fresh from
 * jail_config_new; freeable with jail_config_clear also on failure), then
 * refuse a jobtmpfs= destination that is also a bind= destination.
 */
int job_space_config_parse(struct jail_config *cfg,
			   struct job_space_config *js, int argc,
			   char *const argv[], char *err, size_t errlen);

/*
 * A size: decimal digits with an optional suffix k, m, g or t (either case;
 * binary multiples, as tmpfs reads them). Fails on anything else, on zero
 * and on overflow.
 */
int job_space_parse_size(const char *text, unsigned long long *out,
			 char *err, size_t errlen);

/*
 * The size of a job's tmpfs: the job's memory on the node (`job_mem_mib`,
 * Slurm's S_JOB_ALLOC_MEM, in MiB) less JOB_SPACE_RESERVE_MIB (at most half
 * of it), and at most the smallest max_bytes of js's spaces; 0 (the kernel's
 * default then: half the machine's memory) when nothing bounds it.
 */
unsigned long long job_space_size(const struct job_space_config *js,
				  uint64_t job_mem_mib);

/* "mode=0700,size=N" (or "mode=0700" for size 0): the tmpfs mount data. */
int job_space_mount_data(unsigned long long size, char *out, size_t outlen,
			 char *err, size_t errlen);

/* BASE/<jobid>: where the job's tmpfs is mounted. */
int job_space_job_dir(const char *base, uint32_t jobid, char *out,
		      size_t outlen, char *err, size_t errlen);

/* BASE/<jobid>/<index>: the index-th jobtmpfs= directory on it. */
int job_space_dir(const char *base, uint32_t jobid, size_t index, char *out,
		  size_t outlen, char *err, size_t errlen);

/*
 * Add to cfg one bind per job space: SRC is job_space_dir(base, jobid, i),
 * DST the space's. Fails (cfg unchanged) when a DST is already bound by a
 * `bind=` or the binds would exceed JAIL_MAX_BINDS.
 */
int job_space_add_binds(struct jail_config *cfg,
			const struct job_space_config *js, const char *base,
			uint32_t jobid, char *err, size_t errlen);

/* --- job_space_io.c: needs root (mount, umount2, setrlimit) ---------------- */

/*
 * Mount the job's tmpfs (job_space_size) at base/<jobid>, unless a step of
 * the job on this node already did, and make its directories (1777); under an
 * flock on base/.lock, so steps starting together make it once. base is made
 * root's, 0700; refuses a base that is a symlink or not root's.
 */
int job_space_setup(const struct job_space_config *js, const char *base,
		    uint32_t jobid, uint64_t job_mem_mib, char *err,
		    size_t errlen);

/*
 * The end of the job: detach the job's tmpfs (and anything stacked on
 * base/<jobid>) and remove the directory. Nothing to do when base/<jobid>
 * does not exist. Under the same lock.
 */
int job_space_teardown(const char *base, uint32_t jobid, char *err,
		       size_t errlen);

/*
 * Lower the calling process's RLIMIT_NPROC (soft and hard) to n; a lower
 * hard limit already there stays. n == 0: nothing.
 */
int job_space_limit_procs(unsigned long n, char *err, size_t errlen);

#endif /* WARDEN_JOB_SPACE_H */
