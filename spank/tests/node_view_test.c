/*
 * node_view_test.c - the view of an MPI step's files (node_view.h): the pure
 * part (which binds, which directories are trusted), then, as root under
 * `unshare -m` (make test-node-view), the real mounts: the calling thread
 * alone sees the job's own directory over the node's, a file it opens there
 * lands on the job's tmpfs, the way back restores the node's view, and a
 * destination reached through a link, or through a directory a user could
 * change, is refused with nothing mounted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node_view.h"
#include "tap.h"

static char top[64], base[128], node_tmp[128], node_shm[128];

static bool exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

static struct job_space_config spaces(const char *a, const char *b)
{
	struct job_space_config js;

	memset(&js, 0, sizeof(js));
	snprintf(js.spaces[js.nspaces++].dst, sizeof(js.spaces[0].dst), "%s",
		 a);
	if (b)
		snprintf(js.spaces[js.nspaces++].dst, sizeof(js.spaces[0].dst),
			 "%s", b);
	return js;
}

static void pure(void)
{
	struct job_space_config js = spaces("/tmp", "/dev/shm");
	struct node_view_bind b[2];
	char err[JAIL_ERR_MAX] = "";

	ok(node_view_binds(&js, "/run/warden/jobs", 42, b, 2, err,
			   sizeof(err)) == 2 &&
	   strcmp(b[0].src, "/run/warden/jobs/42/0") == 0 &&
	   strcmp(b[0].dst, "/tmp") == 0 &&
	   strcmp(b[1].src, "/run/warden/jobs/42/1") == 0 &&
	   strcmp(b[1].dst, "/dev/shm") == 0,
	   "one bind per job space, the job's directory over the same path");
	ok(node_view_binds(&js, "/run/warden/jobs", 42, b, 1, err,
			   sizeof(err)) < 0 && strstr(err, "room for 1"),
	   "too little room fails (%s)", err);
	js.nspaces = 0;
	ok(node_view_binds(&js, "/run/warden/jobs", 42, b, 2, err,
			   sizeof(err)) == 0, "no job spaces: no binds");
	ok(node_view_untrusted(0, S_IFDIR | 0755, false) == NULL &&
	   node_view_untrusted(0, S_IFDIR | 0700, true) == NULL,
	   "root's directories are trusted");
	ok(node_view_untrusted(0, S_IFDIR | 01777, false) == NULL,
	   "so is a sticky one on the way (/tmp)");
	ok(node_view_untrusted(0, S_IFDIR | 01777, true) == NULL &&
	   node_view_untrusted(0, S_IFDIR | 0777, true) == NULL,
	   "the one mounted on may be anyone's to write in");
	ok(node_view_untrusted(0, S_IFDIR | 0777, false) != NULL &&
	   node_view_untrusted(0, S_IFDIR | 0775, false) != NULL,
	   "a writable, not sticky directory on the way is refused");
	ok(node_view_untrusted(1000, S_IFDIR | 0755, false) != NULL &&
	   node_view_untrusted(1000, S_IFDIR | 0755, true) != NULL,
	   "a user's directory is refused");
	ok(node_view_untrusted(0, S_IFLNK | 0777, true) != NULL &&
	   node_view_untrusted(0, S_IFREG | 0644, true) != NULL,
	   "a link or a file is refused");
}

/* A second thread, started before the view, looks at a path when asked. */
struct observer {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	const char *path;
	int asked, answered;
	bool sees, stop;
};

static void *observe(void *arg)
{
	struct observer *o = arg;

	pthread_mutex_lock(&o->lock);
	while (!o->stop) {
		if (o->answered < o->asked) {
			o->sees = exists(o->path);
			o->answered = o->asked;
			pthread_cond_broadcast(&o->cond);
		}
		pthread_cond_wait(&o->cond, &o->lock);
	}
	pthread_mutex_unlock(&o->lock);
	return NULL;
}

static bool other_thread_sees(struct observer *o, const char *path)
{
	pthread_mutex_lock(&o->lock);
	o->path = path;
	o->asked++;
	pthread_cond_broadcast(&o->cond);
	while (o->answered < o->asked)
		pthread_cond_wait(&o->cond, &o->lock);
	pthread_mutex_unlock(&o->lock);
	return o->sees;
}

static ino_t mntns(void)
{
	struct stat st;

	if (stat("/proc/thread-self/ns/mnt", &st) < 0)
		die("stat /proc/thread-self/ns/mnt");
	return st.st_ino;
}

static void view(void)
{
	char missing[160], out[192], on_tmpfs[JAIL_PATH_MAX + 8], cwd[256];
	char err[JAIL_ERR_MAX];
	char note[JAIL_ERR_MAX];
	struct observer o = { PTHREAD_MUTEX_INITIALIZER,
			      PTHREAD_COND_INITIALIZER, NULL, 0, 0, false,
			      false };
	struct jail_return back = JAIL_RETURN_NONE;
	struct job_space_config js;
	struct node_view_bind b[3];
	struct stat st, src;
	ino_t before = mntns();
	pthread_t thr;
	int n, fd, rc;

	snprintf(missing, sizeof(missing), "%s/node/scratch", top);
	js = spaces(node_tmp, node_shm);
	snprintf(js.spaces[js.nspaces++].dst, sizeof(js.spaces[0].dst), "%s",
		 missing);
	if (job_space_setup(&js, base, 42, 256, err, sizeof(err)) < 0)
		die(err);
	n = node_view_binds(&js, base, 42, b, 3, err, sizeof(err));
	if (n != 3)
		die(err);
	snprintf(out, sizeof(out), "%s/out-0", node_tmp);
	snprintf(on_tmpfs, sizeof(on_tmpfs), "%s/out-0", b[0].src);
	if (pthread_create(&thr, NULL, observe, &o) != 0)
		die("pthread_create");
	if (chdir(top) < 0)
		die("chdir");

	rc = node_view_enter(b, (size_t)n, &back, err, sizeof(err), note,
			     sizeof(note));
	ok(rc == 0, "node_view_enter succeeds in a threaded process (%s)",
	   rc ? err : "no error");
	if (rc)
		goto out;
	ok(mntns() != before, "the calling thread has a mount namespace of "
	   "its own");
	ok(stat(node_tmp, &st) == 0 && stat(b[0].src, &src) == 0 &&
	   st.st_dev == src.st_dev && st.st_ino == src.st_ino,
	   "it sees the job's directory at the node's path");
	ok(strstr(note, missing) && strstr(note, "not in the worker container"),
	   "a destination the node lacks is skipped, and said so (%s)", note);
	ok(!exists(missing), "and not made");
	ok(getcwd(cwd, sizeof(cwd)) && strcmp(cwd, top) == 0,
	   "its working directory is kept (%s)", cwd);
	/* what slurmstepd does, as the user, for `srun --mpi=pmi2 -o /tmp/out-%t` */
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ok(fd >= 0 && write(fd, "written\n", 8) == 8 && close(fd) == 0,
	   "a per-task file opened now");
	ok(exists(on_tmpfs), "lands on the job's tmpfs");
	ok(!other_thread_sees(&o, out) && other_thread_sees(&o, top),
	   "another thread of the process still sees the node's directory");
	rc = jail_view_leave(&back, err, sizeof(err));
	ok(rc == 0, "jail_view_leave returns (%s)", rc ? err : "no error");
	ok(mntns() == before && !exists(out) && exists(on_tmpfs),
	   "the thread sees the node's directory again; the file stays the "
	   "job's");
	ok(getcwd(cwd, sizeof(cwd)) && strcmp(cwd, top) == 0,
	   "and its old working directory (%s)", cwd);
out:
	pthread_mutex_lock(&o.lock);
	o.stop = true;
	pthread_cond_broadcast(&o.cond);
	pthread_mutex_unlock(&o.lock);
	pthread_join(thr, NULL);
	if (job_space_teardown(base, 42, err, sizeof(err)) < 0)
		die(err);
}

/* node_view_enter over `dst` fails naming `why`; the thread stays put. */
static void refused(const char *dst, const char *why, const char *what)
{
	struct jail_return back = JAIL_RETURN_NONE;
	struct job_space_config js = spaces(dst, NULL);
	struct node_view_bind b[1];
	char err[JAIL_ERR_MAX] = "", note[JAIL_ERR_MAX];
	ino_t before = mntns();

	if (job_space_setup(&js, base, 43, 0, err, sizeof(err)) < 0 ||
	    node_view_binds(&js, base, 43, b, 1, err, sizeof(err)) != 1)
		die(err);
	ok(node_view_enter(b, 1, &back, err, sizeof(err), note,
			   sizeof(note)) < 0 && strstr(err, why),
	   "%s is refused (%s)", what, err);
	ok(mntns() == before && back.mntns < 0,
	   "the thread is back in its namespace");
	if (job_space_teardown(base, 43, err, sizeof(err)) < 0)
		die(err);
}

static void links(void)
{
	char link[160], userdir[160], target[192], open_dir[160], below[192];

	snprintf(link, sizeof(link), "%s/node/linked", top);
	if (symlink(node_tmp, link) < 0)
		die("symlink");
	refused(link, "is a symbolic link", "a destination that is a link");
	snprintf(userdir, sizeof(userdir), "%s/node/user", top);
	snprintf(target, sizeof(target), "%s/tmp", userdir);
	if (mkdir(userdir, 0755) < 0 || mkdir(target, 0755) < 0 ||
	    chown(userdir, 65534, 65534) < 0)
		die("user's directory");
	refused(target, "is not root's", "a destination below a user's "
		"directory");
	snprintf(open_dir, sizeof(open_dir), "%s/node/open", top);
	snprintf(below, sizeof(below), "%s/tmp", open_dir);
	if (mkdir(open_dir, 0755) < 0 || chmod(open_dir, 0777) < 0 ||
	    mkdir(below, 0755) < 0)
		die("open directory");
	refused(below, "can be changed by someone other than root",
		"a destination below a directory anyone may change");
}

static void mkdir_or_die(const char *path, mode_t mode)
{
	if (mkdir(path, mode) < 0 || chmod(path, mode) < 0)
		die(path);
}

int main(int argc, char **argv)
{
	char path[160];

	scenario("the binds and the trusted directories", pure);
	/* --mounts: root, in a mount namespace of the test's own */
	if (geteuid() != 0 || argc < 2 || strcmp(argv[1], "--mounts") != 0) {
		printf("# skipped the mounts: needs root and unshare -m\n");
		printf("%s\n", failures ? "FAILED" : "PASSED");
		return failures ? 1 : 0;
	}
	snprintf(top, sizeof(top), "/tmp/warden-node-view-XXXXXX");
	if (!mkdtemp(top) || chmod(top, 0755) < 0)
		die("mkdtemp");
	snprintf(base, sizeof(base), "%s/jobs", top);
	snprintf(path, sizeof(path), "%s/node", top);
	mkdir_or_die(path, 0755);
	snprintf(node_tmp, sizeof(node_tmp), "%s/node/tmp", top);
	mkdir_or_die(node_tmp, 0755);
	snprintf(node_shm, sizeof(node_shm), "%s/node/shm", top);
	mkdir_or_die(node_shm, 0755);
	scenario("the view of an MPI step's files", view);
	scenario("links and users' directories", links);
	snprintf(path, sizeof(path), "rm -rf -- '%s'", top);
	if (system(path) != 0)
		ok(false, "remove %s", top);
	printf("%s\n", failures ? "FAILED" : "PASSED");
	return failures ? 1 : 0;
}
