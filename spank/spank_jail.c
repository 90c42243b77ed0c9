/*
 * spank_jail.c - Slurm SPANK plugin that runs every task of every job step
 * inside the shared root file system (the jail).
 *
 * plugstack.conf (as Warden renders it for a worker group with node-local
 * /tmp and /dev/shm; see README.md):
 *   required /usr/lib/warden/spank_jail.so root=/mnt/jail bind=/tmp bind=/dev/shm
 *
 * Two moves, both with jail_enter.c:
 *
 * - The step's files: slurmstepd's main thread alone enters the jail while
 *   slurmstepd opens the step's --output/--error/--input files (as the
 *   user) and changes to its working directory (slurm_spank_init_post_opt
 *   .. slurm_spank_user_init), and again while it waits for its tasks, so
 *   the task epilogs it forks run in the jail (the last
 *   slurm_spank_task_post_fork .. the last slurm_spank_task_exit). srun
 *   steps with an MPI plugin, whose server starts in the first window and
 *   must load the node's libraries, open their files in the worker
 *   container instead, with the job's own directories (jobtmpfs=) bound over
 *   the container's (node_view.h). Its other threads never move; never for
 *   the extern step.
 * - Every task (slurm_spank_task_init_privileged): once per task, in the
 *   forked child, still root, before slurmstepd drops to the user and execs.
 *   Then, unless the job is root's (or `seccomp=off`), the task gets the
 *   seccomp filter of job_filter.h: no new namespaces, mounts, bpf or
 *   perf_event_open for ordinary users. With `containers=on` the filter comes
 *   later, in slurm_spank_task_init, once pyxis has set up the step's
 *   container (see there).
 * - Every process slurmstepd's main thread forks while it waits for the
 *   tasks (the task epilogs; see filter_forked_child): the same filter, in
 *   the forked child, for the same jobs.
 *
 * See README.md ("Which process sees which root") for why, and for the
 * arguments and messages.
 */
#define _GNU_SOURCE
#include <slurm/slurm.h>
#include <slurm/spank.h>

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jail_enter.h"
#include "jail_helpers.h"
#include "job_filter.h"
#include "job_space.h"
#include "node_view.h"

SPANK_PLUGIN(spank_jail, 1);

#define LOG_PREFIX "spank_jail: "

/*
 * The only state of the plugin, in slurmstepd (S_CTX_REMOTE): the
 * configuration parsed by slurm_spank_init (read by the later callbacks,
 * freed by slurm_spank_exit) and, while slurmstepd's main thread works in the
 * jail, its way back. SPANK offers no per-plugin context pointer, so one
 * static is needed to carry them between callbacks.
 */
static struct {
	struct jail_config *cfg;
	struct jail_return back;
	uint32_t tasks_running; /* while waiting for the tasks: not yet exited */
	bool workdir_set; /* PYXIS_CONTAINER_WORKDIR is ours, for pyxis only */
	bool job_space_ready; /* the job's tmpfs is mounted, jobid is its */
	uint32_t jobid;
	int held;          /* the first window's view, held (jail_view_hold) */
	bool held_is_jail; /* ... and it is the jail's, to enter again */
} state = { NULL, JAIL_RETURN_NONE, 0, false, false, 0, -1, false };

/* jobtmpfs= and nproc= (job_space.h), parsed with the config. */
static struct job_space_config job_space;

/* Parse and validate; on failure log and return NULL. */
static struct jail_config *load_config(int ac, char **av)
{
	struct jail_config *cfg = jail_config_new();
	char err[JAIL_ERR_MAX];

	if (!cfg) {
		slurm_error(LOG_PREFIX "out of memory");
		return NULL;
	}
	if (job_space_config_parse(cfg, &job_space, ac, av, err,
				   sizeof(err)) < 0) {
		slurm_error(LOG_PREFIX "%s", err);
		jail_config_free(cfg);
		return NULL;
	}
	return cfg;
}

/*
 * containers=on: a step started in the user's home (or below it) starts its
 * container there too, as it would in the jail. pyxis starts a container in
 * the image's own working directory unless --container-workdir (or
 * PYXIS_CONTAINER_WORKDIR in the job's environment) says otherwise; it reads
 * that variable after every plugin's slurm_spank_init, and enroot mounts the
 * user's home into the container. A value the user set wins (no overwrite),
 * and so does the option. Directories outside the home are not in the
 * container, so they are left alone. The variable is for pyxis alone:
 * slurm_spank_init_post_opt (after pyxis' own) takes it out of the step's
 * environment again, or every srun in a batch script would inherit it.
 */
static void default_container_workdir(spank_t sp)
{
	char home[JAIL_PATH_MAX];
	char pwd[JAIL_PATH_MAX];
	spank_err_t rc;
	size_t n;

	if (spank_getenv(sp, "HOME", home, sizeof(home)) != ESPANK_SUCCESS ||
	    spank_getenv(sp, "PWD", pwd, sizeof(pwd)) != ESPANK_SUCCESS ||
	    home[0] != '/' || pwd[0] != '/')
		return;
	n = strlen(home);
	while (n > 1 && home[n - 1] == '/')
		n--;
	if (n <= 1 || strncmp(pwd, home, n) != 0 ||
	    (pwd[n] != '\0' && pwd[n] != '/'))
		return;
	rc = spank_setenv(sp, "PYXIS_CONTAINER_WORKDIR", pwd, 0);
	state.workdir_set = rc == ESPANK_SUCCESS;
	if (rc != ESPANK_SUCCESS && rc != ESPANK_ENV_EXISTS)
		slurm_error(LOG_PREFIX "cannot set PYXIS_CONTAINER_WORKDIR: %s",
			    spank_strerror(rc));
}

/*
 * The job's own tmpfs (jobtmpfs=, job_space.h): mounted by the job's first
 * step on this node (slurmstepd's main thread, root, in the worker container,
 * before it enters the jail for the step's files), sized by the job's memory
 * here, and bound at their places in the jail for this step like a bind=.
 * The extern step never enters the jail. Failing fails the step.
 */
static uint32_t step_id(spank_t sp);

static int job_space_prepare(spank_t sp, struct jail_config *cfg)
{
	char err[JAIL_ERR_MAX];
	uint64_t mem = 0;
	uint32_t jobid;
	spank_err_t rc;

	if (job_space.nspaces == 0 || step_id(sp) == SLURM_EXTERN_CONT)
		return 0;
	rc = spank_get_item(sp, S_JOB_ID, &jobid);
	if (rc != ESPANK_SUCCESS) {
		slurm_error(LOG_PREFIX "cannot read the job id: %s",
			    spank_strerror(rc));
		return -1;
	}
	if (spank_get_item(sp, S_JOB_ALLOC_MEM, &mem) != ESPANK_SUCCESS)
		mem = 0; /* no memory known: the jobtmpfs= size alone */
	if (job_space_setup(&job_space, JOB_SPACE_BASE, jobid, mem, err,
			    sizeof(err)) < 0 ||
	    job_space_add_binds(cfg, &job_space, JOB_SPACE_BASE, jobid, err,
				sizeof(err)) < 0) {
		slurm_error(LOG_PREFIX "job %u's own tmpfs: %s",
			    (unsigned int)jobid, err);
		return -1;
	}
	state.job_space_ready = true;
	state.jobid = jobid;
	return 0;
}

/*
 * slurmd's `slurmstepd spank epilog` (root, in the worker container) when
 * the job has ended on this node: its tmpfs go, with all they held. A failure
 * fails the epilog, and Slurm drains the node: the space is still there.
 */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	char err[JAIL_ERR_MAX];
	uint32_t jobid;
	spank_err_t rc;

	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_JOB_SCRIPT)
		return 0;
	rc = spank_get_item(sp, S_JOB_ID, &jobid);
	if (rc != ESPANK_SUCCESS) {
		slurm_error(LOG_PREFIX "epilog: cannot read the job id: %s",
			    spank_strerror(rc));
		return -1;
	}
	if (job_space_teardown(JOB_SPACE_BASE, jobid, err, sizeof(err)) < 0) {
		slurm_error(LOG_PREFIX "job %u's own tmpfs: %s",
			    (unsigned int)jobid, err);
		return -1;
	}
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	struct jail_config *cfg;

	(void)sp;
	/*
	 * srun, sbatch, salloc (login and controller pods) and prolog/epilog
	 * scripts: nothing to do, and nothing to validate either.
	 */
	if (ctx != S_CTX_REMOTE && ctx != S_CTX_SLURMD)
		return 0;

	cfg = load_config(ac, av);
	if (!cfg)
		return -1;

	if (ctx == S_CTX_SLURMD) {
		/* slurmd only validates, so bad arguments stop it at start. */
		if (cfg->disabled)
			slurm_info(LOG_PREFIX "disabled: tasks run outside the jail");
		else
			slurm_info(LOG_PREFIX "tasks will run in jail '%s' "
				   "with %zu extra bind mount(s); seccomp filter "
				   "for users' steps %s",
				   cfg->root, cfg->nbinds,
				   cfg->seccomp_off ? "off" : "on");
		if (!cfg->disabled && (job_space.nspaces || job_space.nproc))
			slurm_info(LOG_PREFIX "%zu director%s on a tmpfs of "
				   "each job's own; %lu processes per user in "
				   "a step (0: no limit)", job_space.nspaces,
				   job_space.nspaces == 1 ? "y" : "ies",
				   job_space.nproc);
		jail_config_free(cfg);
		return 0;
	}

	jail_config_free(state.cfg);
	state.cfg = cfg;
	state.job_space_ready = false;
	if (!cfg->disabled && job_space_prepare(sp, cfg) < 0)
		return -1;
	if (cfg->containers && !cfg->disabled)
		default_container_workdir(sp);
	return 0;
}

/* The step's id, or SLURM_EXTERN_CONT (nothing to do) when unreadable. */
static uint32_t step_id(spank_t sp)
{
	uint32_t stepid;
	spank_err_t rc;

	rc = spank_get_item(sp, S_JOB_STEPID, &stepid);
	if (rc != ESPANK_SUCCESS) {
		slurm_error(LOG_PREFIX "cannot read the step id: %s",
			    spank_strerror(rc));
		return SLURM_EXTERN_CONT;
	}
	return stepid;
}

/* Where slurmstepd's main thread opens a step's files. */
enum step_files {
	STEP_FILES_STAY, /* where it is: the extern step (no user files) */
	STEP_FILES_JAIL, /* in the jail */
	STEP_FILES_NODE, /* in the worker container, the job's own dirs bound */
};

/*
 * Every step's files are opened in the jail but the extern step's and those
 * of srun steps whose MPI plugin starts its server between now and the task
 * fork (it loads the node's libraries and plugins by path): in the worker
 * container, with the job's own directories over the container's
 * (node_view.h). slurmstepd has already taken SLURM_MPI_TYPE out of the
 * step's environment when it is "none".
 */
static enum step_files step_files(spank_t sp)
{
	char mpi[64];
	uint32_t stepid = step_id(sp);

	if (stepid == SLURM_EXTERN_CONT)
		return STEP_FILES_STAY;
	if (stepid == SLURM_BATCH_SCRIPT)
		return STEP_FILES_JAIL;
	if (spank_getenv(sp, "SLURM_MPI_TYPE", mpi, sizeof(mpi)) ==
	    ESPANK_SUCCESS && mpi[0] && strcmp(mpi, "none") != 0) {
		slurm_debug(LOG_PREFIX "step uses MPI plugin '%s': slurmstepd "
			    "opens its files in the worker container, with "
			    "the job's own directories", mpi);
		return STEP_FILES_NODE;
	}
	return STEP_FILES_JAIL;
}

/*
 * The first window's view, held until the end of the step (jail_enter.h,
 * jail_view_hold): the I/O thread of an srun step starts in it and would
 * otherwise tear it down on its way out, which holds slurmstepd's move out of
 * the step's cgroups for Slurm's next 100 ms check. A jail view is entered
 * again for the second window instead of being made anew. Not holding it
 * only costs time: the step goes on.
 */
static void hold_view(bool jail)
{
	char err[JAIL_ERR_MAX];

	state.held = jail_view_hold(err, sizeof(err));
	if (state.held < 0)
		slurm_error(LOG_PREFIX "%s", err);
	state.held_is_jail = jail && state.held >= 0;
}

/* The end of the step: the held view goes (the I/O thread has ended). */
static void release_view(void)
{
	int fd = state.held;

	state.held = -1;
	state.held_is_jail = false;
	if (fd >= 0 && close(fd) < 0)
		slurm_error(LOG_PREFIX "close the held view: %m");
}

/*
 * After every plugin's slurm_spank_init: slurmstepd's main thread enters the
 * jail (its other threads stay), so the step's output, error and input files
 * and its working directory resolve there. Failing here fails the step.
 */
static int enter_view(const char *what)
{
	char cwdbuf[JAIL_PATH_MAX];
	char err[JAIL_ERR_MAX];
	char note[JAIL_ERR_MAX];
	const char *cwd;
	int rc;

	if (state.back.mntns >= 0)
		return 0; /* still in the jail: nothing to do */
	/* slurmstepd's own directory (the spool), when the jail has it too. */
	cwd = getcwd(cwdbuf, sizeof(cwdbuf)) ? cwdbuf : NULL;
	if (state.held_is_jail)
		rc = jail_view_reenter(state.cfg, state.held, cwd, &state.back,
				       err, sizeof(err), note, sizeof(note));
	else
		rc = jail_view_enter(state.cfg, cwd, &state.back, err,
				     sizeof(err), note, sizeof(note));
	if (rc < 0) {
		slurm_error(LOG_PREFIX "cannot %s in jail '%s': %s", what,
			    state.cfg->root, err);
		return -1;
	}
	slurm_debug(LOG_PREFIX "slurmstepd: %s in the jail%s", what,
		    state.held_is_jail ? " (held view)" : "");
	return 0;
}

/*
 * An MPI step's files (node_view.h): slurmstepd's main thread alone gets a
 * copy of the worker container's mount table with the job's own directories
 * (jobtmpfs=) over the container's, so `-o /tmp/out-%t` lands in the job's
 * /tmp; left in slurm_spank_user_init as the jail's view is. Nothing to do
 * without job spaces: every other path is the jail's at the same place in
 * the container (the homes, the bind= mounts) or root's there. Failing
 * fails the step.
 */
static int enter_node_view(void)
{
	struct node_view_bind binds[JOB_SPACE_MAX];
	char err[JAIL_ERR_MAX];
	char note[JAIL_ERR_MAX];
	int n;

	if (state.back.mntns >= 0 || !state.job_space_ready)
		return 0;
	n = node_view_binds(&job_space, JOB_SPACE_BASE, state.jobid, binds,
			    JOB_SPACE_MAX, err, sizeof(err));
	if (n < 0 || node_view_enter(binds, (size_t)n, &state.back, err,
				     sizeof(err), note, sizeof(note)) < 0) {
		slurm_error(LOG_PREFIX "cannot open the MPI step's files with "
			    "job %u's own directories: %s",
			    (unsigned int)state.jobid, err);
		return -1;
	}
	if (note[0])
		slurm_debug(LOG_PREFIX "%s", note);
	slurm_debug(LOG_PREFIX "slurmstepd: open the step's files in the "
		    "worker container, with job %u's own directories",
		    (unsigned int)state.jobid);
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	enum step_files where;
	spank_err_t rc;

	(void)ac;
	(void)av;
	if (state.workdir_set) {
		/* pyxis, listed first, has read it (default_container_workdir) */
		state.workdir_set = false;
		rc = spank_unsetenv(sp, "PYXIS_CONTAINER_WORKDIR");
		if (rc != ESPANK_SUCCESS)
			slurm_error(LOG_PREFIX "cannot unset "
				    "PYXIS_CONTAINER_WORKDIR: %s",
				    spank_strerror(rc));
	}
	if (!spank_remote(sp) || !state.cfg || state.cfg->disabled)
		return 0;
	where = step_files(sp);
	if (where == STEP_FILES_NODE) {
		if (enter_node_view() < 0)
			return -1;
		if (state.back.mntns >= 0)
			hold_view(false);
	} else if (where == STEP_FILES_JAIL) {
		if (enter_view("open the step's files") < 0)
			return -1;
		hold_view(true);
	}
	return 0;
}

/*
 * Back to the node's namespace. slurmstepd runs slurm_spank_user_init as the
 * user (effective ids only; the real and saved uid stay root), and setns
 * needs root's capabilities: take the effective uid back for the call.
 */
static int leave_view(const char *when)
{
	char err[JAIL_ERR_MAX];
	uid_t euid = geteuid();
	int rc;

	if (state.back.mntns < 0)
		return 0;
	if (euid != 0 && seteuid(0) < 0) {
		slurm_error(LOG_PREFIX "%s: cannot become root to leave the "
			    "jail: %m", when);
		return -1;
	}
	rc = jail_view_leave(&state.back, err, sizeof(err));
	if (rc < 0)
		slurm_error(LOG_PREFIX "%s: %s", when, err);
	if (euid != 0 && seteuid(euid) < 0) {
		slurm_error(LOG_PREFIX "%s: cannot return to uid %u: %m", when,
			    (unsigned int)euid);
		rc = -1;
	}
	return rc;
}

/*
 * slurmstepd has opened the step's files and changed to its working
 * directory (as the user), and is about to fork the tasks: its main thread
 * returns to the node before anything else happens (from the jail's view, or
 * an MPI step's node view: the same way back).
 */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!spank_remote(sp))
		return 0;
	return leave_view("after opening the step's files");
}

/* The task's working directory: PWD of the job, else slurmstepd's cwd. */
static const char *task_cwd(spank_t sp, char *buf, size_t len)
{
	if (spank_getenv(sp, "PWD", buf, (int)len) == ESPANK_SUCCESS &&
	    buf[0] == '/')
		return buf;
	if (getcwd(buf, len) && buf[0] == '/')
		return buf;
	return NULL;
}

/*
 * The job step's seccomp filter (job_filter.h), for every job but root's.
 * A filter that cannot be installed fails the task: it never runs
 * unfiltered by accident.
 */
static int filter_task(spank_t sp)
{
	char err[JAIL_ERR_MAX];
	char note[JAIL_ERR_MAX];
	spank_err_t rc;
	uid_t uid;

	rc = spank_get_item(sp, S_JOB_UID, &uid);
	if (rc != ESPANK_SUCCESS) {
		slurm_error(LOG_PREFIX "cannot read the job's uid for the "
			    "seccomp filter: %s", spank_strerror(rc));
		return -1;
	}
	if (uid == 0)
		return 0;
	if (job_filter_install(err, sizeof(err), note, sizeof(note)) < 0) {
		slurm_error(LOG_PREFIX "cannot install the seccomp filter "
			    "(uid %u): %s", (unsigned int)uid, err);
		return -1;
	}
	if (note[0])
		slurm_info(LOG_PREFIX "%s", note);
	slurm_debug(LOG_PREFIX "seccomp filter installed (uid %u)",
		    (unsigned int)uid);
	return 0;
}

/*
 * The processes slurmstepd's main thread forks while it waits for the tasks:
 * the task epilogs (`srun --task-epilog`, slurm.conf's TaskEpilog), which it
 * forks with fork(2) when a task ends, before SPANK_STEP_TASK_EXIT, and runs
 * as the user (setuid, chdir, execve in the child) with no plugin hook in the
 * child; and whatever the plugins listed before this one fork in their
 * slurm_spank_task_exit (pyxis: `enroot remove` as the user). A fork handler
 * (pthread_atfork, registered once per load of the plugin: glibc drops the
 * handlers of a library when it is unloaded) installs the job filter in each
 * such child, still root with every capability (so no no_new_privs, as for
 * the tasks), before it runs anything. Only while the window is open
 * (slurm_spank_task_post_fork of the last task until the last
 * slurm_spank_task_exit), only for a fork of the thread that opened it, and
 * only for a job the filter is for. The child of a fork in a multithreaded
 * process may only make plain system calls: no logging there; if the
 * filter cannot be installed the child says so on its stderr and exits 127
 * before it runs anything (Slurm then logs `TaskEpilog failed status=127`).
 */
static struct {
	volatile sig_atomic_t on; /* filter the main thread's forks */
	pthread_t thread;         /* slurmstepd's main thread */
	bool registered;          /* pthread_atfork done in this process */
} forks;

static void filter_forked_child(void)
{
	static const char msg[] = "spank_jail: cannot install the seccomp "
		"filter in this process slurmstepd forked for the job step "
		"(a task epilog?); it does not run\n";
	const char *what;
	bool nnp;
	ssize_t w;

	if (!forks.on || !pthread_equal(pthread_self(), forks.thread))
		return;
	forks.on = 0;
	if (job_filter_install_raw(&nnp, &what) == 0)
		return;
	w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
	(void)w;
	_exit(127);
}

/* In the window, for this job: filter the main thread's forks (or not). */
static int filter_forks(spank_t sp)
{
	spank_err_t rc;
	uid_t uid;
	int e;

	if (state.cfg->seccomp_off)
		return 0;
	rc = spank_get_item(sp, S_JOB_UID, &uid);
	if (rc != ESPANK_SUCCESS) {
		slurm_error(LOG_PREFIX "cannot read the job's uid for the "
			    "seccomp filter of task epilogs: %s",
			    spank_strerror(rc));
		return -1;
	}
	if (uid == 0)
		return 0;
	if (!forks.registered) {
		e = pthread_atfork(NULL, NULL, filter_forked_child);
		if (e != 0) {
			slurm_error(LOG_PREFIX "pthread_atfork: %s: task "
				    "epilogs could run unfiltered; failing the "
				    "step", strerror(e));
			return -1;
		}
		forks.registered = true;
	}
	forks.thread = pthread_self();
	forks.on = 1;
	slurm_debug(LOG_PREFIX "task epilogs get the seccomp filter (uid %u)",
		    (unsigned int)uid);
	return 0;
}

/*
 * Once every task is forked (root, slurmstepd's main thread, after the last
 * task's post-fork): the main thread waits for the tasks in the jail, so the
 * task epilogs it forks when each task ends (`srun --task-epilog`, slurm.conf's
 * TaskEpilog) run there, as the user, like the task prolog. Its messages to
 * srun meanwhile find the auth socket, /run/slurm, in the jail too.
 */
int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
	uint32_t ntasks;
	int taskid;

	(void)ac;
	(void)av;
	if (!spank_remote(sp) || !state.cfg || state.cfg->disabled ||
	    step_id(sp) == SLURM_EXTERN_CONT)
		return 0;
	if (spank_get_item(sp, S_TASK_ID, &taskid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) !=
	    ESPANK_SUCCESS || ntasks == 0 || taskid != (int)ntasks - 1)
		return 0;
	if (enter_view("wait for the tasks") < 0)
		return -1;
	state.tasks_running = ntasks;
	return filter_forks(sp);
}

/* A task has ended and its epilogs have run: after the last, back to the node. */
int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!spank_remote(sp) || state.tasks_running == 0)
		return 0;
	if (--state.tasks_running > 0)
		return 0;
	forks.on = 0;
	return leave_view("after the step's tasks ended");
}

/* nproc= (job_space.h): RLIMIT_NPROC of an ordinary user's task. */
static int limit_procs(spank_t sp)
{
	char err[JAIL_ERR_MAX];
	uid_t uid;

	if (job_space.nproc == 0 ||
	    spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS || uid == 0)
		return 0;
	if (job_space_limit_procs(job_space.nproc, err, sizeof(err)) < 0) {
		slurm_error(LOG_PREFIX "%s", err);
		return -1;
	}
	return 0;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	char cwdbuf[JAIL_PATH_MAX];
	char err[JAIL_ERR_MAX];
	char note[JAIL_ERR_MAX];
	const char *cwd;

	(void)ac;
	(void)av;
	if (!spank_remote(sp) || !state.cfg || state.cfg->disabled)
		return 0;

	cwd = task_cwd(sp, cwdbuf, sizeof(cwdbuf));
	if (jail_enter(state.cfg, cwd, err, sizeof(err), note,
		       sizeof(note)) < 0) {
		slurm_error(LOG_PREFIX "cannot enter jail '%s': %s",
			    state.cfg->root, err);
		return -1;
	}
	if (note[0])
		slurm_info(LOG_PREFIX "%s", note);
	if (limit_procs(sp) < 0)
		return -1;
	/* with containers=on the filter comes in slurm_spank_task_init */
	if (!state.cfg->seccomp_off && !state.cfg->containers &&
	    filter_task(sp) < 0)
		return -1;
	return 0;
}

/*
 * containers=on (pyxis listed before this plugin in plugstack.conf): each
 * task, as the user, just before it execs (after pyxis' slurm_spank_task_init
 * started the step's container with enroot, a child of the task, and moved
 * the task into the container's namespaces). enroot needs a user and a mount
 * namespace to set the container up, so the filter can only come now; no
 * code of the user's runs before it: Slurm runs the task prologs and execs
 * the task after the last plugin's task_init. In a container the task holds
 * CAP_SYS_ADMIN in the container's user namespace and the filter goes on as
 * at task_init_privileged; a step without a container (the task is the
 * user's, no capabilities) gets it with no_new_privs.
 */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!spank_remote(sp) || !state.cfg || state.cfg->disabled ||
	    state.cfg->seccomp_off || !state.cfg->containers)
		return 0;
	return filter_task(sp);
}

/*
 * The end of the step (slurmstepd's main thread, root). It is still in the
 * jail only when the step failed before slurm_spank_user_init (a file it
 * could not open): it returns before slurmstepd reports the failure.
 */
int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	int rc;

	(void)sp;
	(void)ac;
	(void)av;
	forks.on = 0;
	rc = leave_view("at the end of the step");
	release_view();
	jail_config_free(state.cfg);
	state.cfg = NULL;
	return rc;
}
