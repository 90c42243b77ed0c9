/*
 * job_space_io.c - the mounts of each job's own tmpfs and the process limit
 * (job_space.h). Runs as root: in slurmstepd (setup, the limit in each task)
 * and in slurmd's `slurmstepd spank epilog` (teardown), all in the worker
 * container's own mount namespace. Every path here lies below JOB_SPACE_BASE,
 * which is root's and 0700: no user can put anything there.
 */
#define _GNU_SOURCE
#include "job_space.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* Make `path` a directory of root's with `mode`, or check the one there. */
static int root_dir(const char *path, mode_t mode, char *err, size_t errlen)
{
	struct stat st;

	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return jail_fail(err, errlen, "mkdir '%s': %s", path,
				 strerror(errno));
	if (lstat(path, &st) < 0)
		return jail_fail(err, errlen, "stat '%s': %s", path,
				 strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return jail_fail(err, errlen, "'%s' is not a directory", path);
	if (st.st_uid != 0)
		return jail_fail(err, errlen, "'%s' is not root's (uid %u)",
				 path, (unsigned int)st.st_uid);
	if ((st.st_mode & 07777) != mode && chmod(path, mode) < 0)
		return jail_fail(err, errlen, "chmod '%s': %s", path,
				 strerror(errno));
	return 0;
}

/* base's parent (0755), then base itself (0700). */
static int make_base(const char *base, char *err, size_t errlen)
{
	char parent[JAIL_PATH_MAX];
	const char *slash = strrchr(base, '/');
	size_t n = slash ? (size_t)(slash - base) : 0;

	if (n > 0 && n < sizeof(parent)) {
		struct stat st;

		memcpy(parent, base, n);
		parent[n] = '\0';
		if (lstat(parent, &st) < 0 &&
		    (errno != ENOENT || mkdir(parent, 0755) < 0))
			return jail_fail(err, errlen, "mkdir '%s': %s", parent,
					 strerror(errno));
	}
	return root_dir(base, 0700, err, errlen);
}

/* An flock on base/.lock, held until the descriptor is closed; -1 on error. */
static int lock_base(const char *base, char *err, size_t errlen)
{
	char path[JAIL_PATH_MAX];
	int fd, n;

	n = snprintf(path, sizeof(path), "%s/.lock", base);
	if (n < 0 || (size_t)n >= sizeof(path))
		return jail_fail(err, errlen, "lock path is too long");
	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return jail_fail(err, errlen, "open '%s': %s", path,
				 strerror(errno));
	while (flock(fd, LOCK_EX) < 0) {
		if (errno == EINTR)
			continue;
		jail_fail(err, errlen, "flock '%s': %s", path, strerror(errno));
		(void)close(fd);
		return -1;
	}
	return fd;
}

static int unlock_base(int fd, int rc, char *err, size_t errlen)
{
	if (close(fd) < 0 && rc == 0)
		return jail_fail(err, errlen, "close the lock: %s",
				 strerror(errno));
	return rc;
}

/* Mount the job's tmpfs at `jobdir` unless it is there already. */
static int mount_job(const char *jobdir, dev_t basedev, uint32_t jobid,
		     unsigned long long size, char *err, size_t errlen)
{
	char data[64];
	char source[64];
	struct stat st;

	if (root_dir(jobdir, 0700, err, errlen) < 0)
		return -1;
	if (lstat(jobdir, &st) < 0)
		return jail_fail(err, errlen, "stat '%s': %s", jobdir,
				 strerror(errno));
	if (st.st_dev != basedev)
		return 0; /* another step of the job mounted it */
	if (job_space_mount_data(size, data, sizeof(data), err, errlen) < 0)
		return -1;
	(void)snprintf(source, sizeof(source), "warden-job-%" PRIu32, jobid);
	if (mount(source, jobdir, "tmpfs", MS_NOSUID | MS_NODEV, data) < 0)
		return jail_fail(err, errlen, "mount tmpfs (%s) on '%s': %s",
				 data, jobdir, strerror(errno));
	return 0;
}

/* A jobtmpfs= directory on the job's tmpfs: root's, 1777. */
static int space_dir(const char *dir, char *err, size_t errlen)
{
	struct stat st;

	if (mkdir(dir, 01777) < 0 && errno != EEXIST)
		return jail_fail(err, errlen, "mkdir '%s': %s", dir,
				 strerror(errno));
	if (lstat(dir, &st) < 0)
		return jail_fail(err, errlen, "stat '%s': %s", dir,
				 strerror(errno));
	if (!S_ISDIR(st.st_mode) || st.st_uid != 0)
		return jail_fail(err, errlen, "'%s' is not root's directory",
				 dir);
	if ((st.st_mode & 07777) != 01777 && chmod(dir, 01777) < 0)
		return jail_fail(err, errlen, "chmod '%s': %s", dir,
				 strerror(errno));
	return 0;
}

int job_space_setup(const struct job_space_config *js, const char *base,
		    uint32_t jobid, uint64_t job_mem_mib, char *err,
		    size_t errlen)
{
	char jobdir[JAIL_PATH_MAX];
	char dir[JAIL_PATH_MAX];
	struct stat st;
	size_t i;
	int lock, rc = -1;

	if (js->nspaces == 0)
		return 0;
	if (make_base(base, err, errlen) < 0)
		return -1;
	lock = lock_base(base, err, errlen);
	if (lock < 0)
		return -1;
	if (lstat(base, &st) < 0) {
		jail_fail(err, errlen, "stat '%s': %s", base, strerror(errno));
		goto out;
	}
	if (job_space_job_dir(base, jobid, jobdir, sizeof(jobdir), err,
			      errlen) < 0 ||
	    mount_job(jobdir, st.st_dev, jobid,
		      job_space_size(js, job_mem_mib), err, errlen) < 0)
		goto out;
	for (i = 0; i < js->nspaces; i++) {
		if (job_space_dir(base, jobid, i, dir, sizeof(dir), err,
				  errlen) < 0 ||
		    space_dir(dir, err, errlen) < 0)
			goto out;
	}
	rc = 0;
out:
	return unlock_base(lock, rc, err, errlen);
}

int job_space_teardown(const char *base, uint32_t jobid, char *err,
		       size_t errlen)
{
	char jobdir[JAIL_PATH_MAX];
	struct stat st;
	int i, lock, rc = 0;

	if (lstat(base, &st) < 0) {
		if (errno == ENOENT)
			return 0; /* no job ever had a space here */
		return jail_fail(err, errlen, "stat '%s': %s", base,
				 strerror(errno));
	}
	if (!S_ISDIR(st.st_mode) || st.st_uid != 0)
		return jail_fail(err, errlen, "'%s' is not root's directory",
				 base);
	if (job_space_job_dir(base, jobid, jobdir, sizeof(jobdir), err,
			      errlen) < 0)
		return -1;
	lock = lock_base(base, err, errlen);
	if (lock < 0)
		return -1;
	/* Detach every mount stacked there (one, unless something went wrong). */
	for (i = 0; i < 64; i++) {
		if (umount2(jobdir, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
			continue;
		if (errno != EINVAL && errno != ENOENT)
			rc = jail_fail(err, errlen, "unmount '%s': %s", jobdir,
				       strerror(errno));
		break; /* EINVAL: not (or no longer) a mount point */
	}
	if (rc == 0 && rmdir(jobdir) < 0 && errno != ENOENT)
		rc = jail_fail(err, errlen, "rmdir '%s': %s", jobdir,
			       strerror(errno));
	return unlock_base(lock, rc, err, errlen);
}

int job_space_limit_procs(unsigned long n, char *err, size_t errlen)
{
	struct rlimit r;

	if (n == 0)
		return 0;
	if (getrlimit(RLIMIT_NPROC, &r) < 0)
		return jail_fail(err, errlen, "getrlimit(RLIMIT_NPROC): %s",
				 strerror(errno));
	if (r.rlim_max != RLIM_INFINITY && r.rlim_max < (rlim_t)n)
		n = (unsigned long)r.rlim_max;
	r.rlim_cur = r.rlim_max = (rlim_t)n;
	if (setrlimit(RLIMIT_NPROC, &r) < 0)
		return jail_fail(err, errlen, "setrlimit(RLIMIT_NPROC, %lu): %s",
				 n, strerror(errno));
	return 0;
}
