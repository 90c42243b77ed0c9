/*
 * fake_slurmfull.c - the symbols of Slurm's libslurmfull.so that ctld_guard.c touches, for
 * its C test (ctld_guard_test.c): no Slurm daemon can be linked into a test. The two fake
 * assoc_mgr functions count their calls and answer `fake_answer` (an admin level of
 * SLURMDB_ADMIN_OPERATOR when true).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <slurm/slurmdb.h>

void *assoc_mgr_user_list;
int fake_calls;
bool fake_answer;

bool assoc_mgr_is_user_acct_coord(void *db_conn, uint32_t uid, char *acct_name, bool is_locked);
slurmdb_admin_level_t assoc_mgr_get_admin_level_locked(void *db_conn, uint32_t uid);
void slurm_debug(const char *fmt, ...);
void slurm_error(const char *fmt, ...);

bool assoc_mgr_is_user_acct_coord(void *db_conn, uint32_t uid, char *acct_name, bool is_locked)
{
	(void)db_conn;
	(void)uid;
	(void)acct_name;
	(void)is_locked;
	fake_calls++;
	return fake_answer;
}

slurmdb_admin_level_t assoc_mgr_get_admin_level_locked(void *db_conn, uint32_t uid)
{
	(void)db_conn;
	(void)uid;
	fake_calls++;
	return fake_answer ? SLURMDB_ADMIN_OPERATOR : SLURMDB_ADMIN_NONE;
}

static void say(const char *level, const char *fmt, va_list ap)
{
	printf("  # slurm %s: ", level);
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
}

void slurm_debug(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say("debug", fmt, ap);
	va_end(ap);
}

void slurm_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say("error", fmt, ap);
	va_end(ap);
}
