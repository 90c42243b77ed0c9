/*
 * ctld_guard_test.c - libwarden_ctld_guard.so against a fake libslurmfull.so
 * (fake_slurmfull.c), run with the guard preloaded as the controller image runs slurmctld.
 * The deadlock itself is reproduced against real slurmctld in the dataplane tier
 * (tests/dataplane/test_controller_health.py); this checks the guard's decisions alone.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include <slurm/slurmdb.h>

#include "tap.h"

extern void *assoc_mgr_user_list;
extern int fake_calls;
extern bool fake_answer;
bool assoc_mgr_is_user_acct_coord(void *db_conn, uint32_t uid, char *acct_name, bool is_locked);
slurmdb_admin_level_t assoc_mgr_get_admin_level_locked(void *db_conn, uint32_t uid);

static void setup(void *list, bool answer)
{
	assoc_mgr_user_list = list;
	fake_answer = answer;
	fake_calls = 0;
}

static void coord(const char *what, void *list, bool locked, bool answer, bool want, int want_calls)
{
	char account[] = "physics";

	setup(list, answer);
	ok(assoc_mgr_is_user_acct_coord(NULL, 1000, account, locked) == want && fake_calls == want_calls,
	   "coordinator, %s: %s, Slurm's function called %d time(s)", what, want ? "yes" : "no",
	   want_calls);
}

static void admin(const char *what, void *list, bool answer, slurmdb_admin_level_t want, int want_calls)
{
	setup(list, answer);
	ok(assoc_mgr_get_admin_level_locked(NULL, 1000) == want && fake_calls == want_calls,
	   "admin level, %s: %d, Slurm's function called %d time(s)", what, (int)want, want_calls);
}

static bool preloaded(const char *name)
{
	Dl_info where;
	void *resolved = dlsym(RTLD_DEFAULT, name);

	if (!resolved || !dladdr(resolved, &where) || !where.dli_fname)
		return false;
	note("%s resolves to %s", name, where.dli_fname);
	return strstr(where.dli_fname, "ctld_guard") != NULL;
}

int main(void)
{
	int list = 1;

	if (!preloaded("assoc_mgr_is_user_acct_coord") || !preloaded("assoc_mgr_get_admin_level_locked")) {
		printf("NOT OK - the guard is not preloaded (run with LD_PRELOAD=.../libwarden_ctld_guard.so)\n");
		return 1;
	}
	coord("no user list, caller holds the lock", NULL, true, true, false, 0);
	coord("no user list, caller holds no lock (Slurm may load it)", NULL, false, true, true, 1);
	coord("a user list, caller holds the lock", &list, true, true, true, 1);
	coord("a user list, not a coordinator", &list, true, false, false, 1);
	admin("no user list", NULL, true, SLURMDB_ADMIN_NOTSET, 0);
	admin("a user list, an operator", &list, true, SLURMDB_ADMIN_OPERATOR, 1);
	admin("a user list, no operator", &list, false, SLURMDB_ADMIN_NONE, 1);
	return failures ? 1 : 0;
}
