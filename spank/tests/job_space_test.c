/*
 * job_space_test.c - job_space_io.c against the kernel, as root under
 * `unshare -m` (make test-job-space): a job's tmpfs is mounted once with its
 * size, shared by a second step of the job, gone with all it held after the
 * teardown; a base that is a symlink is refused; RLIMIT_NPROC stops fork.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "job_space.h"
#include "tap.h"

static char base[256];

static unsigned long long fs_size(const char *path)
{
	struct statvfs sv;

	if (statvfs(path, &sv) < 0)
		return 0;
	return (unsigned long long)sv.f_blocks * sv.f_frsize;
}

static struct job_space_config two_spaces(void)
{
	struct job_space_config js;

	memset(&js, 0, sizeof(js));
	js.nspaces = 2;
	snprintf(js.spaces[0].dst, sizeof(js.spaces[0].dst), "/tmp");
	js.spaces[0].max_bytes = 1ULL << 20;
	snprintf(js.spaces[1].dst, sizeof(js.spaces[1].dst), "/dev/shm");
	return js;
}

static void lifecycle(void)
{
	struct job_space_config js = two_spaces();
	char err[JAIL_ERR_MAX] = "";
	char dir0[512], dir1[512], file[600];
	struct stat st;
	int fd;

	snprintf(dir0, sizeof(dir0), "%s/42/0", base);
	snprintf(dir1, sizeof(dir1), "%s/42/1", base);
	snprintf(file, sizeof(file), "%s/left-over", dir0);
	ok(job_space_setup(&js, base, 42, 256, err, sizeof(err)) == 0,
	   "first step mounts the job's tmpfs (%s)", err);
	ok(fs_size(dir0) == 1ULL << 20 && fs_size(dir1) == 1ULL << 20,
	   "one tmpfs for both, capped by jobtmpfs= size: %llu",
	   fs_size(dir0));
	ok(stat(dir0, &st) == 0 && (st.st_mode & 07777) == 01777 &&
	   stat(dir1, &st) == 0 && (st.st_mode & 07777) == 01777,
	   "its directories are 1777");
	ok(stat(base, &st) == 0 && (st.st_mode & 07777) == 0700 &&
	   st.st_uid == 0, "the base is root's, 0700");
	fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ok(fd >= 0 && write(fd, "x", 1) == 1 && close(fd) == 0,
	   "a step writes a file");
	ok(job_space_setup(&js, base, 42, 256, err, sizeof(err)) == 0,
	   "a second step of the job (%s)", err);
	ok(access(file, F_OK) == 0, "sees the same tmpfs");
	js.spaces[0].max_bytes = 0;
	ok(job_space_setup(&js, base, 43, 256, err, sizeof(err)) == 0,
	   "another job (%s)", err);
	snprintf(file, sizeof(file), "%s/43/0/left-over", base);
	ok(access(file, F_OK) < 0 && errno == ENOENT,
	   "has a tmpfs of its own");
	snprintf(file, sizeof(file), "%s/43/1", base);
	ok(fs_size(file) == 192ULL << 20, "the job's memory less 64 MiB: %llu",
	   fs_size(file));
	ok(job_space_teardown(base, 42, err, sizeof(err)) == 0,
	   "the epilog tears it down (%s)", err);
	snprintf(file, sizeof(file), "%s/42", base);
	ok(access(file, F_OK) < 0 && errno == ENOENT,
	   "the job's directory is gone, with what it held");
	ok(job_space_teardown(base, 42, err, sizeof(err)) == 0,
	   "a second teardown has nothing to do (%s)", err);
	ok(job_space_teardown(base, 43, err, sizeof(err)) == 0 &&
	   access(base, F_OK) == 0, "the other job's goes too (%s)", err);
}

static void symlink_base(void)
{
	struct job_space_config js = two_spaces();
	char err[JAIL_ERR_MAX] = "";
	char link[300];

	snprintf(link, sizeof(link), "%s-link", base);
	if (symlink("/tmp", link) < 0)
		die("symlink");
	ok(job_space_setup(&js, link, 7, 0, err, sizeof(err)) < 0 &&
	   strstr(err, "not a directory") != NULL,
	   "a base that is a symlink is refused (%s)", err);
	(void)unlink(link);
}

static void nproc_limit(void)
{
	char err[JAIL_ERR_MAX] = "";
	pid_t kids[16];
	int n = 0, eagain = 0;

	ok(job_space_limit_procs(4, err, sizeof(err)) == 0,
	   "RLIMIT_NPROC set (%s)", err);
	if (setgid(65534) < 0 || setuid(65534) < 0)
		die("setuid");
	while (n < 16) {
		pid_t pid = fork();

		if (pid == 0) {
			pause();
			_exit(0);
		}
		if (pid < 0) {
			eagain = errno == EAGAIN;
			break;
		}
		kids[n++] = pid;
	}
	ok(eagain && n <= 4, "fork fails with EAGAIN past the limit "
	   "(%d forked)", n);
	while (n > 0) {
		(void)kill(kids[--n], SIGKILL);
		(void)waitpid(kids[n], NULL, 0);
	}
}

int main(void)
{
	if (geteuid() != 0) {
		printf("# skipped: needs root\n");
		return 0;
	}
	snprintf(base, sizeof(base), "/tmp/warden-jobs-XXXXXX");
	if (!mkdtemp(base))
		die("mkdtemp");
	if (rmdir(base) < 0)
		die("rmdir");
	scenario("a job's tmpfs", lifecycle);
	scenario("a symlink base", symlink_base);
	scenario("nproc", nproc_limit);
	{
		char lock[300];

		snprintf(lock, sizeof(lock), "%s/.lock", base);
		(void)unlink(lock);
		(void)rmdir(base);
	}
	printf("%s\n", failures ? "FAILED" : "PASSED");
	return failures ? 1 : 0;
}
