/*
 * spank_jail.c - Slurm SPANK plugin that runs every task of every job step
 * inside the shared root file system (the jail).
 *
 * plugstack.conf (as Warden renders it for a worker group with node-local
 * /tmp and /dev/shm; see README.md):
 *   required /usr/lib/warden/spank_jail.so root=/mnt/jail bind=/tmp bind=/dev/shm
 *
 * The move happens in slurm_spank_task_init_privileged: once per task, in
 * the forked child, still root, before slurmstepd drops to the user and
 * execs. slurmstepd itself stays outside (moving it breaks step
 * authentication). Then, unless the job is root's (or `seccomp=off`), the
 * task gets the seccomp filter of job_filter.h: no new namespaces, mounts,
 * bpf or perf_event_open for ordinary users. See README.md for arguments
 * and messages.
 */
#define _GNU_SOURCE
#include <slurm/spank.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jail_enter.h"
#include "jail_helpers.h"
#include "job_filter.h"

SPANK_PLUGIN(spank_jail, 1);

#define LOG_PREFIX "spank_jail: "

/*
 * The only state of the plugin: the configuration parsed by
 * slurm_spank_init in slurmstepd, read by slurm_spank_task_init_privileged,
 * freed by slurm_spank_exit. SPANK offers no per-plugin context pointer, so
 * one static is needed to carry it between callbacks. NULL everywhere
 * except in slurmstepd (S_CTX_REMOTE).
 */
static struct jail_config *jail_cfg;

/* Parse and validate; on failure log and return NULL. */
static struct jail_config *load_config(int ac, char **av)
{
	struct jail_config *cfg = jail_config_new();
	char err[JAIL_ERR_MAX];

	if (!cfg) {
		slurm_error(LOG_PREFIX "out of memory");
		return NULL;
	}
	if (jail_config_parse(cfg, ac, av, err, sizeof(err)) < 0) {
		slurm_error(LOG_PREFIX "%s", err);
		jail_config_free(cfg);
		return NULL;
	}
	return cfg;
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
		jail_config_free(cfg);
		return 0;
	}

	jail_config_free(jail_cfg);
	jail_cfg = cfg;
	return 0;
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

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	char cwdbuf[JAIL_PATH_MAX];
	char err[JAIL_ERR_MAX];
	char note[JAIL_ERR_MAX];
	const char *cwd;

	(void)ac;
	(void)av;
	if (!spank_remote(sp) || !jail_cfg || jail_cfg->disabled)
		return 0;

	cwd = task_cwd(sp, cwdbuf, sizeof(cwdbuf));
	if (jail_enter(jail_cfg, cwd, err, sizeof(err), note,
		       sizeof(note)) < 0) {
		slurm_error(LOG_PREFIX "cannot enter jail '%s': %s",
			    jail_cfg->root, err);
		return -1;
	}
	if (note[0])
		slurm_info(LOG_PREFIX "%s", note);
	if (!jail_cfg->seccomp_off && filter_task(sp) < 0)
		return -1;
	return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void)sp;
	(void)ac;
	(void)av;
	jail_config_free(jail_cfg);
	jail_cfg = NULL;
	return 0;
}
