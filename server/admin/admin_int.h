/* admin_int.h - what psdbd's admin commands share: their messages, their argument parsing and
 * opening a data directory. */
#ifndef PSDBD_ADMIN_INT_H
#define PSDBD_ADMIN_INT_H

#include <getopt.h>

#include "admin.h"
#include "index.h"
#include "store.h"

/* Writes "psdbd CMD: message" on stderr; returns 1, a command's failure status. */
int admin_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Names and scopes reach the access log, `list` output (JSON) and people's screens: the one rule
 * for names (psdb__name_check: UTF-8 without control, format or separator characters), the
 * message naming the code point ("--name contains U+202E (a Unicode format character)"). Returns
 * 0, or 1 after the message. */
int admin_bad_text(const char *cmd, const char *option, const char *s);

/* The `val` of the shared --index option: outside the characters, so that no command's own
 * one-letter `val` (token create's 'i' for --expires-in) can meet it. */
#define ADMIN_OPT_INDEX 0x100

/* admin_parse's answer when the command is to go on (any other answer is its exit status). */
#define ADMIN_GO_ON (-1)

/* Which of the shared options a command takes (admin_parse's `flags`). */
enum {
    ADMIN_DATA_DIR = 1, /* --data-dir DIR, defaulting to psdbd's default data directory, and
                         * --index URL (a PostgreSQL index instead of DIR/index.sqlite) */
    ADMIN_JSON = 2,     /* --json */
    ADMIN_OPERAND = 4   /* at most one word after the options (what the command acts on: an id) */
};

typedef struct admin_args {
    char *dir;   /* --data-dir (ADMIN_DATA_DIR), the caller's to free; NULL without the flag */
    char *index; /* --index (ADMIN_DATA_DIR), the caller's to free; NULL: DIR/index.sqlite */
    int json;    /* --json was given (ADMIN_JSON) */
    /* The word after the options (ADMIN_OPERAND), borrowed from argv; NULL when none was given
     * (the command says whether it needs one). */
    const char *operand;
} admin_args;

/* A command's own option: `val` of its struct option and its argument (NULL without one).
 * Returns 0, or nonzero after writing a message with admin_fail. */
typedef int (*admin_option_fn)(int val, const char *arg, void *ctx);

/* Parses argv (argv[0] is the command's last word) with getopt_long: the shared options that
 * `flags` names, --help/-h (prints usage(ctx)), and the command's own `opts` (terminated by a zero
 * entry; their `val`s must not be 'd', 'j', 'h' or ADMIN_OPT_INDEX), each handed to on_opt. Words
 * after the options are refused, but for one with ADMIN_OPERAND. Returns ADMIN_GO_ON, or the
 * command's exit status: 0 when the usage was printed, 1 after a message (bad arguments). *out is
 * set in every case and freed by the caller (admin_args_free). */
int admin_parse(const char *cmd, int argc, char **argv, unsigned flags, const struct option *opts,
                admin_option_fn on_opt, void *ctx, void (*usage)(void *ctx), admin_args *out);

void admin_args_free(admin_args *a);

/* Opens the data directory's store (without touching tmp/) and index for a command; `may_init`:
 * the command may set up a new data directory (psdbd_data_open_index_at, with a's --index).
 * 0, or 1 after a message. */
int admin_open_data(const char *cmd, const admin_args *a, int may_init, psdbd_store *store,
                    psdbd_index **ix);

/* How many blob files the store holds (first_only: stops at the first, so 0 or 1); with
 * older_than > 0, only files last modified before that time count. */
uint64_t admin_blob_files(const psdbd_store *store, int first_only, int64_t older_than);

/* An index with no PSDB beside blob files looks lost (gc refuses, check reports it) only when some
 * of those files are older than this: a publish killed between storing its blob and indexing it
 * leaves a young unindexed blob beside a healthy, still empty index. */
#define ADMIN_LOST_INDEX_MIN_AGE 3600

/* Runs `psdbd check`'s checks (not --deep) of the index against the store, writing nothing:
 * returns how many problems check would report, with the first one's text in `first` ("" with
 * none). gc refuses to delete while this is not 0: an index that does not describe this store
 * (another instance's, an old copy, a damaged one) makes live blobs look unreferenced. */
uint64_t admin_check_problems(const psdbd_store *store, psdbd_index *ix, char *first,
                              size_t first_size);

/* Reports a file under blobs/ that is not a blob (psdbd_store_walk's stray callback): on stdout,
 * or on stderr when stdout carries JSON. */
void admin_note_stray(const char *path, int json);

/* `psdbd token|key list|revoke` (what: "token" or "key"; argv[0] is "list" or "revoke"). */
int admin_list_or_revoke(const char *what, int argc, char **argv);

/* `psdbd WHAT VERB|list|revoke ...` (argv[0] is WHAT): runs `run` for VERB (with argv[0] VERB),
 * admin_list_or_revoke for list and revoke, usage for --help; returns the exit status. */
int admin_credential_command(const char *what, const char *verb, int (*run)(int, char **),
                             void (*usage)(void *), int argc, char **argv);

/* One verb of `psdbd WHAT VERB ...`: its name and what runs it (with argv[0] VERB). */
typedef struct admin_verb {
    const char *name;
    int (*run)(int argc, char **argv);
} admin_verb;

/* `psdbd WHAT VERB ...` (argv[0] is WHAT): runs the one of the n verbs argv[1] names, usage for
 * --help, else one line naming the verbs; returns the exit status. */
int admin_verb_command(const char *what, const admin_verb *verbs, size_t n, void (*usage)(void *),
                       int argc, char **argv);

#endif
