/*
 * jail_run.c - run one command inside a jail exactly as the spank_jail plugin
 * runs a task: the same argument parser (jail_config_parse) and the same
 * mount/pivot_root sequence (jail_enter), then execvp instead of handing the
 * process back to slurmstepd. Needs root (CAP_SYS_ADMIN); no Slurm headers.
 *
 *   jail_run root=/mnt/jail [bind=SRC[:DST[:ro]]]... [disabled] -- COMMAND [ARG]...
 *
 * The arguments before "--" are plugstack.conf's, word for word. The working
 * directory inside the jail is chosen as the plugin chooses the task's: $PWD,
 * else the current directory; "/" when it does not exist in the jail (the
 * plugin's note is printed on stderr). Used by hack/gpu-check.sh.
 *
 * Exit status: the command's, or 125 when the arguments are wrong or the jail
 * cannot be entered, 126/127 when the command cannot be executed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jail_enter.h"
#include "jail_helpers.h"

#define PROG "jail_run: "

static int usage(void)
{
	fprintf(stderr,
		"usage: jail_run root=DIR [bind=SRC[:DST[:ro]]]... [disabled] "
		"-- COMMAND [ARG]...\n");
	return 125;
}

/* The plugin's task_cwd: PWD when absolute, else the current directory. */
static const char *task_cwd(char *buf, size_t len)
{
	const char *pwd = getenv("PWD");

	if (pwd && pwd[0] == '/' && strlen(pwd) < len) {
		memcpy(buf, pwd, strlen(pwd) + 1);
		return buf;
	}
	if (getcwd(buf, len) && buf[0] == '/')
		return buf;
	return NULL;
}

int main(int argc, char **argv)
{
	char err[JAIL_ERR_MAX], note[JAIL_ERR_MAX], cwdbuf[JAIL_PATH_MAX];
	struct jail_config *cfg;
	const char *cwd;
	int sep;

	for (sep = 1; sep < argc; sep++)
		if (strcmp(argv[sep], "--") == 0)
			break;
	if (sep >= argc - 1)
		return usage();

	cfg = jail_config_new();
	if (!cfg) {
		fprintf(stderr, PROG "out of memory\n");
		return 125;
	}
	if (jail_config_parse(cfg, sep - 1, argv + 1, err, sizeof(err)) < 0) {
		fprintf(stderr, PROG "%s\n", err);
		jail_config_free(cfg);
		return 125;
	}
	if (!cfg->disabled) {
		cwd = task_cwd(cwdbuf, sizeof(cwdbuf));
		if (jail_enter(cfg, cwd, err, sizeof(err), note,
			       sizeof(note)) < 0) {
			fprintf(stderr, PROG "cannot enter jail '%s': %s\n",
				cfg->root, err);
			jail_config_free(cfg);
			return 125;
		}
		if (note[0])
			fprintf(stderr, PROG "%s\n", note);
	}
	jail_config_free(cfg);

	execvp(argv[sep + 1], argv + sep + 1);
	fprintf(stderr, PROG "cannot execute '%s': %s\n", argv[sep + 1],
		strerror(errno));
	return errno == ENOENT ? 127 : 126;
}
